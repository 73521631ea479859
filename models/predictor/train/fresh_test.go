package train

import (
	"testing"

	"github.com/phaseless/phaseless/models/grade"
)

// TestFreshSetIsUnseen: the fresh set is the project's own, none of its
// requests is a training, validation or test prompt of the edge split, and
// every reference parses (loadFresh) and names a grader kind.
func TestFreshSetIsUnseen(t *testing.T) {
	d, s := loadSplit(t, false)
	seen := map[string]string{}
	for _, set := range [][]Example{s.Train, s.Val, s.Test} {
		for _, e := range set {
			seen[PromptKey(e.Text)] = e.Source
		}
	}
	kinds := map[string]int{}
	fresh := map[string]bool{}
	for _, e := range d.Fresh {
		k := PromptKey(e.Text)
		if src, ok := seen[k]; ok {
			t.Errorf("fresh request %q is also a %s prompt of the edge split", e.Text, src)
		}
		if fresh[k] {
			t.Errorf("fresh request %q twice", e.Text)
		}
		fresh[k] = true
		kinds[e.Source]++
		if e.Ref == nil || (e.Source == SourceFreshCar) != (e.Ref.Kind == grade.Command) {
			t.Errorf("%q (%s): reference %+v", e.Text, e.Source, e.Ref)
		}
	}
	if kinds[SourceFreshOpen] < 150 || kinds[SourceFreshCar] < 150 {
		t.Errorf("fresh set %v: want a few hundred of each kind", kinds)
	}
}

// TestDevSetIsUnseen: the development set shares no request with the fresh
// set (which must stay a test nobody tuned on) nor with the edge split, and
// its references name the grader kind of their kind.
func TestDevSetIsUnseen(t *testing.T) {
	d, s := loadSplit(t, false)
	var dev, dev2 []Example
	for _, e := range d.Dev {
		if e.Source == SourceDev2Open || e.Source == SourceDev2Car {
			dev2 = append(dev2, e)
		} else {
			dev = append(dev, e)
		}
	}
	kinds := checkUnseen(t, "dev", dev, SourceDevCar, s.Train, s.Val, s.Test, d.Fresh)
	if kinds[SourceDevOpen] < 100 || kinds[SourceDevCar] < 100 {
		t.Errorf("dev set %v: want over a hundred of each kind", kinds)
	}
	// The second development set was written after fresh2 and the spoken
	// set, and shares no request with any routing file.
	kinds = checkUnseen(t, "dev2", dev2, SourceDev2Car, s.Train, s.Val, s.Test, d.Fresh, d.Fresh2, d.Spoken, dev)
	if kinds[SourceDev2Open] < 80 || kinds[SourceDev2Car] < 80 {
		t.Errorf("dev2 set %v: want at least 80 of each kind", kinds)
	}
}

// TestFresh2SetIsUnseen: the second held-out set shares no request with
// any other routing file or the edge split, and its references name the
// grader kind of their kind.
func TestFresh2SetIsUnseen(t *testing.T) {
	d, s := loadSplit(t, false)
	kinds := checkUnseen(t, "fresh2", d.Fresh2, SourceFresh2Car, s.Train, s.Val, s.Test, d.Fresh, d.Dev, d.Spoken)
	if kinds[SourceFresh2Open] < 100 || kinds[SourceFresh2Car] < 75 {
		t.Errorf("fresh2 set %v: want about a hundred of each kind", kinds)
	}
}

// TestFresh3SetIsUnseen: the third held-out set (issue 35) shares no
// request with any other routing file or the edge split.
func TestFresh3SetIsUnseen(t *testing.T) {
	d, s := loadSplit(t, false)
	kinds := checkUnseen(t, "fresh3", d.Fresh3, SourceFresh3Car, s.Train, s.Val, s.Test, d.Fresh, d.Fresh2, d.Dev, d.Spoken)
	if kinds[SourceFresh3Open] < 30 || kinds[SourceFresh3Car] < 40 {
		t.Errorf("fresh3 set %v: want the 32 open questions and 40 car commands it was committed with", kinds)
	}
}

// checkUnseen fails for every request of set that is a prompt of others
// (or twice in set), or whose reference is not a command exactly when its
// source is carSource, and counts set's requests per source.
func checkUnseen(t *testing.T, name string, set []Example, carSource string, others ...[]Example) map[string]int {
	t.Helper()
	seen := map[string]string{}
	for _, o := range others {
		for _, e := range o {
			seen[PromptKey(e.Text)] = e.Source
		}
	}
	kinds := map[string]int{}
	for _, e := range set {
		k := PromptKey(e.Text)
		if src, ok := seen[k]; ok {
			t.Errorf("%s request %q is also a %s prompt", name, e.Text, src)
		}
		seen[k] = e.Source
		kinds[e.Source]++
		if e.Ref == nil || (e.Source == carSource) != (e.Ref.Kind == grade.Command) {
			t.Errorf("%q (%s): reference %+v", e.Text, e.Source, e.Ref)
		}
	}
	return kinds
}

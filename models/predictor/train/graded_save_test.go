package train

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// TestGradedSaveRoundTrip saves a cache over an older one and reads it
// back: the same entries, and no temporary file left beside it.
func TestGradedSaveRoundTrip(t *testing.T) {
	dir := t.TempDir()
	h := CurrentHeader()
	probe := make([]float32, 1+2*h.ProbeSteps)
	probe[0] = 1.5
	old := &Graded{Header: h, Entries: map[string]*GradedEntry{"a": {Key: "a", Probe: probe}}}
	if err := old.Save(dir); err != nil {
		t.Fatal(err)
	}
	g := &Graded{Header: h, Entries: map[string]*GradedEntry{
		"b": {Key: "b", Probe: probe},
		"c": {Key: "c", Probe: probe},
	}}
	if err := g.Save(dir); err != nil {
		t.Fatal(err)
	}
	got, err := LoadGraded(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, g) {
		t.Fatalf("loaded %+v, want %+v", got, g)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != filepath.Base(GradedFile) {
		t.Fatalf("directory holds %v, want only %s", ents, GradedFile)
	}
}

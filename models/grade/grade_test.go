package grade

import (
	"testing"
)

func TestGrade(t *testing.T) {
	for _, tc := range []struct {
		ref    string
		answer string
		ok     bool
	}{
		{"=Ottawa", "Ottawa.", true},
		{"=Ottawa", "ottawa", true},
		{"=Ottawa", "Toronto.", false},
		{"=Ottawa", "", false},
		{"=The Brazilian real", "Brazilian real.", true},
		{"=William Shakespeare|Shakespeare", "Shakespeare.", true},
		{"=William Shakespeare|Shakespeare", "It was Shakespeare, I think.", false}, // exact means exact
		{"#391", "The answer is 391.", true},
		{"#391", "The answer is 2200.", false},
		{"#2200", "The answer is 2,200.", true},
		{"#2.54", "About 2.54 centimetres.", true},
		{"#391", "Let me show that calculation on the screen.", false},
		{"@incar-0 21", "Setting the cabin temperature to 21 degrees.", true},
		{"@incar-0 21", "Setting the cabin temperature to 22 degrees.", false}, // wrong value
		{"@incar-0 21", "Playing jazz music.", false},                          // wrong intent
		{"@incar-1|incar-0", "Climate set to 24 degrees.", true},               // any listed intent
		{"@next_song", "Next track.", true},
		{"@incar-6|directions Denver", "Starting navigation to Madrid. About 35 minutes.", false},
		{"@incar-6|directions Denver", "Route to Denver set. You will arrive in 12 minutes.", true},
		{"@incar-7 Main Street", "Starting navigation to Main Street.", true},
		{"~a turbocharger uses exhaust gas to spin a turbine that drives a compressor", "A turbine spun by exhaust gas drives a compressor.", true},
		{"~a turbocharger uses exhaust gas to spin a turbine that drives a compressor", "I put the converted value on the screen.", false},
	} {
		ref, err := Parse(tc.ref)
		if err != nil {
			t.Fatalf("%q: %v", tc.ref, err)
		}
		if v := Grade(ref, tc.answer); v.OK != tc.ok {
			t.Errorf("%s vs %q: %+v, want ok=%v", tc.ref, tc.answer, v, tc.ok)
		}
		if back, err := Parse(ref.String()); err != nil || back.String() != ref.String() {
			t.Errorf("%q: String %q does not parse back (%v)", tc.ref, ref.String(), err)
		}
	}
}

func TestParseRejects(t *testing.T) {
	for _, s := range []string{"", "Ottawa", "#many", "@no_such_intent", "@incar-999 x"} {
		if _, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) accepted", s)
		}
	}
}

// TestAgainst: shadow evaluation grades a local answer with the cloud's as
// the reference.
func TestAgainst(t *testing.T) {
	for _, tc := range []struct {
		local, cloud string
		ok           bool
	}{
		{"Paris.", "Paris.", true},
		{"The answer is 391.", "391", true},
		{"The answer is 2200.", "The answer is 391.", false},
		{"Lyon.", "Paris.", false},
		{"Vaccines train the immune system to recognise a germ.", "A vaccine trains your immune system to recognise a germ and fight it.", true},
		{"It is Sunday, August 14.", "Vaccines show the immune system a harmless copy of a germ so it makes antibodies.", false},
	} {
		if v := Against(tc.local, tc.cloud); v.OK != tc.ok {
			t.Errorf("Against(%q, %q) = %+v, want ok=%v", tc.local, tc.cloud, v, tc.ok)
		}
	}
}

func TestOverlapBounds(t *testing.T) {
	if f := Overlap("the the the", "the"); f != 0 {
		t.Errorf("stopwords only: %v", f)
	}
	if f := Overlap("engine turbine compressor", "engine turbine compressor"); f != 1 {
		t.Errorf("identical: %v", f)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"=a|b", "#3.5", "@incar-0 21", "~text", "@next_song x,y"} {
		f.Add(s, "answer")
	}
	f.Fuzz(func(t *testing.T, s, answer string) {
		r, err := Parse(s)
		if err != nil {
			return
		}
		v := Grade(r, answer)
		if v.Score < 0 || v.Score > 1 || (v.OK && v.Score == 0) {
			t.Fatalf("%q vs %q: %+v", s, answer, v)
		}
		if _, err := Parse(r.String()); err != nil {
			t.Fatalf("%q: String %q does not parse: %v", s, r.String(), err)
		}
	})
}

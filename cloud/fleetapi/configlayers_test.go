package fleetapi

import (
	"maps"
	"testing"

	"github.com/phaseless/phaseless/transport/fleetwire"
)

// TestMergeConfigPrecedence checks the documented order: fleet < board <
// region < cohort < other labels by name < device, whatever order the
// layers are stored in.
func TestMergeConfigPrecedence(t *testing.T) {
	layers := map[string]*ConfigLayer{
		"fleet":        {Values: map[string]string{"a": "fleet", "b": "fleet", "c": "fleet", "d": "fleet", "e": "fleet", "f": "fleet"}},
		"board=rk3588": {Values: map[string]string{"b": "board", "c": "board", "d": "board", "e": "board", "f": "board"}},
		"region=eu":    {Values: map[string]string{"c": "region", "d": "region", "e": "region", "f": "region"}},
		"cohort=beta":  {Values: map[string]string{"d": "cohort", "e": "cohort", "f": "cohort"}},
		"aaa=x":        {Values: map[string]string{"e": "aaa", "f": "aaa"}},
		"zzz=y":        {Values: map[string]string{"e": "zzz", "f": "zzz"}},
		"region=us":    {Values: map[string]string{"a": "us"}},
	}
	d := &Device{
		Status:    &fleetwire.Status{Board: "rk3588"},
		Labels:    map[string]string{"region": "eu", "cohort": "beta", "aaa": "x", "zzz": "y"},
		Overrides: map[string]string{"f": "device"},
	}
	for range 20 { // map order must not matter
		vals, src := MergeConfig(d, layers)
		want := map[string]string{"a": "fleet", "b": "board", "c": "region", "d": "cohort", "e": "zzz", "f": "device"}
		if !maps.Equal(vals, want) {
			t.Fatalf("values %v, want %v", vals, want)
		}
		wantSrc := map[string]string{"a": "fleet", "b": "board=rk3588", "c": "region=eu", "d": "cohort=beta", "e": "zzz=y", "f": "device"}
		if !maps.Equal(src, wantSrc) {
			t.Fatalf("sources %v, want %v", src, wantSrc)
		}
	}
	// A device with no status and no labels gets the fleet layer only.
	vals, _ := MergeConfig(&Device{}, layers)
	if len(vals) != 6 || vals["b"] != "fleet" {
		t.Fatalf("bare device: %v", vals)
	}
}

func TestParseScope(t *testing.T) {
	for s, ok := range map[string]bool{
		"fleet": true, "region=eu": true, "board=rk3588": true, "cohort=beta": true,
		"": false, "region": false, "=eu": false, "region=": false, "version=1.2": false, "a/b=c": false, "a=b=c": true,
	} {
		if _, _, err := ParseScope(s); (err == nil) != ok {
			t.Errorf("ParseScope(%q) = %v, want ok=%v", s, err, ok)
		}
	}
}

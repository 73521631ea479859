package probegate

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/models/predictor"
)

// table answers from a map: the fake of a model that knows some prompts.
func table(answers map[string]string) Answerer {
	return func(_ context.Context, prompt string) (string, error) { return answers[prompt], nil }
}

var set = firmware.ProbeSet{Name: "t", Margin: 0.25, Probes: []firmware.Probe{
	{Prompt: "capital of France", Expect: "=Paris"},
	{Prompt: "2+2", Expect: "#4"},
	{Prompt: "temperature 21", Expect: "@incar-0 21"},
	{Prompt: "capital of Spain", Expect: "=Madrid"},
}}

var allRight = table(map[string]string{"capital of France": "Paris", "2+2": "It is 4.", "temperature 21": "Setting the cabin temperature to 21 degrees.", "capital of Spain": "Madrid"})

func TestRunComparesScores(t *testing.T) {
	threeRight := table(map[string]string{"capital of France": "Paris", "2+2": "4", "capital of Spain": "Madrid"})
	twoRight := table(map[string]string{"capital of France": "Paris", "2+2": "5", "capital of Spain": "Madrid", "temperature 21": "Playing jazz."})
	for _, c := range []struct {
		name                 string
		cand, inst           Answerer
		margin               float64
		pass                 bool
		candRight, instRight int
	}{
		{"equal", allRight, allRight, 0, true, 4, 4},
		{"better", threeRight, twoRight, 0, true, 3, 2},
		{"within margin", threeRight, allRight, 0.25, true, 3, 4},
		{"below margin", twoRight, allRight, 0.25, false, 2, 4},
		{"worse without margin", threeRight, allRight, 0, false, 3, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := Run(context.Background(), set, c.margin, c.cand, c.inst)
			if err != nil {
				t.Fatal(err)
			}
			if r.Pass != c.pass || r.Candidate.Right != c.candRight || r.Installed.Right != c.instRight || r.Probes != 4 {
				t.Fatalf("%+v", r)
			}
			if err := r.Err(); (err == nil) != c.pass || (err != nil && !errors.Is(err, ErrFailed)) {
				t.Fatalf("Err() = %v", err)
			}
			if !c.pass && (!strings.Contains(r.String(), "probe gate failed") || len(r.Misses) == 0) {
				t.Fatalf("report %q", r)
			}
		})
	}
	r, _ := Run(context.Background(), set, 0.25, twoRight, allRight)
	for _, want := range []string{"candidate 0.500 (2/4 right)", "installed 1.000 (4/4 right)", "margin 0.250", `"2+2" → "5"`} {
		if !strings.Contains(r.String(), want) {
			t.Errorf("report %q lacks %q", r, want)
		}
	}
}

// TestMeasureThenCompare is the gate split in two, as an agent update's
// trial boot runs it: the same verdict as Run.
func TestMeasureThenCompare(t *testing.T) {
	twoRight := table(map[string]string{"capital of France": "Paris", "capital of Spain": "Madrid"})
	inst, err := Measure(context.Background(), set, allRight)
	if err != nil {
		t.Fatal(err)
	}
	cand, err := Measure(context.Background(), set, twoRight)
	if err != nil {
		t.Fatal(err)
	}
	run, _ := Run(context.Background(), set, 0.25, twoRight, allRight)
	got := Compare(set, 0.25, cand, inst)
	if got.Pass || got.Candidate != run.Candidate || got.Installed != run.Installed || inst.Mean != 1 || cand.Right != 2 {
		t.Fatalf("Compare %+v, Run %+v", got, run)
	}
	if _, err := Measure(context.Background(), firmware.ProbeSet{}, allRight); !errors.Is(err, firmware.ErrProbeSet) {
		t.Errorf("empty set: %v", err)
	}
}

func TestRunRefuses(t *testing.T) {
	bad := set
	bad.Probes = append([]firmware.Probe{{Prompt: "x", Expect: "@no_such_intent"}}, set.Probes...)
	if _, err := Run(context.Background(), bad, 0, allRight, allRight); !errors.Is(err, firmware.ErrProbeSet) {
		t.Errorf("unknown intent: %v", err)
	}
	if _, err := Run(context.Background(), firmware.ProbeSet{}, 0, allRight, allRight); !errors.Is(err, firmware.ErrProbeSet) {
		t.Errorf("empty set: %v", err)
	}
	boom := errors.New("engine closed")
	failing := func(context.Context, string) (string, error) { return "", boom }
	if _, err := Run(context.Background(), set, 0, failing, allRight); !errors.Is(err, boom) {
		t.Errorf("candidate error: %v", err)
	}
	if _, err := Run(context.Background(), set, 0, allRight, failing); !errors.Is(err, boom) {
		t.Errorf("installed error: %v", err)
	}
}

func TestMargin(t *testing.T) {
	if m := Margin(firmware.ProbeSet{Margin: 0.1}, 0); m != 0.1 {
		t.Errorf("no override: %v", m)
	}
	if m := Margin(firmware.ProbeSet{Margin: 0.1}, 0.02); m != 0.02 {
		t.Errorf("override: %v", m)
	}
}

// TestRouterAnswers grades routes: the entropy rule sends high-entropy
// text to the cloud and plain requests stay local.
func TestRouterAnswers(t *testing.T) {
	ask := Router(predictor.EntropyRule{}, 0)
	local, err := ask(context.Background(), "turn on the heated seats please")
	if err != nil {
		t.Fatal(err)
	}
	cloud, err := ask(context.Background(), "Ωπ∑ 9f3a$#@!~ qz8Xv^&*(k) ∂√∫≈ 0xDEADBEEF ¿¡ «» 😀🚗 ŁØŒ")
	if err != nil {
		t.Fatal(err)
	}
	if local != RouteLocal || cloud != RouteCloud {
		t.Fatalf("routes %q and %q, want local and cloud", local, cloud)
	}
}

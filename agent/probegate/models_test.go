package probegate

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/models/edgemodel"
	"github.com/phaseless/phaseless/models/lm"
)

// readProbes reads the agent's test probe set (agent/testdata/README.md).
func readProbes(t *testing.T) firmware.ProbeSet {
	t.Helper()
	f, err := os.Open("../testdata/probes-incar.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	set := firmware.ProbeSet{Name: "incar", Margin: 0.1}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var p firmware.Probe
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			t.Fatal(err)
		}
		set.Probes = append(set.Probes, p)
	}
	return set
}

func engine(t *testing.T, open func() (*lm.Model, error)) Answerer {
	t.Helper()
	m, err := open()
	if err != nil {
		t.Fatal(err)
	}
	eng, err := lm.NewEngine(m, lm.EngineConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	return Generator(eng, firmware.DefaultProbeTokens)
}

// TestModelGateOnRealModels runs the gate on the shipped edge model and on
// an earlier training checkpoint of it (step 600 of 10,000,
// agent/testdata): the checkpoint fails against the shipped model, the
// shipped model passes against itself and against the checkpoint.
func TestModelGateOnRealModels(t *testing.T) {
	if raceEnabled {
		t.Skip("two real models answer every probe: minutes under -race; make test runs it without")
	}
	set := readProbes(t)
	shipped := engine(t, edgemodel.Open)
	early := engine(t, func() (*lm.Model, error) { return lm.Load("../testdata/edge-step600.gguf") })
	ctx := context.Background()

	worse, err := Run(ctx, set, set.Margin, early, shipped)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(worse)
	if worse.Pass || worse.Installed.Right < 8 || worse.Candidate.Right > 2 {
		t.Fatalf("checkpoint against the shipped model: %s", worse)
	}
	equal, err := Run(ctx, set, 0, shipped, shipped)
	if err != nil {
		t.Fatal(err)
	}
	if !equal.Pass || equal.Candidate != equal.Installed {
		t.Fatalf("the shipped model against itself (greedy, so the same answers): %s", equal)
	}
	better, err := Run(ctx, set, 0, shipped, early)
	if err != nil {
		t.Fatal(err)
	}
	if !better.Pass || better.Candidate.Mean <= better.Installed.Mean {
		t.Fatalf("the shipped model replacing the checkpoint: %s", better)
	}
}

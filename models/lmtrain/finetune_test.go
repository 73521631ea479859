package lmtrain

import (
	"bytes"
	"context"
	"slices"
	"testing"

	"github.com/phaseless/phaseless/models/lm"
)

// TestFineTuneStartsFromInit trains a model, exports it as GGUF (F32),
// loads it back as a fine-tuning run's Init and checks the weights arrive
// unchanged, that the run starts from them (its first validation loss is
// the trained model's, far below a fresh init's), and that a preset that
// fine-tunes refuses to run without a base.
func TestFineTuneStartsFromInit(t *testing.T) {
	base, err := Train(context.Background(), smallRun(t, 40))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := ExportGGUF(&buf, base.Params, Provenance{Name: "base"}, lm.F32); err != nil {
		t.Fatal(err)
	}
	m, err := lm.ReadBytes(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	r := smallRun(t, 4)
	init, err := ParamsFromModel(m, r.Model)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(init.Flat, base.Params.Flat) {
		t.Fatal("weights changed on the way through GGUF")
	}
	r.Init = init
	r.Train.LR, r.Train.MinLR = 1e-9, 1e-9 // four steps that barely move: the start is what is measured
	tuned, err := Train(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := Train(context.Background(), smallRun(t, 4))
	if err != nil {
		t.Fatal(err)
	}
	if !(tuned.ValLoss < fresh.ValLoss-1) || tuned.ValLoss > base.ValLoss+0.05 {
		t.Fatalf("fine-tune val loss %.3f; base %.3f, fresh %.3f", tuned.ValLoss, base.ValLoss, fresh.ValLoss)
	}
	other := r.Model
	other.Dim = 64
	if _, err := ParamsFromModel(m, other); err == nil {
		t.Error("a model of another shape was accepted as Init")
	}
	if _, err := RunJob(context.Background(), Job{Preset: EdgeToolsPreset(), Out: t.TempDir() + "/x.gguf"}); err == nil {
		t.Error("the edge-tools preset ran without a base model")
	}
	if EdgeToolsPreset().ArtifactName() != "phaseless-edge" || EdgePreset().ArtifactName() != "phaseless-edge" {
		t.Error("the tools stage does not keep the edge model's name")
	}
}

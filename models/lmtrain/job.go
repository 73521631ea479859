package lmtrain

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/phaseless/phaseless/internal/atomicfile"

	"github.com/phaseless/phaseless/models/lm"
)

// Job trains a preset and writes the GGUF file: what `phaselessctl lm train`
// runs.
type Job struct {
	Preset     Preset
	Out        string   // GGUF file to write
	DType      lm.DType // tensor storage; F16 keeps the shipped files small
	Checkpoint string   // resumable state; "" = none
	StopAt     int      // end after this many steps (see Run.StopAt); 0 = run the preset to the end
	Init       *Params  // weights to start from (a FineTune preset's base model); nil = random
	Command    string   // recorded in the metadata as the reproducing command
	Progress   io.Writer
	Logf       func(string, ...any)
}

// RunJob builds the preset's corpus, trains and exports. The GGUF file is
// written to a temporary name and renamed, so Out is never half-written.
func RunJob(ctx context.Context, j Job) (*Result, error) {
	p := j.Preset
	if p.FineTune && j.Init == nil {
		return nil, fmt.Errorf("preset %s fine-tunes a trained model: give the base model to start from", p.Name)
	}
	split, err := p.Corpus(p.Train.Seed)
	if err != nil {
		return nil, err
	}
	train, val := NewDataset(split.Train), NewDataset(split.Test)
	if j.Logf != nil {
		j.Logf("preset %s: %d weights; corpus %d train / %d held-out examples (%d / %d tokens)",
			p.Name, NewParams(p.Model).Count(), len(split.Train), len(split.Test), len(train.Tokens), len(val.Tokens))
	}
	res, err := Train(ctx, Run{Model: p.Model, Train: p.Train, Data: train, Val: val, Checkpoint: j.Checkpoint, StopAt: j.StopAt, Init: j.Init, Progress: j.Progress, Logf: j.Logf})
	if err != nil {
		return res, err
	}
	var buf bytes.Buffer
	prov := Provenance{Name: p.ArtifactName(), Description: p.Description, Preset: p.Name, Command: j.Command,
		Train: p.Train, Sources: p.Sources, Result: res, Sampling: p.Sampling}
	if err := ExportGGUF(&buf, res.Params, prov, j.DType); err != nil {
		return res, err
	}
	if dir := filepath.Dir(j.Out); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return res, err
		}
	}
	return res, atomicfile.WriteFile(j.Out, buf.Bytes(), 0o644)
}

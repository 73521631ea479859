package ctl

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/models/lm"
)

func runLMTrain(args ...string) (string, error) {
	var out, errb bytes.Buffer
	cio := cli.IO{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
	err := Root().Dispatch(context.Background(), cio, append([]string{"lm", "train"}, args...))
	return out.String(), err
}

func TestLMTrainRejectsBadFlags(t *testing.T) {
	if _, err := runLMTrain("--preset", "edge"); !errors.Is(err, cli.ErrUsage) {
		t.Errorf("no --out: %v, want a usage error", err)
	}
	var fe *cli.FieldError
	if _, err := runLMTrain("--preset", "huge", "--out", "x.gguf"); !errors.As(err, &fe) || fe.Field != "preset" {
		t.Errorf("unknown preset: %v", err)
	}
	if _, err := runLMTrain("--preset", "edge", "--out", "x.gguf", "--dtype", "f8"); !errors.As(err, &fe) || fe.Field != "dtype" {
		t.Errorf("bad dtype: %v", err)
	}
}

// TestLMTrainWritesLoadableModel runs the edge preset for two steps and loads
// the result in the engine.
func TestLMTrainWritesLoadableModel(t *testing.T) {
	if raceEnabled {
		t.Skip("trains or evaluates models: make test runs it without -race, which adds minutes and nothing else here")
	}
	path := filepath.Join(t.TempDir(), "edge.gguf")
	out, err := runLMTrain("--preset", "edge", "--out", path, "--steps", "2", "--quiet")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "2 steps") || !strings.Contains(out, "held-out loss") {
		t.Errorf("summary %q", out)
	}
	m, err := lm.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Meta["phaseless.train.command"]; got != "phaselessctl lm train --preset edge --out "+path+" --steps 2" {
		t.Errorf("recorded command %q", got)
	}
	if m.DType != lm.F16 {
		t.Errorf("dtype %v, want F16", m.DType)
	}
}

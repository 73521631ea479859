package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/cloud/fleetapi/trainset"
	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/models/textfeat"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

func runModelCtl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	cio := cli.IO{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
	if err := Root().Dispatch(context.Background(), cio, args); err != nil {
		t.Fatalf("phaselessctl %v: %v\n%s", args, err, errb.String())
	}
	return out.String()
}

func TestModelFeatures(t *testing.T) {
	out := runModelCtl(t, "set a timer\n東京？\n", "model", "features")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines, got %q", out)
	}
	var v []float32
	if err := json.Unmarshal([]byte(lines[0]), &v); err != nil || len(v) != textfeat.Dim {
		t.Fatalf("line 0: %v, %d values", err, len(v))
	}
}

func TestModelScore(t *testing.T) {
	for _, model := range []string{"", "entropy"} {
		out := runModelCtl(t, "navigate home\nprove that there are infinitely many primes\n", "model", "score", "--model", model)
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			p, err := strconv.ParseFloat(l, 64)
			if err != nil || p < 0 || p > 1 {
				t.Fatalf("model %q: line %q is not a probability", model, l)
			}
		}
	}
}

func TestModelEval(t *testing.T) {
	if raceEnabled {
		t.Skip("trains or evaluates models: make test runs it without -race, which adds minutes and nothing else here")
	}
	// Default: the edge label set, the shipped model at its own threshold,
	// a compared model at the router's 0.5 and at a threshold tuned on the
	// development set (its row says "(dev)").
	out := runModelCtl(t, "", "model", "eval", "--data", "../../models/data/routing",
		"--compare", "../../models/predictor/testdata/predictor-routellm.onnx")
	for _, want := range []string{"car→cloud", "predictor (shipped)", "entropy ≥ 4.2 bits", "bound tuned", "predictor-routellm.onnx, threshold tuned", "(dev)", "fresh2-open", "oracle APGR", "mmlu", "test:"} {
		if !strings.Contains(out, want) {
			t.Errorf("eval output lacks %q:\n%s", want, out)
		}
	}
	out = runModelCtl(t, "", "model", "eval", "--labels", "routellm", "--data", "../../models/data/routing")
	for _, want := range []string{"APGR", "CPT(50%)", "CLINC AUC", "predictor (shipped)", "entropy > 4.2", "random"} {
		if !strings.Contains(out, want) {
			t.Errorf("routellm eval output lacks %q:\n%s", want, out)
		}
	}
}

func TestModelLabelsFlag(t *testing.T) {
	// Refused before any data is read or any model trained.
	for _, args := range [][]string{
		{"model", "train", "--labels", "mixtral", "--out", t.TempDir() + "/x.onnx"},
		{"model", "eval", "--labels", "mixtral"},
	} {
		cio := cli.IO{Stdin: strings.NewReader(""), Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}, Getenv: func(string) string { return "" }}
		var fe *cli.FieldError
		if err := Root().Dispatch(context.Background(), cio, args); !errors.As(err, &fe) || fe.Field != "labels" {
			t.Errorf("%v: %v, want a field error naming labels", args, err)
		}
	}
}

func TestModelScoreMissingModel(t *testing.T) {
	cio := cli.IO{Stdin: strings.NewReader("x\n"), Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}, Getenv: func(string) string { return "" }}
	if err := Root().Dispatch(context.Background(), cio, []string{"model", "score", "--model", "/nonexistent.onnx"}); err == nil {
		t.Fatal("a missing model file was accepted")
	}
}

// TestModelTrainTelemetry: `model train --telemetry` reads a fleet export
// (cloud/fleetapi/trainset), says what the quality signals relabelled, and
// trains with it.
func TestModelTrainTelemetry(t *testing.T) {
	if raceEnabled {
		t.Skip("trains or evaluates models: make test runs it without -race, which adds minutes and nothing else here")
	}
	dir := t.TempDir()
	var lines []string
	add := func(kind string, v any) {
		data, _ := json.Marshal(v)
		line, _ := json.Marshal(map[string]any{"device_id": "car-1", "kind": kind, "data": json.RawMessage(data)})
		lines = append(lines, string(line))
	}
	var graded []string // trace ids of the training part, not held out
	for i := 0; len(graded) < 2; i++ {
		if id := fmt.Sprintf("shadowed-%d", i); !trainset.InHeldOut(id) {
			graded = append(graded, id)
		}
	}
	for i, id := range graded {
		add(fleetwire.KindRequest, fleetwire.RequestRecord{TraceID: id, Features: textfeat.Extract("what is the capital of Peru"), FeatureVersion: textfeat.Version, Decision: "local", Path: "local", Outcome: "ok"})
		add(fleetwire.KindShadowGrade, fleetwire.ShadowGrade{TraceID: id, OK: i == 1})
	}
	export, out := filepath.Join(dir, "fleet.jsonl"), filepath.Join(dir, "router.onnx")
	if err := os.WriteFile(export, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cio := cli.IO{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}
	args := []string{"model", "train", "--data", "../../models/data/routing", "--telemetry", export, "--epochs", "1", "--out", out}
	if err := Root().Dispatch(context.Background(), cio, args); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, stderr.String())
	}
	for _, want := range []string{
		"0 feedback and 2 shadow grades joined: 1 local answers relabelled cloud, 1 confirmed local; 0 requests held out",
		"2 records, 1 local + 1 cloud labels",
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("model train's account of the fleet telemetry lacks %q:\n%s", want, stderr.String())
		}
	}
	if b, err := os.ReadFile(out); err != nil || len(b) == 0 {
		t.Fatalf("no model written: %v", err)
	}
	if err := Root().Dispatch(context.Background(), cio, []string{"model", "train", "--telemetry", filepath.Join(dir, "missing.jsonl"), "--out", out}); err == nil {
		t.Fatal("a missing telemetry file was accepted")
	}
}

// model train --head names the router whose first layer a run keeps; a
// file that is not such a router is refused, naming the flag, before any
// training.
func TestModelTrainHeadRefusesBadFile(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.onnx")
	if err := os.WriteFile(bad, []byte("not onnx"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, head := range []string{bad, filepath.Join(t.TempDir(), "missing.onnx")} {
		_, err := runCtl(t, "model", "train", "--head", head, "--out", filepath.Join(t.TempDir(), "x.onnx"))
		var fe *cli.FieldError
		if !errors.As(err, &fe) || fe.Field != "head" {
			t.Errorf("--head %s: %v, want an error naming head", filepath.Base(head), err)
		}
	}
}

package ctl

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/models/lm"
)

// TestLMSampling: lm init declares the sampling its flags give, lm
// sampling rewrites a file with another declaration (replacing the old one
// whole), and a value a request could not carry is refused naming its flag.
func TestLMSampling(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "m.gguf")
	declared := func(path string) string {
		t.Helper()
		m, err := lm.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(m.Sampling())
		return string(b)
	}
	if out, err := runCtl(t, "lm", "init", "--out", f, "--layers", "1", "--dim", "32", "--heads", "2", "--ffn", "64", "--ctx", "64",
		"--sampling-temp", "0.6", "--sampling-top-k", "20"); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	if got := declared(f); got != `{"temperature":0.6,"top_k":20}` {
		t.Fatalf("init declared %s", got)
	}
	g := filepath.Join(dir, "g.gguf")
	out, err := runCtl(t, "lm", "sampling", "--in", f, "--out", g, "--sampling-temp", "0.5", "--sampling-top-p", "0.9")
	if err != nil || !strings.Contains(out, "temperature 0.5, top_p 0.9\n") {
		t.Fatalf("sampling: %v\n%s", err, out)
	}
	if got := declared(g); got != `{"temperature":0.5,"top_p":0.9}` {
		t.Fatalf("rewritten file declares %s", got)
	}
	for _, bad := range [][]string{{"--sampling-temp", "3"}, {"--sampling-top-p", "0"}, {"--sampling-top-k", "-2"}} {
		if _, err := runCtl(t, append([]string{"lm", "sampling", "--in", f, "--out", g}, bad...)...); err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(bad[0], "--")) {
			t.Errorf("%v: %v, want an error naming the flag", bad, err)
		}
	}
}

package ctl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/firmware"
)

// TestOTAProbesSignVerify signs a probe set from JSONL, verifies it as a
// device would, puts it in a model bundle as probes.json, and refuses an
// expectation the grader cannot read and a tampered file.
func TestOTAProbesSignVerify(t *testing.T) {
	dir := t.TempDir()
	if _, err := runCtl(t, "ota", "keygen", "--dir", dir); err != nil {
		t.Fatal(err)
	}
	key, pub := filepath.Join(dir, "ota-key.pem"), filepath.Join(dir, "ota-pub.pem")
	jsonl := filepath.Join(dir, "probes.jsonl")
	os.WriteFile(jsonl, []byte(`{"prompt":"navigate to Denver","expect":"@directions|incar-6 Denver"}

{"prompt":"set the temperature to 21 degrees","expect":"@incar-0 21"}
`), 0o644)
	set := filepath.Join(dir, "probes.json")
	out, err := runCtl(t, "ota", "probes", "sign", "--key", key, "--margin", "0.05", "--name", "incar", "--out", set, jsonl)
	if err != nil || !strings.Contains(out, "2 probes, margin 0.05") {
		t.Fatalf("sign: %v\n%s", err, out)
	}
	out, err = runCtl(t, "ota", "probes", "verify", "--pub", pub, set)
	if err != nil || !strings.Contains(out, `probe set "incar", 2 probes, margin 0.05, 96 tokens`) {
		t.Fatalf("verify: %v\n%s", err, out)
	}
	gguf := filepath.Join(dir, "edge.gguf")
	os.WriteFile(gguf, []byte("model bytes"), 0o644)
	bundle := filepath.Join(dir, "m.plota")
	if _, err := runCtl(t, "ota", "sign", "--key", key, "--kind", "model", "--version", "2.0", "--out", bundle, gguf, "probes.json="+set); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(bundle)
	pubKey, err := firmware.ReadPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	m, carried, err := firmware.ReadPayload(b, pubKey, ".json")
	if err != nil || m.Files[1].Name != firmware.ProbeSetFile {
		t.Fatalf("bundle: %v %+v", err, m.Files)
	}
	if ps, err := firmware.OpenProbeSet(carried, pubKey); err != nil || len(ps.Probes) != 2 {
		t.Fatalf("carried probe set: %v", err)
	}

	os.WriteFile(jsonl, []byte(`{"prompt":"x","expect":"@no_such_intent"}`+"\n"), 0o644)
	if _, err := runCtl(t, "ota", "probes", "sign", "--key", key, "--out", filepath.Join(dir, "bad.json"), jsonl); err == nil || !strings.Contains(err.Error(), "probes.jsonl:1") {
		t.Errorf("unknown intent signed: %v", err)
	}
	raw, _ := os.ReadFile(set)
	os.WriteFile(set, []byte(strings.Replace(string(raw), "Denver", "Paris", 1)), 0o644)
	if _, err := runCtl(t, "ota", "probes", "verify", "--pub", pub, set); err == nil {
		t.Error("tampered probe set verified")
	}
}

package firmware

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func newKey(t testing.TB) (ed25519.PublicKey, ed25519.PrivateKey) {
	pub, priv, err := ed25519.GenerateKey(bytes.NewReader(bytes.Repeat([]byte{7}, 64)))
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

func bundle(t testing.TB, priv ed25519.PrivateKey, version, board string) []byte {
	var b bytes.Buffer
	files := map[string][]byte{"bin/phaseless-agent": []byte("ELF..."), "models/predictor.onnx": []byte("onnx")}
	if err := Write(&b, priv, version, board, files, []string{"bin/phaseless-agent", "models/predictor.onnx"}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestOpenPolicy(t *testing.T) {
	pub, priv := newKey(t)
	_, otherPriv, _ := ed25519.GenerateKey(nil)
	good := bundle(t, priv, "1.2.0", "rpi4")
	var rb bytes.Buffer
	if err := WriteManifest(&rb, priv, Manifest{Version: "1.2.0", Board: "rpi4", RollbackFrom: "1.10"}, map[string][]byte{"bin/phaseless-agent": []byte("ELF")}, []string{"bin/phaseless-agent"}); err != nil {
		t.Fatal(err)
	}
	rollback := rb.Bytes()
	tampered := append([]byte(nil), good...)
	tampered[len(magic)+10] ^= 1 // inside the manifest
	tests := []struct {
		name   string
		data   []byte
		policy Policy
		want   error
	}{
		{"accepted", good, Policy{TrustedKey: pub, Board: "rpi4", RunningVersion: "1.1.9"}, nil},
		{"dev build accepts any", good, Policy{TrustedKey: pub, Board: "rpi4", RunningVersion: "dev"}, nil},
		{"mis-signed", bundle(t, otherPriv, "1.2.0", "rpi4"), Policy{TrustedKey: pub, Board: "rpi4", RunningVersion: "1.0"}, ErrBadSignature},
		{"tampered manifest", tampered, Policy{TrustedKey: pub, Board: "rpi4", RunningVersion: "1.0"}, ErrBadSignature},
		{"unsigned garbage", []byte("hello"), Policy{TrustedKey: pub, Board: "rpi4"}, ErrCorrupt},
		{"other board", good, Policy{TrustedKey: pub, Board: "jetson", RunningVersion: "1.0"}, ErrWrongBoard},
		{"same version", good, Policy{TrustedKey: pub, Board: "rpi4", RunningVersion: "1.2.0"}, ErrNotNewer},
		{"older", good, Policy{TrustedKey: pub, Board: "rpi4", RunningVersion: "1.10"}, ErrNotNewer},
		// Downgrades need signed intent (issue 27): a rollback statement in
		// the signed manifest, naming the version it may replace.
		{"signed rollback", rollback, Policy{TrustedKey: pub, Board: "rpi4", RunningVersion: "1.10"}, nil},
		{"signed rollback from 1.10.0", rollback, Policy{TrustedKey: pub, Board: "rpi4", RunningVersion: "1.10.0"}, nil},
		{"signed rollback, other running version", rollback, Policy{TrustedKey: pub, Board: "rpi4", RunningVersion: "1.11"}, ErrNotNewer},
		{"signed rollback, dev build", rollback, Policy{TrustedKey: pub, Board: "rpi4", RunningVersion: "dev"}, nil},
		{"no trusted key", good, Policy{Board: "rpi4"}, ErrBadSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Open(bytes.NewReader(tt.data), tt.policy)
			if !errors.Is(err, tt.want) && !(tt.want == nil && err == nil) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

// A rollback statement must name a newer version than the bundle's own.
func TestWriteManifestRollback(t *testing.T) {
	_, priv := newKey(t)
	for _, from := range []string{"1.2.0", "1.1", "x"} {
		if err := WriteManifest(io.Discard, priv, Manifest{Version: "1.2.0", Board: "rpi4", RollbackFrom: from}, nil, nil); err == nil {
			t.Errorf("rollback from %q to 1.2.0 was written", from)
		}
	}
}

func TestCorruptPayloadIsRejectedAndActiveSlotUntouched(t *testing.T) {
	pub, priv := newKey(t)
	data := bundle(t, priv, "2.0", "rpi4")
	data[len(data)-1] ^= 1 // last payload byte: signature still fine, sha256 not
	s, err := OpenSlots(t.TempDir(), "1.0")
	if err != nil {
		t.Fatal(err)
	}
	v, err := Open(bytes.NewReader(data), Policy{TrustedKey: pub, Board: "rpi4", RunningVersion: "1.0"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Install(v); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("install err = %v, want ErrCorrupt", err)
	}
	if slot, ver := s.Running(); slot != "a" || ver != "1.0" {
		t.Fatalf("running %s %s after a failed install", slot, ver)
	}
}

func TestTrialCommitRollbackAndCrashLoop(t *testing.T) {
	pub, priv := newKey(t)
	dir := t.TempDir()
	s, err := OpenSlots(dir, "1.0")
	if err != nil {
		t.Fatal(err)
	}
	install := func(version string) string {
		t.Helper()
		v, err := Open(bytes.NewReader(bundle(t, priv, version, "rpi4")), Policy{TrustedKey: pub, Board: "rpi4", RunningVersion: "1.0"})
		if err != nil {
			t.Fatal(err)
		}
		slot, err := s.Install(v)
		if err != nil {
			t.Fatal(err)
		}
		return slot
	}
	if slot := install("1.1"); slot != "b" {
		t.Fatalf("installed into %s, want the inactive slot b", slot)
	}
	got, err := os.ReadFile(filepath.Join(s.Path("b"), "bin", "phaseless-agent"))
	if err != nil || string(got) != "ELF..." {
		t.Fatalf("slot b content %q, %v", got, err)
	}
	if slot, _, _ := s.Boot(); slot != "b" {
		t.Fatalf("trial boot ran %s", slot)
	}
	if err := s.Commit(); err != nil {
		t.Fatal(err)
	}
	if s.State().Active != "b" {
		t.Fatalf("state after commit: %+v", s.State())
	}

	// A new update that crash-loops: after MaxTrialBoots boots, Boot rolls back.
	install("1.2")
	for i := 0; i < MaxTrialBoots; i++ {
		if slot, rolled, _ := s.Boot(); slot != "a" || rolled {
			t.Fatalf("boot %d: slot %s rolled %v", i, slot, rolled)
		}
	}
	// The state survives a restart of the process.
	s2, err := OpenSlots(dir, "ignored")
	if err != nil {
		t.Fatal(err)
	}
	slot, rolled, err := s2.Boot()
	if err != nil || !rolled || slot != "b" {
		t.Fatalf("crash loop did not roll back: slot %s rolled %v err %v", slot, rolled, err)
	}
	if _, ver := s2.Running(); ver != "1.1" {
		t.Fatalf("running %s after rollback, want 1.1", ver)
	}
	if err := s2.Rollback(); !errors.Is(err, ErrNoTrial) {
		t.Fatalf("rollback without trial: %v", err)
	}
}

func TestNewer(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want bool
	}{{"1.2", "1.1.9", true}, {"1.2", "1.2.0", false}, {"1.10", "1.9", true}, {"0.9", "1.0", false}, {"2", "dev", true}} {
		if got, _ := Newer(tt.a, tt.b); got != tt.want {
			t.Errorf("Newer(%s, %s) = %v", tt.a, tt.b, got)
		}
	}
}

// FuzzOpen: bundles come from the network; any bytes give an error or a
// verified manifest, never a panic or an unbounded allocation.
func FuzzOpen(f *testing.F) {
	pub, priv := newKey(f)
	f.Add(bundle(f, priv, "1.0", "rpi4"))
	f.Add([]byte(magic + "\xff\xff\xff\xff"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := Open(bytes.NewReader(data), Policy{TrustedKey: pub, Board: "rpi4", RunningVersion: "0.1"})
		if err != nil {
			return
		}
		v.Extract(func(string) (io.WriteCloser, error) { return Discard(), nil })
	})
}

// TestSlotsSharedBetweenProcesses: the supervisor and the agent each open
// the slots; what one writes, the other's next call sees (the supervisor
// once booted the old slot again because its state was a stale copy).
func TestSlotsSharedBetweenProcesses(t *testing.T) {
	pub, priv := newKey(t)
	dir := t.TempDir()
	supervisor, err := OpenSlots(dir, "1.0")
	if err != nil {
		t.Fatal(err)
	}
	agent, err := OpenSlots(dir, "1.0")
	if err != nil {
		t.Fatal(err)
	}
	v, err := Open(bytes.NewReader(bundle(t, priv, "1.1", "rpi4")), Policy{TrustedKey: pub, Board: "rpi4", RunningVersion: "1.0"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agent.Install(v); err != nil {
		t.Fatal(err)
	}
	if slot, _, err := supervisor.Boot(); err != nil || slot != "b" {
		t.Fatalf("the supervisor booted %q (%v) after the agent installed into b", slot, err)
	}
	if err := agent.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := supervisor.Commit(); !errors.Is(err, ErrNoTrial) {
		t.Fatalf("second commit: %v", err)
	}
	if st := supervisor.State(); st.Active != "b" || st.Boots != 0 {
		t.Fatalf("state %+v", st)
	}
}

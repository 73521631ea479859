package ctl

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/internal/cli"
)

func runCtl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cio := cli.IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out, Getenv: func(string) string { return "" }}
	err := Root().Dispatch(context.Background(), cio, args)
	return out.String(), err
}

func TestOTAKeygenSignVerify(t *testing.T) {
	dir := t.TempDir()
	payload := filepath.Join(dir, "agent.bin")
	if err := os.WriteFile(payload, []byte("new agent"), 0o644); err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(dir, "b.plota")
	if _, err := runCtl(t, "ota", "keygen", "--dir", dir); err != nil {
		t.Fatal(err)
	}
	if _, err := runCtl(t, "ota", "keygen", "--dir", dir); err == nil {
		t.Fatal("keygen replaced an existing signing key")
	}
	if out, err := runCtl(t, "ota", "sign", "--key", filepath.Join(dir, "ota-key.pem"), "--version", "1.3", "--board", "rpi4", "--out", bundle, payload); err != nil || !strings.Contains(out, "agent.bin: 9 bytes in 1 chunks (cdc-v1)") {
		t.Fatalf("sign: %v\n%s", err, out)
	}
	out, err := runCtl(t, "ota", "verify", "--pub", filepath.Join(dir, "ota-pub.pem"), "--board", "rpi4", "--running", "1.2", bundle)
	if err != nil || !strings.Contains(out, "version 1.3") {
		t.Fatalf("verify: %v\n%s", err, out)
	}
	if _, err := runCtl(t, "ota", "verify", "--pub", filepath.Join(dir, "ota-pub.pem"), "--board", "jetson", bundle); err == nil {
		t.Fatal("bundle for another board verified")
	}
	// A rollback is signed intent: --rollback-from makes an older bundle
	// that a device running exactly that version accepts, and no other.
	rollback := filepath.Join(dir, "r.plota")
	out, err = runCtl(t, "ota", "sign", "--key", filepath.Join(dir, "ota-key.pem"), "--version", "1.2", "--rollback-from", "1.3", "--board", "rpi4", "--out", rollback, payload)
	if err != nil || !strings.Contains(out, "rollback from 1.3") {
		t.Fatalf("sign rollback: %v\n%s", err, out)
	}
	if out, err := runCtl(t, "ota", "verify", "--pub", filepath.Join(dir, "ota-pub.pem"), "--board", "rpi4", "--running", "1.3", rollback); err != nil {
		t.Fatalf("verify the rollback on 1.3: %v\n%s", err, out)
	}
	for _, running := range []string{"1.4", "1.2"} {
		if _, err := runCtl(t, "ota", "verify", "--pub", filepath.Join(dir, "ota-pub.pem"), "--board", "rpi4", "--running", running, rollback); err == nil {
			t.Errorf("the rollback from 1.3 verified on a device running %s", running)
		}
		if _, err := runCtl(t, "ota", "verify", "--pub", filepath.Join(dir, "ota-pub.pem"), "--board", "rpi4", "--running", running, bundle); running == "1.4" && err == nil {
			t.Errorf("bundle 1.3 verified on a device running 1.4")
		}
	}
	if _, err := runCtl(t, "ota", "sign", "--key", filepath.Join(dir, "ota-key.pem"), "--version", "1.3", "--rollback-from", "1.2", "--out", rollback, payload); err == nil {
		t.Error("a rollback from an older version was signed")
	}
}

// ota delta prices an update: a file that changed in one place costs the
// header probe and the chunks around the change.
func TestOTADelta(t *testing.T) {
	dir := t.TempDir()
	old := make([]byte, 1<<20)
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range old {
		old[i] = byte(rnd.Uint32())
	}
	edited := append(append(append([]byte{}, old[:500_000]...), "a new line\n"...), old[500_000:]...)
	oldPath, newPath := filepath.Join(dir, "agent.old"), filepath.Join(dir, "agent")
	if err := os.WriteFile(oldPath, old, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(newPath, edited, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runCtl(t, "ota", "delta", "--from", oldPath, newPath)
	if err != nil {
		t.Fatal(err)
	}
	var whole, fetch int64
	if _, err := fmt.Sscanf(out[strings.Index(out, "whole bundle"):], "whole bundle %d bytes; a device holding the old file fetches %d bytes", &whole, &fetch); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if whole < int64(len(edited)) || fetch > whole/5 {
		t.Fatalf("whole %d, fetch %d: %s", whole, fetch, out)
	}
}

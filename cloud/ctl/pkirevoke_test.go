package ctl

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/transport/pki"
)

func TestPKIRevokeCommand(t *testing.T) {
	dir := t.TempDir()
	if err := pki.EnsureDev(dir, "car-1"); err != nil {
		t.Fatal(err)
	}
	revoke := func(args ...string) (string, error) {
		var out bytes.Buffer
		cio := cli.IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out, Getenv: func(string) string { return "" }}
		err := Root().Dispatch(context.Background(), cio, append([]string{"pki", "revoke"}, args...))
		return out.String(), err
	}
	if _, err := revoke("--dir", dir); err == nil || !strings.Contains(err.Error(), "id") {
		t.Fatalf("without --id: %v", err)
	}
	if out, err := revoke("--dir", dir, "--id", "car-1", "--reason", "stolen in Lyon"); err != nil || !strings.Contains(out, "revoked device car-1") {
		t.Fatalf("%v\n%s", err, out)
	}
	d, err := pki.LoadDenyList(dir)
	if err != nil || !d.Revoked("car-1") {
		t.Fatalf("car-1 not on the deny list: %v", err)
	}
	if _, err := revoke("--dir", dir, "--id", "car-1"); !errors.Is(err, pki.ErrAlreadyRevoked) {
		t.Fatalf("second revoke: %v", err)
	}
}

package ctl

import (
	"bytes"
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/transport/pki"
)

func TestPKICommands(t *testing.T) {
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		cio := cli.IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out, Getenv: func(string) string { return "" }}
		err := Root().Dispatch(context.Background(), cio, args)
		return out.String(), err
	}
	dir := filepath.Join(t.TempDir(), "fleet")

	if _, err := run("pki", "init"); err == nil {
		t.Fatal("pki init without --dir succeeded")
	}
	if _, err := run("pki", "device", "--dir", dir, "--id", "car-1"); err == nil {
		t.Fatal("pki device before pki init succeeded")
	}
	out, err := run("pki", "init", "--dir", dir, "--host", "cloud.example", "--host", "10.0.0.5")
	if err != nil {
		t.Fatalf("pki init: %v\n%s", err, out)
	}
	if !strings.Contains(out, " for localhost, 127.0.0.1, ::1, cloud.example, 10.0.0.5\n") {
		t.Errorf("init output does not list the certificate's names:\n%s", out)
	}
	if out, err := run("pki", "init", "--dir", filepath.Join(t.TempDir(), "plain")); err != nil || !strings.Contains(out, " for localhost, 127.0.0.1, ::1\n") {
		t.Errorf("pki init with no --host: %v\n%s", err, out)
	}
	if _, err := run("pki", "init", "--dir", dir); !errors.Is(err, pki.ErrExists) {
		t.Fatalf("second pki init: %v, want ErrExists", err)
	}
	if _, err := run("pki", "device", "--dir", dir, "--id", "car-1"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]string{{"--dir", dir}, {"--dir", dir, "--id", "no/slash"}, {"--dir", dir, "--id", "car-1"}, {"--dir", dir, "--id", "x", "extra"}} {
		if _, err := run(append([]string{"pki", "device"}, bad...)...); err == nil {
			t.Errorf("pki device %v succeeded", bad)
		}
	}
	// What the binaries load from the directory.
	srv, err := pki.ServerTLS(dir)
	if err != nil {
		t.Fatal(err)
	}
	if srv.Certificates[0].Leaf == nil || !containsIP(srv.Certificates[0].Leaf.IPAddresses, "10.0.0.5") {
		t.Error("server certificate lacks --host 10.0.0.5")
	}
	if _, err := pki.DeviceTLS(dir, "car-1"); err != nil {
		t.Fatal(err)
	}
	if out, err := run("pki", "device", "--help"); err != nil || !strings.Contains(out, "--id") && !strings.Contains(out, "-id") {
		t.Fatalf("help: %v\n%s", err, out)
	}
}

func containsIP(ips []net.IP, want string) bool {
	for _, ip := range ips {
		if ip.String() == want {
			return true
		}
	}
	return false
}

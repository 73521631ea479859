package ctl

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/cloud"
	"github.com/phaseless/phaseless/internal/cli"
)

func TestBenchLink(t *testing.T) {
	dir := t.TempDir()
	cfg := cloud.Config{HTTP: "127.0.0.1:0", QUIC: "127.0.0.1:0", DataDir: dir, Dev: true, Budget: 1 << 30}
	if err := cfg.Workers.Set("sim://h100?model=llama3.1-8b&n=1"); err != nil {
		t.Fatal(err)
	}
	c := startTestCloud(t, cfg)
	out, err := runCtl(t, "bench", "link", "--quic", c.QUICAddr(), "--url", "http://"+c.HTTPAddr(), "--pki-dir", filepath.Join(dir, "pki"),
		"--profile", "loopback,delay=5ms", "--requests", "3", "--concurrency", "1", "--max-tokens", "4")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"| loopback,delay=5ms | QUIC |", "| loopback,delay=5ms | SSE |", "3/3"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, err := runCtl(t, "bench", "link", "--pki-dir", dir, "--profile", "lte-great"); !errors.Is(err, cli.ErrUsage) {
		t.Errorf("an unknown profile: %v, want a usage error", err)
	}
}

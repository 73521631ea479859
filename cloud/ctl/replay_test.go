package ctl

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud"
	"github.com/phaseless/phaseless/internal/cli"
)

// TestReplayAgainstCoordinator replays a few mooncake requests against a
// real dev coordinator under all three policies in one run.
func TestReplayAgainstCoordinator(t *testing.T) {
	c := startTestCloud(t, cloud.Config{
		HTTP: "127.0.0.1:0", DataDir: t.TempDir(), Dev: true, BuiltinWorkers: 2, Budget: 1 << 30,
		BatchWindow: 150 * time.Millisecond, BatchMax: 16, SLATTFT: 2 * time.Second, SLAITL: 200 * time.Millisecond,
	})
	var out, errb bytes.Buffer
	cio := cli.IO{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
	err := replayCmd(context.Background(), cio, []string{
		"--target", "http://" + c.HTTPAddr(), "--trace", "../replay/testdata/traces/mooncake-conversation-head.jsonl",
		"--format", "mooncake", "--limit", "8", "--speedup", "1000", "--scale", "0.03", "--max-input", "150", "--max-output", "6",
	})
	if err != nil {
		t.Fatalf("%v\n%s\n%s", err, out.String(), errb.String())
	}
	table := out.String()
	for _, p := range []string{"scheduler", "round-robin", "least-loaded"} {
		var row string
		for _, l := range strings.Split(table, "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), p+" ") {
				row = l
			}
		}
		f := strings.Fields(row)
		if len(f) < 14 || f[1] != "8" || f[2] != "8" {
			t.Fatalf("row for %s: %q\n%s", p, row, table)
		}
	}
	if !strings.Contains(table, "goodput") {
		t.Fatalf("no header:\n%s", table)
	}
}

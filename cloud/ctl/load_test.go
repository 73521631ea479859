package ctl

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud"
	"github.com/phaseless/phaseless/internal/cli"
)

// startSimCloud runs a dev cloud whose only worker is one simulated H100.
func startSimCloud(t *testing.T, maxRunning, maxQueued int) *cloud.Cloud {
	t.Helper()
	cfg := cloud.Config{
		HTTP: "127.0.0.1:0", DataDir: t.TempDir(), Dev: true, Budget: 1 << 30,
		BatchWindow: 150 * time.Millisecond, BatchMax: 16, SLATTFT: 2 * time.Second, SLAITL: 200 * time.Millisecond,
		MaxRunning: maxRunning, MaxQueued: maxQueued,
	}
	if err := cfg.Workers.Set("sim://h100?model=llama3.1-8b&n=1"); err != nil {
		t.Fatal(err)
	}
	return startTestCloud(t, cfg)
}

// startTestCloud starts and serves a cloud until the test ends.
func startTestCloud(t *testing.T, cfg cloud.Config) *cloud.Cloud {
	t.Helper()
	c, err := cloud.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	wait, err := c.Serving(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := wait(); err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return c
}

var outcomeLine = regexp.MustCompile(`ok (\d+), shed (\d+) \(429/503\), failed (\d+)`)

func runLoad(t *testing.T, args ...string) (ok, shed, failed int, out string, err error) {
	t.Helper()
	var o, e bytes.Buffer
	err = loadCmd(context.Background(), cli.IO{Stdout: &o, Stderr: &e, Getenv: func(string) string { return "" }}, args)
	m := outcomeLine.FindStringSubmatch(o.String())
	if m == nil {
		t.Fatalf("no outcome line (err %v):\n%s%s", err, o.String(), e.String())
	}
	ok, _ = strconv.Atoi(m[1])
	shed, _ = strconv.Atoi(m[2])
	failed, _ = strconv.Atoi(m[3])
	return ok, shed, failed, o.String(), err
}

// TestLoadCommand drives concurrent streams at a live cloud over simulated
// GPUs: every request is answered, and the added TTFT is reported from the
// cloud's Server-Timing header.
func TestLoadCommand(t *testing.T) {
	c := startSimCloud(t, 0, 0)
	ok, shed, failed, out, err := runLoad(t, "--url", "http://"+c.HTTPAddr(), "--streams", "20", "--requests", "2", "--max-tokens", "4", "--ramp", "100ms")
	if err != nil || ok != 40 || shed != 0 || failed != 0 {
		t.Fatalf("ok %d shed %d failed %d, err %v:\n%s", ok, shed, failed, err, out)
	}
	if !regexp.MustCompile(`added TTFT ms +p50 [0-9.]+ +p95 [0-9.]+ +p99 [0-9.]+ +max [0-9.]+ +\(40 samples\)`).MatchString(out) {
		t.Fatalf("no added TTFT percentiles over 40 samples:\n%s", out)
	}
	ok, _, failed, out, err = runLoad(t, "--url", "http://"+c.HTTPAddr(), "--api", "anthropic", "--streams", "4", "--requests", "1", "--max-tokens", "2", "--ramp", "10ms")
	if err != nil || ok != 4 || failed != 0 {
		t.Fatalf("anthropic: ok %d failed %d, err %v:\n%s", ok, failed, err, out)
	}
}

// TestLoadCommandOverload: a cloud that runs one request and queues one
// refuses the rest at once with 503 in the API's shape; none fails or
// times out, and the command says so.
func TestLoadCommandOverload(t *testing.T) {
	c := startSimCloud(t, 1, 1)
	for _, api := range []string{"openai", "anthropic"} {
		ok, shed, failed, out, err := runLoad(t, "--url", "http://"+c.HTTPAddr(), "--api", api, "--streams", "12", "--requests", "2", "--max-tokens", "32", "--ramp", "1ns", "--timeout", "30s")
		if err != nil || ok == 0 || shed == 0 || failed != 0 || ok+shed != 24 {
			t.Fatalf("%s: ok %d shed %d failed %d, err %v:\n%s", api, ok, shed, failed, err, out)
		}
	}
}

package linkbench

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud"
	"github.com/phaseless/phaseless/transport/linkemu"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startCloud runs a dev cloud on loopback whose worker is one simulated
// H100 (real-time token stream, no GPU) and returns a Config aimed at it.
func startCloud(t *testing.T) Config {
	t.Helper()
	dir := t.TempDir()
	cc := cloud.Config{HTTP: "127.0.0.1:0", QUIC: "127.0.0.1:0", DataDir: dir, Dev: true, Budget: 1 << 40}
	if err := cc.Workers.Set("sim://h100?model=llama3.1-8b&n=1"); err != nil {
		t.Fatal(err)
	}
	c, err := cloud.New(cc, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	wait, err := c.Serving(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); wait() })
	return Config{QUIC: c.QUICAddr(), URL: "http://" + c.HTTPAddr(), PKIDir: filepath.Join(dir, "pki")}
}

// A short run through a link with a known delay: both transports complete
// every request, and no first token can come sooner than the round trip
// (a lower bound, true however slow the machine).
func TestRunBothTransportsThroughTheEmulator(t *testing.T) {
	p, err := linkemu.ParseProfile("loopback,delay=20ms,loss=2%")
	if err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	cfg := startCloud(t)
	cfg.Profiles, cfg.Requests, cfg.Concurrency, cfg.MaxTokens, cfg.Progress = []linkemu.Profile{p}, 6, 2, 8, &progress
	rows, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Transport != "QUIC" || rows[1].Transport != "SSE" {
		t.Fatalf("rows %+v", rows)
	}
	for _, r := range rows {
		if r.Completed != 6 {
			t.Errorf("%s completed %d of 6: %v", r.Transport, r.Completed, r.Errors)
		}
		if r.TTFTP50 < 40*time.Millisecond {
			t.Errorf("%s TTFT p50 %v under the 40 ms round trip", r.Transport, r.TTFTP50)
		}
		if r.Link.Up.Packets == 0 || r.Link.Down.Delivered == 0 {
			t.Errorf("%s traffic did not cross the emulator: %+v", r.Transport, r.Link)
		}
	}
	var table bytes.Buffer
	WriteMarkdown(&table, rows)
	for _, want := range []string{"| " + p.Name + " | QUIC |", "| " + p.Name + " | SSE |", "QUIC/SSE"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	if !strings.Contains(progress.String(), "completed 6/6") {
		t.Errorf("progress: %q", progress.String())
	}
}

func TestSummarizeTellsImposedStalls(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms ...int) []time.Time {
		var ts []time.Time
		for _, m := range ms {
			ts = append(ts, t0.Add(time.Duration(m)*time.Millisecond))
		}
		return ts
	}
	// A blackout from +2 s to +4 s.
	blackouts := func(from, to time.Time) [][2]time.Time {
		s, e := t0.Add(2*time.Second), t0.Add(4*time.Second)
		if s.Before(to) && e.After(from) {
			return [][2]time.Time{{s, e}}
		}
		return nil
	}
	row := summarize([]sample{
		{start: t0, tokens: at(100, 200, 1500, 4300)},     // 1.3 s gap before the blackout, 2.8 s across it
		{start: t0, tokens: at(50), err: errors.New("x")}, // got a token, then failed
		{start: t0, err: errors.New("x")},
	}, time.Second, blackouts)
	if row.Completed != 1 || row.Errors["x"] != 2 {
		t.Errorf("completed %d, errors %v", row.Completed, row.Errors)
	}
	if row.Stalls != 2 || row.Imposed != 1 {
		t.Errorf("stalls %d (imposed %d), want 2 (1)", row.Stalls, row.Imposed)
	}
	if row.LongestStall != 2800*time.Millisecond || row.TTFTP50 != 50*time.Millisecond || row.TTFTP99 != 100*time.Millisecond {
		t.Errorf("longest %v, TTFT p50 %v p99 %v", row.LongestStall, row.TTFTP50, row.TTFTP99)
	}
}

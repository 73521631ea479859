// Package linkbench measures the agent's QUIC uplink against the baseline an
// app would pick instead — the same requests streamed as SSE over HTTP/2 on
// TCP+TLS — across emulated cellular links (transport/linkemu), against a real
// cloud on loopback. phaselessctl bench link runs it; docs/transport.md holds
// the results.
package linkbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/phaseless/phaseless/cloud/loadgen"
	"github.com/phaseless/phaseless/transport/linkemu"
	"github.com/phaseless/phaseless/transport/pki"
)

// Config is one benchmark run.
type Config struct {
	// QUIC is the cloud's QUIC address (phaseless-cloud --quic) and URL its
	// HTTP API's base URL (--http). Both required.
	QUIC, URL string
	// PKIDir is the cloud's PKI (its --pki-dir, or DATA-DIR/pki with
	// --dev); a certificate for DeviceID is issued there when missing.
	// Both transports present it (mutual TLS on both). Required.
	PKIDir string
	// DeviceID defaults to "linkbench-0001".
	DeviceID string
	// APIKey, when set, is sent with the SSE requests (the QUIC uplink
	// authenticates with the device certificate).
	APIKey string
	// Profiles are the links to measure, each in turn. Default: every named
	// profile (linkemu.Profiles).
	Profiles []linkemu.Profile
	// Requests per profile and transport. Default 100.
	Requests int
	// Concurrency is how many requests each transport has in flight at
	// once, on its one connection. Default 4.
	Concurrency int
	// MaxTokens of each request. Default 64.
	MaxTokens int
	// Seed fixes the emulator's random decisions. Default 1.
	Seed uint64
	// Timeout bounds one request; a request past it counts as not
	// completed. Default 2 min.
	Timeout time.Duration
	// StallThreshold: gaps between tokens longer than this are counted as
	// stalls. Default 1 s (the goal).
	StallThreshold time.Duration
	// Progress, when set, gets a line per profile and transport.
	Progress io.Writer
}

func (c *Config) fillDefaults() {
	if len(c.Profiles) == 0 {
		c.Profiles = linkemu.Profiles()
	}
	if c.Requests == 0 {
		c.Requests = 100
	}
	if c.Concurrency == 0 {
		c.Concurrency = 4
	}
	if c.MaxTokens == 0 {
		c.MaxTokens = 64
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Timeout == 0 {
		c.Timeout = 2 * time.Minute
	}
	if c.DeviceID == "" {
		c.DeviceID = "linkbench-0001"
	}
	if c.StallThreshold == 0 {
		c.StallThreshold = time.Second
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
}

// Validate names the first bad field.
func (c *Config) Validate() error {
	switch {
	case c.QUIC == "" || c.URL == "" || c.PKIDir == "":
		return errors.New("linkbench: QUIC, URL and PKIDir are required (the cloud to measure against)")
	case c.Requests < 1:
		return fmt.Errorf("linkbench: Requests %d must be ≥ 1", c.Requests)
	case c.Concurrency < 1:
		return fmt.Errorf("linkbench: Concurrency %d must be ≥ 1", c.Concurrency)
	case c.MaxTokens < 1:
		return fmt.Errorf("linkbench: MaxTokens %d must be ≥ 1", c.MaxTokens)
	case c.Timeout < 0 || c.StallThreshold < 0:
		return errors.New("linkbench: Timeout and StallThreshold must not be negative")
	}
	for _, p := range c.Profiles {
		if err := p.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// Row is one transport on one profile.
type Row struct {
	Profile, Transport string
	Requests           int
	// Completed ran to their final frame or [DONE]; Errors counts the
	// others' errors by message.
	Completed int
	Errors    map[string]int
	// TTFT over the requests that got a first token; Gap over every gap
	// between two tokens of one request; LongestStall is the longest such
	// gap. Stalls counts gaps over the threshold, Imposed those that
	// overlapped a blackout of the profile's schedule.
	TTFTP50, TTFTP99 time.Duration
	GapP99           time.Duration
	LongestStall     time.Duration
	Stalls, Imposed  int
	// Link is what the emulator did to this transport's traffic.
	Link linkemu.LinkStats
	// Elapsed is the run's wall time.
	Elapsed time.Duration
}

// Run measures each profile with both transports against the cloud at
// cfg.QUIC and cfg.URL, one transport after the other (each on its own
// emulated link, as a device would use one or the other). It returns the
// rows in profile order, QUIC first.
func Run(ctx context.Context, cfg Config) ([]Row, error) {
	cfg.fillDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := pki.EnsureDev(cfg.PKIDir, cfg.DeviceID); err != nil {
		return nil, fmt.Errorf("linkbench: device certificate: %w", err)
	}
	tc, err := pki.DeviceTLS(cfg.PKIDir, cfg.DeviceID)
	if err != nil {
		return nil, err
	}
	tc.ServerName = "localhost" // in every cloud certificate (pki.Init)
	front, err := startSSEFront(cfg.PKIDir, cfg.URL)
	if err != nil {
		return nil, err
	}
	defer front.Close()

	var rows []Row
	for _, p := range cfg.Profiles {
		for _, tr := range []transport{quicTransport{tls: tc, target: cfg.QUIC}, sseTransport{tls: tc, target: front.Addr(), apiKey: cfg.APIKey}} {
			row, err := measure(ctx, cfg, p, tr)
			if err != nil {
				return rows, fmt.Errorf("%s over %s: %w", tr.name(), p.Name, err)
			}
			fmt.Fprintf(cfg.Progress, "%-10s %-5s completed %d/%d, TTFT p50 %v p99 %v, longest stall %v (%v)\n",
				p.Name, row.Transport, row.Completed, row.Requests, ms(row.TTFTP50), ms(row.TTFTP99), ms(row.LongestStall), row.Elapsed.Round(time.Second))
			rows = append(rows, row)
		}
	}
	return rows, nil
}

// transport is one way of streaming a request through a relay.
type transport interface {
	name() string
	// listen starts the emulated link in front of the transport's server
	// and returns it and its address.
	listen(cfg linkemu.Config) (relay, string, error)
	// connect dials addr (the relay) and returns a function that streams
	// request i, calling tok at each token, nil once the stream ended whole.
	connect(ctx context.Context, addr string, maxTokens int) (stream func(ctx context.Context, i int, tok func()) error, closer io.Closer, err error)
}

// relay is what measure needs of either linkemu relay.
type relay interface {
	io.Closer
	Stats() linkemu.LinkStats
	Blackouts(from, to time.Time) [][2]time.Time
}

// sample is one request as the client saw it.
type sample struct {
	start  time.Time
	tokens []time.Time
	err    error
}

func measure(ctx context.Context, cfg Config, p linkemu.Profile, tr transport) (Row, error) {
	r, addr, err := tr.listen(linkemu.Config{Profile: p, Seed: cfg.Seed})
	if err != nil {
		return Row{}, err
	}
	defer r.Close()
	stream, conn, err := tr.connect(ctx, addr, cfg.MaxTokens)
	if err != nil {
		return Row{}, err
	}
	defer conn.Close()
	// One request first, not measured: the agent's uplink is a long-lived
	// connection and an SDK pools its HTTP/2 connection, so neither pays a
	// handshake per request.
	wctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	err = stream(wctx, -1, func() {})
	cancel()
	if err != nil {
		return Row{}, fmt.Errorf("warm-up request: %w", err)
	}

	samples := make([]sample, cfg.Requests)
	next := make(chan int)
	start := time.Now()
	var wg sync.WaitGroup
	for range cfg.Concurrency {
		wg.Go(func() {
			for i := range next {
				s := &samples[i]
				rctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
				s.start = time.Now()
				s.err = stream(rctx, i, func() { s.tokens = append(s.tokens, time.Now()) })
				cancel()
			}
		})
	}
	for i := range cfg.Requests {
		select {
		case next <- i:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return Row{}, err
	}
	row := summarize(samples, cfg.StallThreshold, r.Blackouts)
	row.Profile, row.Transport, row.Link, row.Elapsed = p.Name, tr.name(), r.Stats(), time.Since(start)
	return row, nil
}

// summarize folds the samples into a row; blackouts lists the scheduled
// blackouts between two times.
func summarize(samples []sample, threshold time.Duration, blackouts func(from, to time.Time) [][2]time.Time) Row {
	row := Row{Requests: len(samples), Errors: map[string]int{}}
	var ttfts, gaps []time.Duration
	for _, s := range samples {
		if s.err == nil {
			row.Completed++
		} else {
			row.Errors[s.err.Error()]++
		}
		if len(s.tokens) == 0 {
			continue
		}
		ttfts = append(ttfts, s.tokens[0].Sub(s.start))
		for i := 1; i < len(s.tokens); i++ {
			g := s.tokens[i].Sub(s.tokens[i-1])
			gaps = append(gaps, g)
			row.LongestStall = max(row.LongestStall, g)
			if g > threshold {
				row.Stalls++
				if len(blackouts(s.tokens[i-1], s.tokens[i])) > 0 {
					row.Imposed++
				}
			}
		}
	}
	slices.Sort(ttfts)
	slices.Sort(gaps)
	row.TTFTP50, row.TTFTP99 = loadgen.Percentile(ttfts, 50), loadgen.Percentile(ttfts, 99)
	row.GapP99 = loadgen.Percentile(gaps, 99)
	return row
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/1e6) }

// WriteMarkdown writes the rows as the table docs/transport.md shows, with
// the QUIC/SSE ratio of TTFT p99 under each profile's pair.
func WriteMarkdown(w io.Writer, rows []Row) {
	fmt.Fprintln(w, "| profile | transport | TTFT p50 | TTFT p99 | gap p99 | longest stall | stalls > 1 s (imposed) | completed |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for i, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %d (%d) | %d/%d |\n", r.Profile, r.Transport,
			ms(r.TTFTP50), ms(r.TTFTP99), ms(r.GapP99), ms(r.LongestStall), r.Stalls, r.Imposed, r.Completed, r.Requests)
		if i%2 == 1 && rows[i-1].Profile == r.Profile && r.TTFTP99 > 0 {
			fmt.Fprintf(w, "| %s | QUIC/SSE | | %.2f× | | | | |\n", r.Profile, float64(rows[i-1].TTFTP99)/float64(r.TTFTP99))
		}
	}
	var errs []string
	for _, r := range rows {
		for e, n := range r.Errors {
			errs = append(errs, fmt.Sprintf("- %s %s: %d × %s", r.Profile, r.Transport, n, e))
		}
	}
	slices.Sort(errs)
	if len(errs) > 0 {
		fmt.Fprintln(w, "\nErrors:")
		for _, e := range errs {
			fmt.Fprintln(w, e)
		}
	}
}

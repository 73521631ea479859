package quic

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/phaseless/phaseless/llm"
)

// The benchmarks compare this transport with the usual alternative for the
// same job, measured in the same run: the same token stream sent as
// server-sent events over HTTP/2 with TLS on loopback, one JSON event per
// token flushed at once (no aggregation on either side).

// sseToken is the JSON event body: the same fields as a token frame.
type sseToken struct {
	Text string `json:"text"`
	ID   int32  `json:"id"`
	Lat  int64  `json:"engine_latency_ns"`
}

// sseGenerator serves a Generator as SSE; sseClient reads it back.
func sseServer(tb testing.TB, g llm.Generator) (*httptest.Server, *http.Client) {
	tb.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			http.Error(w, "want HTTP/2", http.StatusHTTPVersionNotSupported)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		var buf []byte
		_, err := g.Generate(r.Context(), &llm.Request{ID: r.URL.Query().Get("id")}, func(t llm.Token) error {
			buf = append(buf[:0], "data: "...)
			b, _ := json.Marshal(sseToken{t.Text, t.ID, int64(t.EngineLatency)})
			buf = append(append(buf, b...), "\n\n"...)
			if _, err := w.Write(buf); err != nil {
				return err
			}
			fl.Flush()
			return nil
		})
		if err == nil {
			fmt.Fprint(w, "data: [DONE]\n\n")
		}
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	tb.Cleanup(srv.Close)
	return srv, srv.Client()
}

func sseGenerate(ctx context.Context, c *http.Client, url string, emit llm.Emit) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != 2 {
		return fmt.Errorf("got %s, want HTTP/2", resp.Proto)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: "))
		if !ok {
			continue
		}
		if string(line) == "[DONE]" {
			return nil
		}
		var t sseToken
		if err := json.Unmarshal(line, &t); err != nil {
			return err
		}
		if err := emit(llm.Token{Text: t.Text, ID: t.ID, EngineLatency: time.Duration(t.Lat)}); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return fmt.Errorf("stream ended without [DONE]")
}

// pacer hands one token at a time to the transport and waits until the
// client has read it, recording when each was handed over and read. The
// difference is the latency the transport adds to one token.
type pacer struct {
	n      int
	sent   []time.Time
	recv   []time.Time
	readCh chan struct{}
}

func newPacer(n int) *pacer {
	return &pacer{n: n, sent: make([]time.Time, n), recv: make([]time.Time, n), readCh: make(chan struct{}, 1)}
}

func (p *pacer) Generate(ctx context.Context, r *llm.Request, emit llm.Emit) (llm.Final, error) {
	if r.ID == "warm" {
		return llm.Final{}, emit(llm.Token{Text: "warm"})
	}
	for i := range p.n {
		p.sent[i] = time.Now()
		if err := emit(llm.Token{Text: "tok ", ID: int32(i), EngineLatency: 20 * time.Millisecond}); err != nil {
			return llm.Final{}, err
		}
		select {
		case <-p.readCh:
		case <-ctx.Done():
			return llm.Final{}, ctx.Err()
		}
	}
	return llm.Final{CompletionTokens: p.n}, nil
}

func (p *pacer) emit(t llm.Token) error {
	p.recv[t.ID] = time.Now()
	p.readCh <- struct{}{}
	return nil
}

func (p *pacer) latencies() []time.Duration {
	out := make([]time.Duration, p.n)
	for i := range out {
		out[i] = p.recv[i].Sub(p.sent[i])
	}
	slices.Sort(out)
	return out
}

func pct(sorted []time.Duration, q float64) time.Duration {
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// BenchmarkTokenLatency: the time from the server handing a token to the
// transport until the client has read it, one token in flight at a time
// (an engine producing tokens slower than the link carries them), over
// QUIC and over SSE on HTTP/2. Reports p50/p99 for both and the ratio.
func BenchmarkTokenLatency(b *testing.B) {
	n := max(b.N, 100)
	pq, ps := newPacer(n), newPacer(n)
	s := startServer(b, pq)
	c := dial(b, s.Addr().String(), "dev-1")
	srv, hc := sseServer(b, ps)
	ctx := context.Background()
	// Warm both connections up so handshakes are not measured.
	nop := func(llm.Token) error { return nil }
	if _, err := c.Generate(ctx, req("warm"), nop); err != nil {
		b.Fatal(err)
	}
	if err := sseGenerate(ctx, hc, srv.URL+"/?id=warm", nop); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	if _, err := c.Generate(ctx, req("lat"), pq.emit); err != nil {
		b.Fatal(err)
	}
	if err := sseGenerate(ctx, hc, srv.URL+"/?id=lat", ps.emit); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	q, h := pq.latencies(), ps.latencies()
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	b.ReportMetric(us(pct(q, 0.50)), "quic-p50-µs")
	b.ReportMetric(us(pct(q, 0.99)), "quic-p99-µs")
	b.ReportMetric(us(pct(h, 0.50)), "sse-h2-p50-µs")
	b.ReportMetric(us(pct(h, 0.99)), "sse-h2-p99-µs")
	b.ReportMetric(float64(pct(h, 0.50))/float64(pct(q, 0.50)), "sse/quic-p50")
	b.ReportMetric(float64(pct(h, 0.99))/float64(pct(q, 0.99)), "sse/quic-p99")
}

// flood emits tokens as fast as the transport takes them.
type flood struct{ n int }

func (f flood) Generate(ctx context.Context, r *llm.Request, emit llm.Emit) (llm.Final, error) {
	for i := range f.n {
		if err := emit(llm.Token{Text: "tok ", ID: int32(i)}); err != nil {
			return llm.Final{}, err
		}
	}
	return llm.Final{CompletionTokens: f.n}, nil
}

// BenchmarkConcurrentStreams: tokens per second for 64 concurrent streams
// of 256 tokens on one connection, QUIC against SSE over one HTTP/2
// connection. One op is one round of 64 streams on each transport.
func BenchmarkConcurrentStreams(b *testing.B) {
	const streams, tokens = 64, 256
	s := startServer(b, flood{tokens})
	c := dial(b, s.Addr().String(), "dev-1")
	srv, hc := sseServer(b, flood{tokens})
	ctx := context.Background()
	round := func(run func(i int, emit llm.Emit) error) time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, streams)
		for i := range streams {
			wg.Go(func() {
				got := 0
				err := run(i, func(llm.Token) error { got++; return nil })
				if err == nil && got != tokens {
					err = fmt.Errorf("stream %d: %d tokens", i, got)
				}
				if err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	viaQUIC := func(i int, emit llm.Emit) error {
		_, err := c.Generate(ctx, req(fmt.Sprint(i)), emit)
		return err
	}
	viaSSE := func(i int, emit llm.Emit) error {
		return sseGenerate(ctx, hc, fmt.Sprintf("%s/?id=%d", srv.URL, i), emit)
	}
	round(viaQUIC) // warm-up: handshakes, flow-control windows
	round(viaSSE)
	b.ResetTimer()
	var q, h time.Duration
	for range b.N {
		q += round(viaQUIC)
		h += round(viaSSE)
	}
	b.StopTimer()
	total := float64(b.N * streams * tokens)
	b.ReportMetric(total/q.Seconds(), "quic-tok/s")
	b.ReportMetric(total/h.Seconds(), "sse-h2-tok/s")
	b.ReportMetric(h.Seconds()/q.Seconds(), "quic/sse-throughput")
}

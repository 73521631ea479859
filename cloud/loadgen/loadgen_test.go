package loadgen

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/transport/httpapi"
)

// TestRunKeepsStreamsOpen: every stream sends its requests back to back,
// so at most Streams run at once and every request is sampled.
func TestRunKeepsStreamsOpen(t *testing.T) {
	var running, peak atomic.Int32
	res, err := Run(context.Background(), Config{Streams: 8, Requests: 3, Ramp: time.Millisecond}, func(ctx context.Context, stream, seq int) Sample {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		defer running.Add(-1)
		if stream == 0 && seq == 2 {
			return Sample{Outcome: Shed, Err: "full"}
		}
		return Sample{TTFT: time.Duration(stream+1) * time.Millisecond, EngineTTFT: time.Millisecond}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Samples) != 24 || res.Count(OK) != 23 || res.Count(Shed) != 1 {
		t.Fatalf("%d samples, %d ok, %d shed", len(res.Samples), res.Count(OK), res.Count(Shed))
	}
	if p := peak.Load(); p > 8 {
		t.Fatalf("%d requests at once from 8 streams", p)
	}
	added := res.Added()
	if added[0] != 0 || added[len(added)-1] != 7*time.Millisecond {
		t.Fatalf("added %v", added)
	}
	if got := Percentile(added, 50); got != 4*time.Millisecond { // the 12th of 23: 0 0 1 1 1 2 2 2 3 3 3 4
		t.Fatalf("p50 %v", got)
	}
	if _, err := Run(context.Background(), Config{}, nil); err == nil || !strings.Contains(err.Error(), "Streams") {
		t.Fatalf("zero streams: %v", err)
	}
}

// gate is a generator with two slots: it refuses requests as overloaded
// while both are taken, and holds the answered ones until four refusals
// were seen, so every run both answers and sheds. Its begin event carries
// the engine's TTFT, as the coordinator's does.
type gate struct {
	slots   chan struct{}
	refused atomic.Int32
	release chan struct{}
	once    sync.Once
}

const gateEngineTTFT = 5 * time.Millisecond

func (g *gate) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	select {
	case g.slots <- struct{}{}:
		defer func() { <-g.slots }()
	default:
		if g.refused.Add(1) >= 4 {
			g.once.Do(func() { close(g.release) })
		}
		return llm.Final{}, llm.Errorf(llm.CodeOverloaded, "all %d slots busy", cap(g.slots))
	}
	select {
	case <-g.release:
	case <-ctx.Done():
		return llm.Final{}, ctx.Err()
	}
	st := llm.NewStream(emit)
	st.Meta = llm.Meta{Route: llm.RouteCloud, EngineTTFT: gateEngineTTFT}
	for range req.MaxTokens {
		if err := st.Emit(llm.Token{Text: "tok "}); err != nil {
			return llm.Final{}, err
		}
	}
	return llm.Final{CompletionTokens: req.MaxTokens, FinishReason: "length"}, nil
}

// TestHTTPMeasuresAndSheds runs both APIs through the real HTTP handler: the
// engine's TTFT comes from Server-Timing and is subtracted, and refusals in
// the API's own shape count as shed, never as failures.
func TestHTTPMeasuresAndSheds(t *testing.T) {
	for _, api := range []string{"openai", "anthropic"} {
		t.Run(api, func(t *testing.T) {
			g := &gate{slots: make(chan struct{}, 2), release: make(chan struct{})}
			h, err := httpapi.NewHandler(g, httpapi.Options{})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(h)
			defer srv.Close()
			send, err := HTTP(HTTPConfig{URL: srv.URL, API: api, MaxTokens: 3}, 6)
			if err != nil {
				t.Fatal(err)
			}
			res, err := Run(context.Background(), Config{Streams: 6, Requests: 2, Ramp: time.Millisecond}, send)
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			res.WriteText(&out)
			if res.Count(Failed) != 0 || res.Count(OK) < 2 || res.Count(Shed) < 4 {
				t.Fatalf("want answers and 503s only:\n%s", out.String())
			}
			for _, s := range res.Samples {
				if s.Outcome == OK && (s.EngineTTFT != gateEngineTTFT || s.TTFT <= 0) {
					t.Fatalf("sample %+v: engine TTFT not the generator's %v", s, gateEngineTTFT)
				}
				if s.Outcome == Shed && (s.Status != 503 || !strings.Contains(s.Err, "slots busy")) {
					t.Fatalf("shed sample %+v", s)
				}
			}
			if !strings.Contains(out.String(), "added TTFT ms") {
				t.Fatalf("no added TTFT line:\n%s", out.String())
			}
		})
	}
}

// TestHTTPRefusalOutOfShapeFails: a 503 that is not the API's error JSON is
// a failure (a proxy's HTML page, not the server shedding cleanly).
func TestHTTPRefusalOutOfShapeFails(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(503)
		w.Write([]byte("<html>busy</html>"))
	}))
	defer srv.Close()
	send, err := HTTP(HTTPConfig{URL: srv.URL}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if s := send(context.Background(), 0, 0); s.Outcome != Failed || !strings.Contains(s.Err, "not the openai error shape") {
		t.Fatalf("%+v", s)
	}
}

func TestEngineTTFT(t *testing.T) {
	for h, want := range map[string]time.Duration{
		"engine;dur=12.5":               12500 * time.Microsecond,
		"db;dur=3, engine;desc=x;dur=1": time.Millisecond,
		"engine":                        0,
		"engine;dur=-1":                 0,
		"":                              0,
		"cache;dur=2":                   0,
		"engine;dur=NaN":                0,
		"engine;dur=1e300":              0,
	} {
		if got := EngineTTFT(h); got != want {
			t.Errorf("%q: %v, want %v", h, got, want)
		}
	}
}

// FuzzEngineTTFT: the Server-Timing header comes from the server under
// test; any value parses to a sane duration or 0.
func FuzzEngineTTFT(f *testing.F) {
	f.Add("engine;dur=12.5")
	f.Add("a, engine;dur=1;desc=\"x\"")
	f.Fuzz(func(t *testing.T, h string) {
		if d := EngineTTFT(h); d < 0 {
			t.Fatalf("%q: negative %v", h, d)
		}
	})
}

// FuzzReadStream: a server's SSE body and error body never panic the
// reader, and a stream that reports success saw its end marker.
func FuzzReadStream(f *testing.F) {
	f.Add("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n", true)
	f.Add("event: content_block_delta\ndata: {}\n\nevent: message_stop\ndata: {}\n", false)
	f.Add("{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"m\"}}", false)
	f.Fuzz(func(t *testing.T, body string, openai bool) {
		api := "anthropic"
		if openai {
			api = "openai"
		}
		errorShape(api, []byte(body))
		if err := readStream(api, strings.NewReader(body), func() {}); err == nil {
			marker := "data: [DONE]"
			if !openai {
				marker = "event: message_stop"
			}
			if !strings.Contains(body, marker) {
				t.Fatalf("%q accepted without %q", body, marker)
			}
		}
	})
}

package cloud

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/internal/tracing/otlptest"
)

// TestCloudSpansOverOTLP: with --otlp pointing at a real OTLP receiver, a
// request that names a traceparent is exported as one trace: the front
// cloud's request span under the caller's, with admission, queueing,
// scheduling, prefill and decode under it, and the remote worker behind it
// (another Phaseless cloud, with a batching built-in engine) continuing
// the same trace from the front's request span, with the batcher's
// queueing span too.
func TestCloudSpansOverOTLP(t *testing.T) {
	rx := otlptest.New(t)
	otlpURL := func(cfg *Config) {
		if err := cfg.OTLP.Set(rx.URL()); err != nil {
			t.Fatal(err)
		}
	}
	upstream := startCloud(t, func(cfg *Config) { cfg.BuiltinWorkers = 1; otlpURL(cfg) })
	front := startCloud(t, func(cfg *Config) {
		otlpURL(cfg)
		cfg.BuiltinWorkers = 0
		if err := cfg.Workers.Set("http://" + upstream.HTTPAddr()); err != nil {
			t.Fatal(err)
		}
	})
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	post := func(model string) {
		req, _ := http.NewRequest("POST", "http://"+front.HTTPAddr()+"/v1/chat/completions",
			strings.NewReader(`{"model":"`+model+`","max_tokens":3,"stream":true,"messages":[{"role":"user","content":"hello"}]}`))
		req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %s", model, resp.Status)
		}
	}
	const requests = 2
	for range requests {
		post("auto")
	}
	// A request's span ends when Generate returns, just after the client
	// read the stream's end: flush until every span is in (the bound is a
	// hang guard, not a timing check).
	var spans []otlptest.Span
	for tries := 0; len(spans) != requests*(6+7); tries++ {
		if tries == 3000 {
			t.Fatalf("%d spans exported, want %d: %+v", len(spans), requests*(6+7), spans)
		}
		time.Sleep(time.Duration(min(tries, 1)) * 10 * time.Millisecond)
		for _, c := range []*Cloud{front, upstream} {
			if err := c.tracer.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		spans = rx.Spans()
	}
	byID := map[string]otlptest.Span{}
	for _, s := range spans {
		if s.TraceID != traceID {
			t.Errorf("span %s in trace %s, not the caller's", s.Name, s.TraceID)
		}
		byID[s.SpanID] = s
	}
	var frontRoots, upstreamRoots int
	stages := map[string]int{}
	for _, s := range spans {
		if s.Name == "phaseless.cloud.request" {
			parent, ok := byID[s.ParentSpanID]
			switch {
			case s.ParentSpanID == "00f067aa0ba902b7":
				frontRoots++
			case ok && parent.Service == "phaseless-cloud" && parent.Name == "phaseless.cloud.request":
				upstreamRoots++ // the remote hop continued from the front's request span
			default:
				t.Errorf("request span with parent %s (%+v)", s.ParentSpanID, parent)
			}
			continue
		}
		if p, ok := byID[s.ParentSpanID]; !ok || p.Name != "phaseless.cloud.request" {
			t.Errorf("%s span's parent %s is not a request span", s.Name, s.ParentSpanID)
		}
		stages[s.Name+"/"+s.Attributes["phaseless.queue"]]++
	}
	if frontRoots != requests || upstreamRoots != requests {
		t.Errorf("%d front request spans and %d upstream ones, want %d of each", frontRoots, upstreamRoots, requests)
	}
	total := frontRoots + upstreamRoots
	for _, st := range []string{"admission/", "queueing/tenant", "scheduling/", "prefill/", "decode/"} {
		if stages[st] != total {
			t.Errorf("%d %s spans, want one per request span (%d): %v", stages[st], st, total, stages)
		}
	}
	if stages["queueing/batch"] != requests {
		t.Errorf("%d batcher queueing spans, want %d (upstream only): %v", stages["queueing/batch"], requests, stages)
	}
}

package metrics

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

func TestTextExposition(t *testing.T) {
	r := NewRegistry()
	r.Counter("requests_total", "Requests.").Add(3)
	r.Gauge("queue_depth", "Queue.").Set(2.5)
	r.GaugeFunc("kv_free", "Free blocks.", func() float64 { return 7 })
	h := r.Histogram("ttft_seconds", "TTFT.", []float64{0.1, 1})
	for _, v := range []float64{0.05, 0.5, 5} {
		h.Observe(v)
	}
	r.LabeledCounter("fallbacks_total", "Fallbacks.", "reason").With(`over"load`).Inc()
	var b strings.Builder
	r.WriteText(&b)
	got := b.String()
	for _, want := range []string{
		"# TYPE requests_total counter\nrequests_total 3\n",
		"queue_depth 2.5\n",
		"kv_free 7\n",
		`ttft_seconds_bucket{le="0.1"} 1`,
		`ttft_seconds_bucket{le="1"} 2`,
		`ttft_seconds_bucket{le="+Inf"} 3`,
		"ttft_seconds_sum 5.55\n",
		"ttft_seconds_count 3\n",
		`fallbacks_total{reason="over\"load"} 1`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
	if strings.Index(got, "fallbacks_total") > strings.Index(got, "requests_total") {
		t.Error("metrics are not sorted by name")
	}
}

func TestRegisterTwiceReturnsSame(t *testing.T) {
	r := NewRegistry()
	first, second := r.Counter("a", ""), r.Counter("a", "")
	if first != second {
		t.Fatal("second registration returned a new counter")
	}
}

func TestConcurrentCounter(t *testing.T) {
	c := NewRegistry().Counter("c", "")
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				c.Inc()
			}
		}()
	}
	wg.Wait()
	if c.Value() != 8000 {
		t.Fatalf("value = %g", c.Value())
	}
}

func TestHealthEndpoints(t *testing.T) {
	mux := http.NewServeMux()
	var ready error = http.ErrServerClosed
	Health(mux, NewRegistry(), func() error { return ready })
	for _, tt := range []struct {
		path string
		code int
	}{{"/healthz", 200}, {"/readyz", 503}, {"/metrics", 200}} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", tt.path, nil))
		if rec.Code != tt.code {
			t.Errorf("%s = %d, want %d", tt.path, rec.Code, tt.code)
		}
	}
	ready = nil
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != 200 {
		t.Errorf("/readyz after ready = %d", rec.Code)
	}
}

func BenchmarkHistogramObserve(b *testing.B) {
	h := NewRegistry().Histogram("h", "", DefLatencyBuckets)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		h.Observe(float64(i%100) * 0.001)
	}
}

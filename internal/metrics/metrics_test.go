package metrics

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/phaseless/phaseless/internal/metrics/metricstest"
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
	r.HistogramVec("route_ttft_seconds", "TTFT by path.", []float64{0.1}, "path").With("local").Observe(0.05)
	r.CounterVec("pool_requests_total", "Requests by pool.", "pool", "worker").With("stream", "w1").Add(2)
	r.GaugeVecFunc("pool_queue", "Queue by pool.", []string{"pool"}, func(emit Emit) {
		emit(4, "stream")
		emit(1, "decode-heavy")
		emit(9, "stream") // a duplicate: dropped, the page stays valid
	})
	r.CounterFunc("faults_total", "Faults.", func() float64 { return 11 })
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
		`route_ttft_seconds_bucket{path="local",le="0.1"} 1`,
		`route_ttft_seconds_count{path="local"} 1`,
		`pool_requests_total{pool="stream",worker="w1"} 2`,
		"pool_queue{pool=\"decode-heavy\"} 1\npool_queue{pool=\"stream\"} 4\n",
		"# TYPE faults_total counter\nfaults_total 11\n",
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
	first, second := r.Counter("a_total", ""), r.Counter("a_total", "")
	if first != second {
		t.Fatal("second registration returned a new counter")
	}
}

func TestConcurrentCounter(t *testing.T) {
	c := NewRegistry().Counter("c_total", "")
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
	for _, tt := range []struct {
		name  string
		ready error
		code  int
		body  string
	}{
		{"ready", nil, 200, "ready\n"},
		{"degraded", &Degraded{errors.New("redis down")}, 200, "degraded: redis down\n"},
		{"degraded twice", errors.Join(&Degraded{errors.New("a")}, nil, &Degraded{errors.New("b")}), 200, "degraded: a; b\n"},
		{"degraded and not ready", errors.Join(&Degraded{errors.New("a")}, errors.New("no workers")), 503, "not ready: a\nno workers\n"},
		{"wrapped degraded is still an error", fmt.Errorf("x: %w", &Degraded{errors.New("a")}), 503, "not ready: x: a\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ready = tt.ready
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
			if rec.Code != tt.code || rec.Body.String() != tt.body {
				t.Errorf("/readyz = %d %q, want %d %q", rec.Code, rec.Body.String(), tt.code, tt.body)
			}
		})
	}
}

func BenchmarkHistogramObserve(b *testing.B) {
	h := NewRegistry().Histogram("h", "", DefLatencyBuckets)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		h.Observe(float64(i%100) * 0.001)
	}
}

func TestParsesWithExpfmt(t *testing.T) {
	r := NewRegistry()
	r.Counter("phaseless_a_total", "A.").Inc()
	r.Gauge("phaseless_g", "G with a \\ and\na newline.").Set(math.Inf(1))
	r.HistogramVec("phaseless_h_seconds", "H.", DefLatencyBuckets, "path", "pool").With("cloud", `we"ird\`).Observe(0.3)
	r.Histogram("phaseless_plain_seconds", "P.", []float64{1}).Observe(2)
	r.GaugeVecFunc("phaseless_pool_utilization", "U.", []string{"pool"}, func(emit Emit) { emit(0.5, "stream") })
	r.CounterVecFunc("phaseless_w_total", "W.", []string{"worker"}, func(emit Emit) { emit(3, "w\n1") })
	var b strings.Builder
	r.WriteText(&b)
	fams := metricstest.Parse(t, b.String())
	metricstest.CheckConventions(t, fams)
	if v, ok := metricstest.Value(fams, "phaseless_h_seconds", "pool="+`we"ird\`); !ok || v != 1 {
		t.Errorf("histogram series = %v %v", v, ok)
	}
	if v, _ := metricstest.Value(fams, "phaseless_w_total", "worker=w\n1"); v != 3 {
		t.Errorf("counter func = %v", v)
	}
	if v, _ := metricstest.Value(fams, "phaseless_g"); !math.IsInf(v, 1) {
		t.Errorf("gauge = %v", v)
	}
}

func TestRegistrationRules(t *testing.T) {
	for _, tt := range []struct {
		name string
		reg  func(r *Registry)
	}{
		{"counter without _total", func(r *Registry) { r.Counter("phaseless_requests", "") }},
		{"counter func without _total", func(r *Registry) { r.CounterFunc("phaseless_faults", "", func() float64 { return 0 }) }},
		{"bad name", func(r *Registry) { r.Gauge("phaseless-queue", "") }},
		{"bad label", func(r *Registry) { r.CounterVec("x_total", "", "pool-name") }},
		{"reserved label", func(r *Registry) { r.HistogramVec("x_seconds", "", nil, "le") }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("registration did not panic")
				}
			}()
			tt.reg(NewRegistry())
		})
	}
	t.Run("wrong label count", func(t *testing.T) {
		defer func() {
			if recover() == nil {
				t.Error("With did not panic")
			}
		}()
		NewRegistry().CounterVec("x_total", "", "a", "b").With("only-one")
	})
}

func TestHistogramSnapshotQuantile(t *testing.T) {
	r := NewRegistry()
	v := r.HistogramVec("x_seconds", "", []float64{1, 2, 4}, "pool")
	before := v.Snapshot()
	for _, x := range []float64{0.5, 1.5, 1.5, 3} {
		v.With("a").Observe(x)
	}
	v.With("b").Observe(10)
	d := v.Snapshot().Sub(before)
	if d.Total() != 5 || d.Sum != 16.5 {
		t.Fatalf("snapshot %+v", d)
	}
	// rank 2.5 of 5 falls in (1,2] holding 2 observations after 1: 1 + 1*(1.5/2)
	if got := d.Quantile(0.5); math.Abs(got-1.75) > 1e-9 {
		t.Errorf("p50 = %g, want 1.75", got)
	}
	if got := d.Quantile(0.99); got != 4 {
		t.Errorf("p99 = %g, want the last bound 4", got)
	}
	if !math.IsNaN(HistogramSnapshot{Bounds: []float64{1}, Counts: []uint64{0, 0}}.Quantile(0.5)) {
		t.Error("empty quantile is not NaN")
	}
}

// The admin listener serves pprof (a real heap profile, gzip-compressed
// protobuf) and /metrics to requests that name this machine, and stops on
// Close.
func TestAdminServesPprof(t *testing.T) {
	r := NewRegistry()
	r.Counter("phaseless_x_total", "X.").Inc()
	a, err := ListenAdmin("127.0.0.1:0", r, []string{"Car.local"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Serve() }()
	get := func(path string) (int, []byte) {
		resp, err := http.Get("http://" + a.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if code, body := get("/debug/pprof/"); code != 200 || !strings.Contains(string(body), "goroutine") {
		t.Errorf("index: %d", code)
	}
	if code, body := get("/debug/pprof/heap"); code != 200 || len(body) < 2 || body[0] != 0x1f || body[1] != 0x8b {
		t.Errorf("heap profile: %d, %d bytes, not gzip", code, len(body))
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(string(body), "phaseless_x_total 1") {
		t.Errorf("metrics: %d %s", code, body)
	}
	// DNS rebinding (issue 27): a page whose name resolves to 127.0.0.1
	// reaches the listener but sends its own name as the Host.
	for host, want := range map[string]int{
		"evil.example": 403, "evil.example:" + strings.Split(a.Addr(), ":")[1]: 403, "127.0.0.1.nip.io": 403,
		"localhost": 200, "127.0.0.1:9": 200, "[::1]:80": 200, "car.local:6060": 200,
	} {
		for _, path := range []string{"/debug/pprof/cmdline", "/metrics"} {
			req, _ := http.NewRequest("GET", "http://"+a.Addr()+path, nil)
			req.Host = host
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != want || (want == 403 && strings.Contains(string(body), "metrics.test")) {
				t.Errorf("GET %s with Host %q: %d, want %d", path, host, resp.StatusCode, want)
			}
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	a.Close()
	if err := <-done; err != nil {
		t.Fatalf("Serve after Close: %v", err)
	}
	if _, err := http.Get("http://" + a.Addr() + "/debug/pprof/"); err == nil {
		t.Error("admin listener still answers after Close")
	}
}

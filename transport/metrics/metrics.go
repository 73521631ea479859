// Package metrics is a small, allocation-free-on-update implementation of the
// Prometheus text exposition format, so the agent can expose /metrics without
// linking the full Prometheus client.
package metrics

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
)

// Registry holds named metrics and writes them in Prometheus text format.
type Registry struct {
	mu      sync.Mutex // guards metrics
	metrics map[string]metric
}

type metric interface {
	write(w io.Writer, name string)
	help() (string, string) // help text, type
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{metrics: map[string]metric{}} }

func (r *Registry) register(name string, m metric) metric {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.metrics[name]; ok {
		return old
	}
	r.metrics[name] = m
	return m
}

// WriteText writes every metric, sorted by name.
func (r *Registry) WriteText(w io.Writer) {
	r.mu.Lock()
	names := make([]string, 0, len(r.metrics))
	for n := range r.metrics {
		names = append(names, n)
	}
	ms := make([]metric, len(names))
	sort.Strings(names)
	for i, n := range names {
		ms[i] = r.metrics[n]
	}
	r.mu.Unlock()
	for i, n := range names {
		h, t := ms[i].help()
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", n, h, n, t)
		ms[i].write(w, n)
	}
}

// Handler serves the registry at /metrics.
func (r *Registry) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		r.WriteText(w)
	})
}

// Counter is a monotonically increasing value.
type Counter struct {
	helpText string
	v        atomic.Uint64 // float64 bits
}

// Counter returns the counter called name, creating it on first use.
func (r *Registry) Counter(name, help string) *Counter {
	return r.register(name, &Counter{helpText: help}).(*Counter)
}

// Add adds d (≥ 0).
func (c *Counter) Add(d float64) {
	for {
		old := c.v.Load()
		if c.v.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+d)) {
			return
		}
	}
}

// Inc adds one.
func (c *Counter) Inc() { c.Add(1) }

// Value returns the current value.
func (c *Counter) Value() float64 { return math.Float64frombits(c.v.Load()) }

func (c *Counter) help() (string, string) { return c.helpText, "counter" }
func (c *Counter) write(w io.Writer, name string) {
	fmt.Fprintf(w, "%s %g\n", name, c.Value())
}

// Gauge is a value that goes up and down, or is read from a function.
type Gauge struct {
	helpText string
	v        atomic.Uint64
	fn       func() float64
}

// Gauge returns the gauge called name.
func (r *Registry) Gauge(name, help string) *Gauge {
	return r.register(name, &Gauge{helpText: help}).(*Gauge)
}

// GaugeFunc registers a gauge whose value is read from fn at scrape time.
func (r *Registry) GaugeFunc(name, help string, fn func() float64) {
	r.register(name, &Gauge{helpText: help, fn: fn})
}

// Set sets the value.
func (g *Gauge) Set(v float64) { g.v.Store(math.Float64bits(v)) }

// Value returns the current value.
func (g *Gauge) Value() float64 {
	if g.fn != nil {
		return g.fn()
	}
	return math.Float64frombits(g.v.Load())
}

func (g *Gauge) help() (string, string) { return g.helpText, "gauge" }
func (g *Gauge) write(w io.Writer, name string) {
	fmt.Fprintf(w, "%s %g\n", name, g.Value())
}

// Histogram counts observations into fixed buckets.
type Histogram struct {
	helpText string
	bounds   []float64
	counts   []atomic.Uint64 // one per bound, plus +Inf
	sum      Counter
}

// Histogram returns the histogram called name with the given upper bounds.
func (r *Registry) Histogram(name, help string, bounds []float64) *Histogram {
	h := &Histogram{helpText: help, bounds: append([]float64(nil), bounds...), counts: make([]atomic.Uint64, len(bounds)+1)}
	return r.register(name, h).(*Histogram)
}

// Observe records v.
func (h *Histogram) Observe(v float64) {
	i := sort.SearchFloat64s(h.bounds, v)
	h.counts[i].Add(1)
	h.sum.Add(v)
}

// Count returns the number of observations.
func (h *Histogram) Count() uint64 {
	var n uint64
	for i := range h.counts {
		n += h.counts[i].Load()
	}
	return n
}

func (h *Histogram) help() (string, string) { return h.helpText, "histogram" }
func (h *Histogram) write(w io.Writer, name string) {
	var cum uint64
	for i, b := range h.bounds {
		cum += h.counts[i].Load()
		fmt.Fprintf(w, "%s_bucket{le=\"%g\"} %d\n", name, b, cum)
	}
	cum += h.counts[len(h.bounds)].Load()
	fmt.Fprintf(w, "%s_bucket{le=\"+Inf\"} %d\n%s_sum %g\n%s_count %d\n", name, cum, name, h.sum.Value(), name, cum)
}

// LabeledCounter is a family of counters keyed by one label's value.
type LabeledCounter struct {
	helpText string
	label    string
	mu       sync.Mutex // guards byVal
	byVal    map[string]*Counter
}

// LabeledCounter returns the counter family called name with one label.
func (r *Registry) LabeledCounter(name, help, label string) *LabeledCounter {
	return r.register(name, &LabeledCounter{helpText: help, label: label, byVal: map[string]*Counter{}}).(*LabeledCounter)
}

// With returns the counter for one label value.
func (l *LabeledCounter) With(value string) *Counter {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.byVal[value]
	if !ok {
		c = &Counter{}
		l.byVal[value] = c
	}
	return c
}

func (l *LabeledCounter) help() (string, string) { return l.helpText, "counter" }
func (l *LabeledCounter) write(w io.Writer, name string) {
	l.mu.Lock()
	vals := make([]string, 0, len(l.byVal))
	for v := range l.byVal {
		vals = append(vals, v)
	}
	sort.Strings(vals)
	cs := make([]*Counter, len(vals))
	for i, v := range vals {
		cs[i] = l.byVal[v]
	}
	l.mu.Unlock()
	for i, v := range vals {
		fmt.Fprintf(w, "%s{%s=\"%s\"} %g\n", name, l.label, escape(v), cs[i].Value())
	}
}

func escape(s string) string {
	return strings.NewReplacer("\\", `\\`, "\n", `\n`, `"`, `\"`).Replace(s)
}

// DefLatencyBuckets are seconds from 50 µs to 30 s, for request and token latencies.
var DefLatencyBuckets = []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// Health serves /healthz (the process is alive) and /readyz (ready reports
// nil once the component can take traffic) on mux, with /metrics from r.
func Health(mux *http.ServeMux, r *Registry, ready func() error) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ready != nil {
			if err := ready(); err != nil {
				http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		io.WriteString(w, "ready\n")
	})
	mux.Handle("GET /metrics", r.Handler())
}

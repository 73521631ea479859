// Package metrics is a small, allocation-free-on-update implementation of the
// Prometheus text exposition format, so the agent can expose /metrics without
// linking the full Prometheus client (about 2 MiB of the agent's 23 MiB arm64
// budget).
//
// It follows Prometheus's naming rules where they can be checked when a
// metric is registered: names and label names are valid identifiers, a
// counter's name ends in _total (registering one that does not panics: it is
// a programming error), and labels are labels, not parts of names. Families
// with labels come in two kinds: vectors updated by the caller (CounterVec,
// HistogramVec) and families read at scrape time from state another component
// owns (GaugeVecFunc, CounterVecFunc).
package metrics

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
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

var nameRE = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)

func (r *Registry) register(name string, labels []string, m metric) metric {
	if !nameRE.MatchString(name) {
		panic(fmt.Sprintf("metrics: invalid metric name %q", name))
	}
	for _, l := range labels {
		if !nameRE.MatchString(l) || strings.HasPrefix(l, "__") || l == "le" {
			panic(fmt.Sprintf("metrics: invalid label name %q on %s", l, name))
		}
	}
	if _, typ := m.help(); typ == "counter" && !strings.HasSuffix(name, "_total") {
		panic(fmt.Sprintf("metrics: counter %s must end in _total", name))
	}
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
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", n, escapeHelp(h), n, t)
		ms[i].write(w, n)
	}
}

// Handler serves the registry at /metrics.
func (r *Registry) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
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
	return r.register(name, nil, &Counter{helpText: help}).(*Counter)
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
	fmt.Fprintf(w, "%s %s\n", name, formatValue(c.Value()))
}

// Gauge is a value that goes up and down, or is read from a function.
type Gauge struct {
	helpText string
	v        atomic.Uint64
	fn       func() float64
}

// Gauge returns the gauge called name.
func (r *Registry) Gauge(name, help string) *Gauge {
	return r.register(name, nil, &Gauge{helpText: help}).(*Gauge)
}

// GaugeFunc registers a gauge whose value is read from fn at scrape time.
func (r *Registry) GaugeFunc(name, help string, fn func() float64) {
	r.register(name, nil, &Gauge{helpText: help, fn: fn})
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
	fmt.Fprintf(w, "%s %s\n", name, formatValue(g.Value()))
}

// counterFunc is a counter whose cumulative value another component keeps.
type counterFunc struct {
	helpText string
	fn       func() float64
}

// CounterFunc registers a counter read from fn at scrape time: a cumulative
// count kept elsewhere (an engine's fault counter), exported as a counter so
// PromQL's rate() treats a reset correctly.
func (r *Registry) CounterFunc(name, help string, fn func() float64) {
	r.register(name, nil, &counterFunc{helpText: help, fn: fn})
}

func (c *counterFunc) help() (string, string) { return c.helpText, "counter" }
func (c *counterFunc) write(w io.Writer, name string) {
	fmt.Fprintf(w, "%s %s\n", name, formatValue(c.fn()))
}

// Histogram counts observations into fixed buckets.
type Histogram struct {
	helpText string
	bounds   []float64
	counts   []atomic.Uint64 // one per bound, plus +Inf
	sum      Counter
}

func newHistogram(help string, bounds []float64) *Histogram {
	return &Histogram{helpText: help, bounds: append([]float64(nil), bounds...), counts: make([]atomic.Uint64, len(bounds)+1)}
}

// Histogram returns the histogram called name with the given upper bounds.
func (r *Registry) Histogram(name, help string, bounds []float64) *Histogram {
	return r.register(name, nil, newHistogram(help, bounds)).(*Histogram)
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

func (h *Histogram) help() (string, string)         { return h.helpText, "histogram" }
func (h *Histogram) write(w io.Writer, name string) { h.writeLabeled(w, name, "") }

// writeLabeled writes the series with labels (`a="x",b="y"`, may be empty)
// in front of le.
func (h *Histogram) writeLabeled(w io.Writer, name, labels string) {
	sep, braces := ",", "{"+labels+"}"
	if labels == "" {
		sep, braces = "", ""
	}
	var cum uint64
	for i, b := range h.bounds {
		cum += h.counts[i].Load()
		fmt.Fprintf(w, "%s_bucket{%s%sle=\"%s\"} %d\n", name, labels, sep, formatValue(b), cum)
	}
	cum += h.counts[len(h.bounds)].Load()
	fmt.Fprintf(w, "%s_bucket{%s%sle=\"+Inf\"} %d\n%s_sum%s %s\n%s_count%s %d\n",
		name, labels, sep, cum, name, braces, formatValue(h.sum.Value()), name, braces, cum)
}

// vec is the label bookkeeping that CounterVec and HistogramVec share: one
// child per distinct tuple of label values, written sorted.
type vec[T any] struct {
	labels []string
	mu     sync.Mutex // guards byKey
	byKey  map[string]*vecChild[T]
	make   func() *T
}

type vecChild[T any] struct {
	pairs string // rendered label pairs
	m     *T
}

func (v *vec[T]) with(values []string) *T {
	if len(values) != len(v.labels) {
		panic(fmt.Sprintf("metrics: %d label values for labels %v", len(values), v.labels))
	}
	key := strings.Join(values, "\xff")
	v.mu.Lock()
	defer v.mu.Unlock()
	c, ok := v.byKey[key]
	if !ok {
		c = &vecChild[T]{pairs: labelPairs(v.labels, values), m: v.make()}
		v.byKey[key] = c
	}
	return c.m
}

func (v *vec[T]) children() []*vecChild[T] {
	v.mu.Lock()
	keys := make([]string, 0, len(v.byKey))
	for k := range v.byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	cs := make([]*vecChild[T], len(keys))
	for i, k := range keys {
		cs[i] = v.byKey[k]
	}
	v.mu.Unlock()
	return cs
}

// CounterVec is a family of counters with labels.
type CounterVec struct {
	helpText string
	vec[Counter]
}

// LabeledCounter is the one-label CounterVec older call sites use.
type LabeledCounter = CounterVec

// CounterVec returns the counter family called name with the given labels.
func (r *Registry) CounterVec(name, help string, labels ...string) *CounterVec {
	v := &CounterVec{helpText: help, vec: vec[Counter]{labels: labels, byKey: map[string]*vecChild[Counter]{}, make: func() *Counter { return &Counter{} }}}
	return r.register(name, labels, v).(*CounterVec)
}

// LabeledCounter returns the counter family called name with one label.
func (r *Registry) LabeledCounter(name, help, label string) *LabeledCounter {
	return r.CounterVec(name, help, label)
}

// With returns the counter for one tuple of label values, in label order.
func (l *CounterVec) With(values ...string) *Counter { return l.with(values) }

func (l *CounterVec) help() (string, string) { return l.helpText, "counter" }
func (l *CounterVec) write(w io.Writer, name string) {
	for _, c := range l.children() {
		fmt.Fprintf(w, "%s{%s} %s\n", name, c.pairs, formatValue(c.m.Value()))
	}
}

// HistogramVec is a family of histograms with labels and shared buckets.
type HistogramVec struct {
	helpText string
	vec[Histogram]
}

// HistogramVec returns the histogram family called name.
func (r *Registry) HistogramVec(name, help string, bounds []float64, labels ...string) *HistogramVec {
	v := &HistogramVec{helpText: help, vec: vec[Histogram]{labels: labels, byKey: map[string]*vecChild[Histogram]{}, make: func() *Histogram { return newHistogram("", bounds) }}}
	return r.register(name, labels, v).(*HistogramVec)
}

// With returns the histogram for one tuple of label values, in label order.
func (h *HistogramVec) With(values ...string) *Histogram { return h.with(values) }

func (h *HistogramVec) help() (string, string) { return h.helpText, "histogram" }
func (h *HistogramVec) write(w io.Writer, name string) {
	for _, c := range h.children() {
		c.m.writeLabeled(w, name, c.pairs)
	}
}

// Emit reports one series of a scrape-time family: its value and its label
// values in the family's label order.
type Emit func(value float64, labelValues ...string)

type funcVec struct {
	helpText, typ string
	labels        []string
	collect       func(Emit)
}

// GaugeVecFunc registers a gauge family whose series collect reports at
// scrape time, e.g. one per worker pool.
func (r *Registry) GaugeVecFunc(name, help string, labels []string, collect func(Emit)) {
	r.register(name, labels, &funcVec{helpText: help, typ: "gauge", labels: labels, collect: collect})
}

// CounterVecFunc registers a counter family whose cumulative values collect
// reports at scrape time.
func (r *Registry) CounterVecFunc(name, help string, labels []string, collect func(Emit)) {
	r.register(name, labels, &funcVec{helpText: help, typ: "counter", labels: labels, collect: collect})
}

func (f *funcVec) help() (string, string) { return f.helpText, f.typ }
func (f *funcVec) write(w io.Writer, name string) {
	type series struct {
		pairs string
		v     float64
	}
	var out []series
	seen := map[string]bool{}
	f.collect(func(v float64, values ...string) {
		if len(values) != len(f.labels) {
			panic(fmt.Sprintf("metrics: %s: %d label values for labels %v", name, len(values), f.labels))
		}
		p := labelPairs(f.labels, values)
		if seen[p] { // a duplicate series would make the page invalid
			return
		}
		seen[p] = true
		out = append(out, series{p, v})
	})
	sort.Slice(out, func(i, j int) bool { return out[i].pairs < out[j].pairs })
	for _, s := range out {
		fmt.Fprintf(w, "%s{%s} %s\n", name, s.pairs, formatValue(s.v))
	}
}

func labelPairs(names, values []string) string {
	var b strings.Builder
	for i, n := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(n)
		b.WriteString(`="`)
		b.WriteString(labelEscaper.Replace(values[i]))
		b.WriteByte('"')
	}
	return b.String()
}

var (
	labelEscaper = strings.NewReplacer("\\", `\\`, "\n", `\n`, `"`, `\"`)
	helpEscaper  = strings.NewReplacer("\\", `\\`, "\n", `\n`)
)

func escapeHelp(s string) string { return helpEscaper.Replace(s) }

// formatValue writes a sample value as the text format spells it (+Inf,
// -Inf, NaN; %g otherwise).
func formatValue(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return fmt.Sprintf("%g", v)
}

// DefLatencyBuckets are seconds from 50 µs to 30 s, for request and token latencies.
var DefLatencyBuckets = []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// Degraded marks a readiness error that leaves the component serving, in a
// reduced way (a shared store unreachable, its budgets failing open): /readyz
// answers 200 "degraded: ..." for it, not 503. A load balancer pulls a 503
// backend; when every replica shares the dependency, all would be pulled
// and the service lost, for a fault it survives.
type Degraded struct{ Err error }

func (d *Degraded) Error() string { return d.Err.Error() }
func (d *Degraded) Unwrap() error { return d.Err }

// onlyDegraded reports whether every error err joins is a *Degraded.
func onlyDegraded(err error) bool {
	if d, ok := err.(*Degraded); ok && d != nil {
		return true
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !onlyDegraded(e) {
				return false
			}
		}
		return len(j.Unwrap()) > 0
	}
	return false
}

// Health serves /healthz (the process is alive) and /readyz (ready reports
// nil once the component can take traffic; 503 otherwise, or 200 with a
// "degraded: " body when every error it reports is a *Degraded) on mux,
// with /metrics from r.
func Health(mux *http.ServeMux, r *Registry, ready func() error) {
	Probes(mux, ready)
	mux.Handle("GET /metrics", r.Handler())
}

// Probes serves /healthz and /readyz as Health does, without /metrics,
// for a listener that guards its metrics (the cloud's public one).
func Probes(mux *http.ServeMux, ready func() error) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ready != nil {
			if err := ready(); err != nil {
				if onlyDegraded(err) {
					w.Header().Set("Content-Type", "text/plain; charset=utf-8")
					io.WriteString(w, "degraded: "+strings.ReplaceAll(err.Error(), "\n", "; ")+"\n")
					return
				}
				http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		io.WriteString(w, "ready\n")
	})
}

// HistogramSnapshot is a histogram's state at one moment: Counts[i] is the
// number of observations ≤ Bounds[i] and above the bound before it, and the
// last entry counts those above every bound.
type HistogramSnapshot struct {
	Bounds []float64
	Counts []uint64
	Sum    float64
}

// Snapshot reads the histogram's buckets (each bucket atomically; not all
// of them at one instant, which a live view does not need).
func (h *Histogram) Snapshot() HistogramSnapshot {
	s := HistogramSnapshot{Bounds: h.bounds, Counts: make([]uint64, len(h.counts)), Sum: h.sum.Value()}
	for i := range h.counts {
		s.Counts[i] = h.counts[i].Load()
	}
	return s
}

// Snapshot merges every series of the family into one (the series share
// their bounds).
func (h *HistogramVec) Snapshot() HistogramSnapshot {
	var out HistogramSnapshot
	for _, c := range h.children() {
		s := c.m.Snapshot()
		if out.Counts == nil {
			out = HistogramSnapshot{Bounds: s.Bounds, Counts: make([]uint64, len(s.Counts))}
		}
		for i, n := range s.Counts {
			out.Counts[i] += n
		}
		out.Sum += s.Sum
	}
	return out
}

// Sub returns the observations made between earlier and s.
func (s HistogramSnapshot) Sub(earlier HistogramSnapshot) HistogramSnapshot {
	out := HistogramSnapshot{Bounds: s.Bounds, Counts: make([]uint64, len(s.Counts)), Sum: s.Sum - earlier.Sum}
	for i, n := range s.Counts {
		if i < len(earlier.Counts) && earlier.Counts[i] <= n {
			n -= earlier.Counts[i]
		}
		out.Counts[i] = n
	}
	return out
}

// Total is the number of observations.
func (s HistogramSnapshot) Total() uint64 {
	var n uint64
	for _, c := range s.Counts {
		n += c
	}
	return n
}

// Quantile estimates the q-quantile (0..1) by linear interpolation inside
// the bucket that holds it, as PromQL's histogram_quantile does; observations
// above the last bound report that bound. It is NaN without observations.
func (s HistogramSnapshot) Quantile(q float64) float64 {
	total := s.Total()
	if total == 0 || len(s.Bounds) == 0 {
		return math.NaN()
	}
	rank := q * float64(total)
	var cum float64
	for i, n := range s.Counts {
		if i == len(s.Bounds) {
			return s.Bounds[len(s.Bounds)-1]
		}
		if cum+float64(n) >= rank && n > 0 {
			lo := 0.0
			if i > 0 {
				lo = s.Bounds[i-1]
			}
			return lo + (s.Bounds[i]-lo)*(rank-cum)/float64(n)
		}
		cum += float64(n)
	}
	return s.Bounds[len(s.Bounds)-1]
}

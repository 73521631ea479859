// Package metricstest checks a /metrics page the way Prometheus reads it:
// it parses the page with the Prometheus project's own text parser
// (prometheus/common/expfmt) and checks the project's naming conventions.
// Only tests import it, so the agent binary does not link the parser.
package metricstest

import (
	"io"
	"net/http"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Parse parses a text exposition page with expfmt and fails t on any error
// (bad syntax, a TYPE line after samples, duplicate series, bad histograms).
func Parse(t testing.TB, page string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(page))
	if err != nil {
		t.Fatalf("expfmt rejects the metrics page: %v\n%s", err, page)
	}
	return fams
}

// Scrape fetches url (a /metrics endpoint) and parses it.
func Scrape(t testing.TB, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("scrape %s: %d %v", url, resp.StatusCode, err)
	}
	if ct := resp.Header.Get("Content-Type"); expfmt.ResponseFormat(resp.Header).FormatType() != expfmt.TypeTextPlain {
		t.Errorf("scrape %s: content type %q is not the text format", url, ct)
	}
	return Parse(t, string(b))
}

// inProcessRates are name endings of values PromQL should compute from
// counters (rate(), division) rather than the process.
var inProcessRates = []string{"_per_second", "_per_ms", "_ratio", "_rate"}

// CheckConventions fails t for each family that breaks the project's rules:
// every name starts with phaseless_, counters (and only counters) end in
// _total, and no family is a rate or ratio computed in-process.
func CheckConventions(t testing.TB, fams map[string]*dto.MetricFamily) {
	t.Helper()
	for name, f := range fams {
		if !strings.HasPrefix(name, "phaseless_") {
			t.Errorf("%s: missing the phaseless_ prefix", name)
		}
		isCounter := f.GetType() == dto.MetricType_COUNTER
		if isCounter != strings.HasSuffix(name, "_total") {
			t.Errorf("%s: type %s; counters and only counters end in _total", name, f.GetType())
		}
		for _, s := range inProcessRates {
			if strings.HasSuffix(name, s) {
				t.Errorf("%s: a rate or ratio computed in-process; export the counters and let PromQL divide", name)
			}
		}
		if f.GetHelp() == "" {
			t.Errorf("%s: no HELP text", name)
		}
	}
}

// Value returns the value of the series of family name whose labels include
// every pair in labels ("k=v"); a counter's, gauge's or histogram's count.
// ok is false when no such series exists.
func Value(fams map[string]*dto.MetricFamily, name string, labels ...string) (v float64, ok bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		for _, want := range labels {
			k, val, _ := strings.Cut(want, "=")
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == k && lp.GetValue() == val {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

// CheckPprof fails t unless addr (an --admin-listen address) serves a Go
// goroutine profile.
func CheckPprof(t testing.TB, addr string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "goroutine profile:") {
		t.Fatalf("goroutine profile from %s: %d %.200s", addr, resp.StatusCode, body)
	}
}

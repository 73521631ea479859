package main

import (
	"io"
	"os"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestRequestTableFits: rows with long routes and fallback reasons stay
// within the width with every column at the same offset, and each long value
// is spelled out whole in the legend (issue 36: the fallback column read
// "cloud f…" and long routes pushed the columns out of line).
func TestRequestTableFits(t *testing.T) {
	reason := "cloud failed before first token: quic: dial 127.0.0.1:4433: connection refused after 3 attempts over 5s, retrying later"
	longRoute := "cloud/decode-heavy/http://vllm-decode-0.vllm.inference.svc.cluster.local:8000"
	rows := [][]string{
		{"demo-car-1", "command", "local", "", "41ms", "210ms"},
		{"demo-car-2", "out-of-scope", "cloud/prefill-heavy/builtin-1", "", "120ms", "900ms"},
		{"demo-car-3", "general", longRoute, "", "95ms", "1200ms"},
		{"demo-car-1", "pinned", "local", reason, "33ms", "400ms"},
		{"demo-car-2", "pinned", "local", reason, "35ms", "410ms"},
		{"demo-car-3", "mmlu", "local", "cloud sent no token within 5s", "5012ms", "5400ms"},
	}
	tab := requestTable()
	out := tab.header()
	for _, r := range rows {
		out += tab.row(r, strings.Repeat("turn the heated seats on please ", 6)+"→ "+strings.Repeat("okay ", 40))
	}
	legend := tab.flushLegend()
	lines := strings.Split(strings.TrimRight(out+legend, "\n"), "\n")
	for _, l := range lines {
		if n := utf8.RuneCountInString(l); n > width {
			t.Errorf("%d columns: %q", n, l)
		}
	}
	// The TTFT column ends at the same offset on every row.
	header := lines[0]
	end := strings.Index(header, "TTFT") + len("TTFT")
	for _, r := range rows {
		for _, l := range lines {
			if strings.HasPrefix(l, "    "+r[0]) && strings.Contains(l, r[4]) {
				if got := strings.Index(l, r[4]) + len(r[4]); got != end {
					t.Errorf("TTFT of %q ends at %d, the heading at %d:\n%s\n%s", r[0], got, end, header, l)
				}
			}
		}
	}
	// Long values are in the legend whole (joined back from the wrap), once
	// each; the built-in route fits and is not there.
	joined := strings.Join(strings.Fields(legend), " ")
	for _, want := range []string{"f1 = " + reason, "r1 = " + longRoute, "f2 = cloud sent no token within 5s"} {
		if !strings.Contains(joined, want) {
			t.Errorf("legend lacks %q:\n%s", want, legend)
		}
	}
	if strings.Count(legend, "f1 =") != 1 || strings.Contains(legend, "f3") || strings.Contains(legend, "builtin-1") {
		t.Errorf("legend repeats a value or lists one that fits:\n%s", legend)
	}
	if !strings.Contains(out, " cloud/prefill-heavy/builtin-1 ") {
		t.Errorf("a route that fits was abbreviated:\n%s", out)
	}
	if tab.flushLegend() != "" {
		t.Error("the legend was not forgotten after a flush")
	}
}

// TestWrap: lines at most the width, nothing lost, a word longer than a line
// broken rather than overflowing.
func TestWrap(t *testing.T) {
	long := strings.Repeat("x", 130)
	s := "phaseless_pd_handoff_bytes_total{prefill_pool=\"prefill-heavy\"} = 42 " + long + " end"
	got := wrap(s, "    ", "      ", 40)
	var back strings.Builder
	for i, l := range strings.Split(strings.TrimRight(got, "\n"), "\n") {
		if utf8.RuneCountInString(l) > 40 {
			t.Errorf("line %d is %d wide: %q", i, utf8.RuneCountInString(l), l)
		}
		back.WriteString(strings.TrimSpace(l))
	}
	if strings.ReplaceAll(s, " ", "") != strings.ReplaceAll(back.String(), " ", "") {
		t.Errorf("wrap lost text:\n%s", got)
	}
	if wrap("", "  ", "  ", 10) != "\n" {
		t.Errorf("empty: %q", wrap("", "  ", "  ", 10))
	}
}

// TestSummaryFits: the summary's tables stay within the width with every
// kind of request and route in them.
func TestSummaryFits(t *testing.T) {
	d := &demo{cloudMetrics: []string{`phaseless_pd_handoff_prompt_tokens_total{prefill_pool="prefill-heavy",decode_pool="decode-heavy"} = 103`}}
	kinds := []string{"command", "spoken-car", "general", "question", "mmlu", "out-of-scope"}
	for i := range 400 {
		d.results = append(d.results, result{phase: []string{"online", "outage", "recovered"}[i%3], device: devices[i%3],
			kind: kinds[i%6], route: "cloud/prefill-heavy/http://vllm-decode-0.vllm.inference.svc.cluster.local:8000", tokens: 48})
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	d.summary()
	os.Stdout = stdout
	w.Close()
	out, _ := io.ReadAll(r)
	for _, l := range strings.Split(string(out), "\n") {
		if utf8.RuneCountInString(l) > width {
			t.Errorf("%d columns: %q", utf8.RuneCountInString(l), l)
		}
	}
	if !strings.Contains(string(out), "sent to cloud") || !strings.Contains(string(out), "67 of 67") {
		t.Errorf("summary:\n%s", out)
	}
}

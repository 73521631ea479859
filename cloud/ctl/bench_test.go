package ctl

import (
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// phaselessctl bench report --quick runs the engine in process and the
// scheduler's benchmarks with the go command (the other go-test sections
// take the same path; PHASELESS_BENCH_ALL=1 runs all of --quick), and
// writes a report whose every plot is a real PNG it links.
func TestBenchReportQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go test -bench")
	}
	dir := t.TempDir()
	args := []string{"bench", "report", "--quick", "-o", dir, "--only", "engine,scheduler,agent,simulator"}
	all := os.Getenv("PHASELESS_BENCH_ALL") == "1"
	if all {
		args = args[:5]
	}
	out, err := runCtl(t, args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(md)
	wants := []string{"## engine: built-in engine", "| decode batch | tokens/s", "## scheduler", "Decide/rules", "ns/op", "-benchtime 1000x", "## simulator", "phaselessctl sim"}
	if all {
		wants = append(wants, "## transport", "TokenLatency", "## telemetry")
	} else if strings.Contains(text, "## transport") {
		t.Error("--only left transport in")
	}
	for _, want := range wants {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if !strings.Contains(text, "Not run: left out of --quick") { // the agent's benchmarks
		t.Error("the slow benchmarks are not marked as left out")
	}
	links := regexp.MustCompile(`\]\(([^)]+\.png)\)`).FindAllStringSubmatch(text, -1)
	if len(links) < 2 {
		t.Fatalf("%d plots linked:\n%s", len(links), text)
	}
	for _, l := range links {
		f, err := os.Open(filepath.Join(dir, l[1]))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil || img.Bounds().Dx() < 100 {
			t.Errorf("%s: %v", l[1], err)
		}
	}
}

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
// quick subset of the package benchmarks with the go command, and writes a
// report whose every plot is a real PNG it links.
func TestBenchReportQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go test -bench on four packages")
	}
	dir := t.TempDir()
	out, err := runCtl(t, "bench", "report", "--quick", "-o", dir)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(md)
	for _, want := range []string{"## engine: built-in engine", "| decode batch | tokens/s", "## scheduler", "Decide/rules", "## transport", "TokenLatency", "## telemetry", "ns/op", "-benchtime 1000x"} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if !strings.Contains(text, "Not run: left out of --quick") {
		t.Error("the slow benchmarks are not marked as left out")
	}
	links := regexp.MustCompile(`\]\(([^)]+\.png)\)`).FindAllStringSubmatch(text, -1)
	if len(links) < 4 {
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

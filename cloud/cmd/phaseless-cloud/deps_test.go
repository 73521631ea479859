package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The coordinator links no training code or corpora (DESIGN.md §3): the
// shadow grader (models/grade) once pulled in the language models' training
// corpus and its 1.1 MB of embedded data. These prefixes are what training
// brings: the trainers, their corpora and gorgonia's autodiff.
var trainingPrefixes = []string{
	"github.com/phaseless/phaseless/models/lmtrain",
	"github.com/phaseless/phaseless/models/predictor/train",
	"github.com/phaseless/phaseless/cloud/sim/learn",
	"github.com/phaseless/phaseless/cloud/fleetapi/trainset",
	"gorgonia.org/",
}

func TestCloudDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, f := range trainingPrefixes {
			if strings.HasPrefix(dep, f) {
				t.Errorf("phaseless-cloud links %s (forbidden prefix %s)", dep, f)
			}
		}
	}
}

// TestCloudLinksNoTrainingSymbols reads the built binary's symbol table, so
// that nothing reaches it by a path go list does not show (a linkname, a
// package renamed later).
func TestCloudLinksNoTrainingSymbols(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the cloud binary")
	}
	bin := filepath.Join(t.TempDir(), "cloud")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	out, err := exec.Command("go", "tool", "nm", bin).Output()
	if err != nil {
		t.Fatalf("nm: %v", err)
	}
	bad := 0
	for _, line := range strings.Split(string(out), "\n") {
		for _, f := range trainingPrefixes {
			if strings.Contains(line, f) {
				if bad++; bad <= 20 {
					t.Errorf("cloud binary contains training symbol: %s", strings.TrimSpace(line))
				}
				break
			}
		}
	}
	if bad > 20 {
		t.Errorf("… and %d more", bad-20)
	}
}

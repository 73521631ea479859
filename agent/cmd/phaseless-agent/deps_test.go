package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The agent runs on boards with little flash and RAM. These tests keep it from
// linking the cloud, training code or the scheduler by accident (in the spirit
// of tailscale's deps_test.go).
func TestAgentDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	forbidden := []string{
		"github.com/phaseless/phaseless/cloud",
		"github.com/phaseless/phaseless/models/lmtrain",
		"github.com/phaseless/phaseless/models/cloudmodel",
		"github.com/phaseless/phaseless/models/predictor/train",
		"github.com/mochi-mqtt/server",
		"github.com/redis/",
		"github.com/prometheus/client_golang",
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if strings.HasPrefix(dep, f) {
				t.Errorf("phaseless-agent links %s (forbidden prefix %s)", dep, f)
			}
		}
	}
}

// onnx-go's inference backend imports the gorgonia package, whose solvers
// share it with the graph code, so the package list cannot tell inference from
// training. The linker drops what is unreachable, so the symbol table can: no
// solver and no symbolic differentiation may survive in the agent binary.
func TestAgentLinksNoTrainingSymbols(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the agent")
	}
	bin := filepath.Join(t.TempDir(), "agent")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	out, err := exec.Command("go", "tool", "nm", bin).Output()
	if err != nil {
		t.Fatalf("nm: %v", err)
	}
	forbidden := []string{
		"gorgonia.org/gorgonia.(*AdamSolver)",
		"gorgonia.org/gorgonia.(*VanillaSolver)",
		"gorgonia.org/gorgonia.(*RMSPropSolver)",
		"gorgonia.org/gorgonia.Grad",
		"github.com/phaseless/phaseless/cloud",
	}
	for _, line := range strings.Split(string(out), "\n") {
		for _, f := range forbidden {
			if strings.Contains(line, f) {
				t.Errorf("agent binary contains training or cloud symbol: %s", strings.TrimSpace(line))
				break
			}
		}
	}
}

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

// agentSymbols builds the agent with the device tags for the host and returns
// its symbol table (the cross build is stripped, and the linker decides what
// to keep the same way on every architecture).
func agentSymbols(t *testing.T) []string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "agent")
	if out, err := exec.Command("go", "build", "-tags", agentTags, "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	out, err := exec.Command("go", "tool", "nm", bin).Output()
	if err != nil {
		t.Fatalf("nm: %v", err)
	}
	return strings.Split(string(out), "\n")
}

// TestAgentSymbols reads what the linker kept in the device build.
//
// onnx-go's inference backend imports the gorgonia package, whose solvers
// share it with the graph code, so the package list cannot tell inference from
// training. The linker drops what is unreachable, so the symbol table can: no
// solver and no symbolic differentiation may survive in the agent binary.
//
// The linker also drops exported methods nothing calls, unless a reachable
// function looks methods up by reflection (reflect.Value.Method, or
// MethodByName with a name it cannot see); then it keeps every exported
// method of every reachable type, 5.1 MiB in this binary (docs/agent.md,
// "What the binary is made of"). gorgonia's tensor.Dtype embeds reflect.Type, so
// its promoted MethodByName is such a function as soon as anything calls
// reflect.Type.MethodByName, as golang/protobuf v1.4+ does when onnx-go's
// and tensor's generated protobuf types register (go.mod pins v1.3.5, the
// version they were generated for). gorgonia's ToDot (text/template, another
// such function) is the canary: reachable from a reachable type, called by
// nothing.
func TestAgentSymbols(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the agent")
	}
	syms := agentSymbols(t)
	check := func(what string, forbidden []string) {
		for _, line := range syms {
			for _, f := range forbidden {
				if strings.Contains(line, f) {
					t.Errorf("agent binary contains %s: %s", what, strings.TrimSpace(line))
					break
				}
			}
		}
	}
	check("a training or cloud symbol", []string{
		"gorgonia.org/gorgonia.(*AdamSolver)",
		"gorgonia.org/gorgonia.(*VanillaSolver)",
		"gorgonia.org/gorgonia.(*RMSPropSolver)",
		"gorgonia.org/gorgonia.Grad",
		"github.com/phaseless/phaseless/cloud",
	})
	check("a method only reflection could call (the linker kept every exported method)", []string{
		"gorgonia.org/tensor.Dtype.MethodByName",
		"gorgonia.org/gorgonia.(*ExprGraph).ToDot",
		"text/template.(*state).evalField",
	})
}

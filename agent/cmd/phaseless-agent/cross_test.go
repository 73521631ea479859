package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sizeBudget is the most a stripped arm64 agent may weigh (issue 2): device
// flash is small and OTA bundles travel over cellular links.
const sizeBudget = 20 << 20

type board struct {
	name, goarch, goarm, qemu string
}

var boards = []board{
	{"linux-arm64", "arm64", "", "qemu-aarch64-static"},
	{"linux-armv7", "arm", "7", "qemu-arm-static"},
}

// buildAgent cross-compiles the agent the way `make cross` does: static,
// stripped.
func buildAgent(t *testing.T, b board) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "phaseless-agent")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X github.com/phaseless/phaseless/transport/cli.Version=crosstest", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+b.goarch, "GOARM="+b.goarm)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cross build %s: %v\n%s", b.name, err, out)
	}
	return bin
}

// TestCrossCompiledAgentUnderQEMU builds the ARM agents and runs them under
// user-mode emulation: --version and the on-board self-check must pass.
func TestCrossCompiledAgentUnderQEMU(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles the agent")
	}
	for _, b := range boards {
		t.Run(b.name, func(t *testing.T) {
			bin := buildAgent(t, b)
			st, err := os.Stat(bin)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s stripped agent: %.1f MiB", b.name, float64(st.Size())/(1<<20))
			if b.goarch == "arm64" && st.Size() > sizeBudget {
				t.Errorf("arm64 agent is %d bytes, budget %d", st.Size(), sizeBudget)
			}
			qemu, err := exec.LookPath(b.qemu)
			if err != nil {
				if os.Getenv("CI") != "" {
					t.Fatalf("%s not installed; .ci/run installs qemu-user-static", b.qemu)
				}
				t.Skipf("%s not installed (apt-get install qemu-user-static)", b.qemu)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, qemu, bin, "--version").CombinedOutput()
			if err != nil || !strings.Contains(string(out), "phaseless-agent crosstest") {
				t.Fatalf("--version under %s: %v\n%s", b.qemu, err, out)
			}
			out, err = exec.CommandContext(ctx, qemu, bin, "selfcheck").CombinedOutput()
			if err != nil || !strings.Contains(string(out), "selfcheck passed") {
				t.Fatalf("selfcheck under %s: %v\n%s", b.qemu, err, out)
			}
			t.Logf("%s", out)
		})
	}
}

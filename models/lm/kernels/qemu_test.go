//go:build amd64 && linux

package kernels

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestArm64KernelsUnderQEMU cross-compiles this package's tests for arm64 and
// runs the quantized-kernel ones under qemu-aarch64-static on two CPU
// models: cortex-a72 (ARMv8.0, no SDOT, no FP16: what a Raspberry Pi 4 is),
// where fastDot must pick the base-NEON kernels, and cortex-a76 (SDOT),
// where it picks the SDOT ones (and has no i8mm, so the GEMM falls back to
// one-row kernels); TestNEONKernelsMatchGo also runs the base ones there.
// On max (every feature qemu emulates, i8mm included) the GEMM takes pairs
// of rows and tokens through the SMMLA kernels, which
// TestI8MMKernelsMatchGo checks against the Go ones and the batch tests
// against the one-token kernels. Each checks the kernels against the Go ones bit for bit, the
// batch invariance of the quantized products, and the tiled GEMM's
// agreement with the per-row loop on ARM.
func TestArm64KernelsUnderQEMU(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles the package")
	}
	qemu, err := exec.LookPath("qemu-aarch64-static")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("qemu-aarch64-static not installed; .ci/run installs qemu-user-static")
		}
		t.Skip("qemu-aarch64-static not installed (apt-get install qemu-user-static)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "kernels-arm64.test")
	build := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin, ".")
	build.Env = append(os.Environ(), "GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("cross-compile: %v\n%s", err, out)
	}
	// want: lines the run must print, which show which kernels ran: every
	// quantized type has both arm64 kernels, base NEON on the A72 (which
	// has no SDOT) and both on the A76.
	cpus := []struct {
		model string
		want  []string
	}{
		{"cortex-a72", []string{"no SDOT on this CPU", "no i8mm on this CPU"}},
		{"cortex-a76", []string{"no i8mm on this CPU"}},
		{"max", nil},
	}
	for _, d := range quantTypes {
		cpus[0].want = append(cpus[0].want, d.String()+" neon kernel equals")
		cpus[1].want = append(cpus[1].want, d.String()+" neon kernel equals", d.String()+" sdot kernel equals")
		cpus[2].want = append(cpus[2].want, d.String()+" sdot kernel equals")
	}
	// The types with one-row, four-token kernels (arm64Kernels' sdot4 and
	// neon4, qdot_arm64.go, not built here).
	for _, d := range []string{"q4_0", "q5_0", "q8_0"} {
		cpus[0].want = append(cpus[0].want, d+" neon ×4 kernel equals")
		cpus[1].want = append(cpus[1].want, d+" neon ×4 kernel equals", d+" sdot ×4 kernel equals")
	}
	// i8mmKernels' types (qdot_arm64.go, not built here).
	cpus[2].want = append(cpus[2].want, "q4_0 i8mm kernel equals", "q5_0 i8mm kernel equals", "q8_0 i8mm kernel equals",
		"q4_K i8mm kernel equals", "q6_K i8mm kernel equals")
	var wg sync.WaitGroup
	outs := make([][]byte, len(cpus))
	errs := make([]error, len(cpus))
	for i, c := range cpus {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = exec.CommandContext(ctx, qemu, "-cpu", c.model, bin, "-test.v",
				"-test.run", "^(TestNEONKernelsMatchGo|TestI8MMKernelsMatchGo|TestQuantAssemblyMatchesGo|TestQuantDotMatchesDequantized|TestQuantMulBatchInvariant|TestQuantActivationSums|TestGEMMMatchesPerRow)$").CombinedOutput()
		}()
	}
	wg.Wait()
	for i, c := range cpus {
		out := string(outs[i])
		if errs[i] != nil || !strings.Contains(out, "--- PASS: TestNEONKernelsMatchGo") ||
			!strings.Contains(out, "--- PASS: TestQuantMulBatchInvariant") ||
			!strings.Contains(out, "TestI8MMKernelsMatchGo") || !strings.Contains(out, "--- PASS: TestGEMMMatchesPerRow") {
			t.Fatalf("arm64 kernel tests under qemu -cpu %s: %v\n%s", c.model, errs[i], out)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("qemu -cpu %s: output lacks %q:\n%s", c.model, w, out)
			}
		}
		t.Logf("under qemu-aarch64 -cpu %s:\n%s", c.model, out)
	}
}

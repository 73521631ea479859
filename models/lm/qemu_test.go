//go:build amd64 && linux

package lm

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestArm64KernelsUnderQEMU cross-compiles this package's tests for arm64 and
// runs the quantized-kernel ones under qemu-aarch64-static: the NEON/SDOT
// kernels against the Go ones, bit for bit, and the batch invariance of the
// quantized products on ARM. (qemu's default CPU has SDOT, so both arm64
// kernels run.)
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
	bin := filepath.Join(t.TempDir(), "lm-arm64.test")
	build := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin, ".")
	build.Env = append(os.Environ(), "GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("cross-compile: %v\n%s", err, out)
	}
	out, err := exec.CommandContext(ctx, qemu, bin, "-test.v",
		"-test.run", "^(TestQ8_0NEONKernelsMatchGo|TestQuantAssemblyMatchesGo|TestQuantDotMatchesDequantized|TestQuantMulBatchInvariant|TestQuantActivationSums)$").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestQ8_0NEONKernelsMatchGo") {
		t.Fatalf("arm64 kernel tests under qemu: %v\n%s", err, out)
	}
	t.Logf("under qemu-aarch64:\n%s", out)
}

//go:build amd64 && linux

package kernels

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	qemu, bin := crossTest(ctx, t, "qemu-aarch64-static", "GOARCH=arm64")
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
	models := make([]string, len(cpus))
	for i, c := range cpus {
		models[i] = c.model
	}
	outs, errs := underQEMU(ctx, qemu, bin, models, func(int) string {
		return "TestNEONKernelsMatchGo|TestI8MMKernelsMatchGo|TestQuantAssemblyMatchesGo|TestQuantDotMatchesDequantized|TestQuantMulBatchInvariant|TestQuantActivationSums|TestGEMMMatchesPerRow"
	})
	for i, c := range cpus {
		out := string(outs[i])
		if errs[i] != nil || !strings.Contains(out, "--- PASS: TestNEONKernelsMatchGo") ||
			!strings.Contains(out, "--- PASS: TestQuantMulBatchInvariant") ||
			!strings.Contains(out, "TestI8MMKernelsMatchGo") || !strings.Contains(out, "--- PASS: TestGEMMMatchesPerRow") {
			t.Fatalf("arm64 kernel tests under qemu -cpu %s: %v\n%s", c.model, errs[i], out)
		}
		checkOutput(t, "qemu-aarch64", c.model, out, c.want, nil)
	}
}

// TestArmv7KernelsUnderQEMU cross-compiles this package's tests for 32-bit
// ARM (GOARM=7) and runs the quantized-kernel ones under qemu-arm-static on
// cortex-a15, which has NEON, where fastDot must pick the NEON kernel of
// each type in armv7NEONTypes and TestNEONKernelsMatchGo must match each
// against the Go kernel, and on cortex-r5f (ARMv7 with VFPv3 and no NEON:
// the one qemu CPU without NEON that runs GOARM=7 code), where the Go
// kernels must run. It also vets the package for GOARM=6 (the
// kernels built, chosen at run time) and GOARM=5 (software float: the Go
// kernels only), the builds no qemu run covers.
func TestArmv7KernelsUnderQEMU(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles the package")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	qemu, bin := crossTest(ctx, t, "qemu-arm-static", "GOARCH=arm", "GOARM=7")
	pass := func(names ...string) []string {
		var s []string
		for _, n := range names {
			s = append(s, "--- PASS: "+n)
		}
		return s
	}
	// On the A15 the kernels run inside the products too (batch
	// invariance, the GEMM against the per-row loop); the R5F run only
	// checks that nothing selects them (the products' Go kernels are the
	// host's tests' business), which keeps this test near the arm64 one's
	// time.
	selection := "TestNEONKernelsMatchGo|TestNEONFallback|TestF16BitsARM|TestQuantAssemblyMatchesGo"
	cpus := []struct {
		model, run string
		want, lack []string
	}{
		{"cortex-a15", selection + "|TestNEONKernelsSpecialScales|TestQuantDotMatchesDequantized|TestQuantMulBatchInvariant|TestQuantActivationSums|TestGEMMMatchesPerRow",
			pass("TestNEONKernelsMatchGo", "TestNEONKernelsSpecialScales", "TestQuantDotMatchesDequantized",
				"TestQuantMulBatchInvariant", "TestGEMMMatchesPerRow"), []string{"no NEON on this CPU"}},
		{"cortex-r5f", selection, []string{"no NEON on this CPU: the Go kernels run"}, []string{"neon kernel equals"}},
	}
	for i := range cpus {
		cpus[i].want = append(cpus[i].want, pass("TestNEONFallback", "TestF16BitsARM", "TestQuantAssemblyMatchesGo")...)
	}
	for _, d := range armv7NEONTypes {
		cpus[0].want = append(cpus[0].want, d.String()+" neon kernel equals")
	}
	// go vet type-checks and checks the assembly's frames against the Go
	// declarations for the two other float ABIs, beside the qemu runs.
	var wg sync.WaitGroup
	vetOut := make([][]byte, 2)
	vetErr := make([]error, 2)
	for i, goarm := range []string{"6", "5"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			vet := exec.CommandContext(ctx, "go", "vet", ".")
			vet.Env = append(os.Environ(), "GOOS=linux", "GOARCH=arm", "GOARM="+goarm, "CGO_ENABLED=0")
			vetOut[i], vetErr[i] = vet.CombinedOutput()
		}()
	}
	models := make([]string, len(cpus))
	for i, c := range cpus {
		models[i] = c.model
	}
	outs, errs := underQEMU(ctx, qemu, bin, models, func(i int) string { return cpus[i].run })
	wg.Wait()
	for i, goarm := range []string{"6", "5"} {
		if vetErr[i] != nil {
			t.Errorf("go vet with GOARCH=arm GOARM=%s: %v\n%s", goarm, vetErr[i], vetOut[i])
		}
	}
	for i, c := range cpus {
		out := string(outs[i])
		if errs[i] != nil {
			t.Fatalf("armv7 kernel tests under qemu -cpu %s: %v\n%s", c.model, errs[i], out)
		}
		checkOutput(t, "qemu-arm", c.model, out, c.want, c.lack)
	}
}

// underQEMU runs the test binary bin under qemu once per CPU model, all
// at once, with -test.run matching run(i) for models[i], and returns each
// run's combined output and error.
func underQEMU(ctx context.Context, qemu, bin string, models []string, run func(i int) string) ([][]byte, []error) {
	var wg sync.WaitGroup
	outs := make([][]byte, len(models))
	errs := make([]error, len(models))
	for i, model := range models {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = exec.CommandContext(ctx, qemu, "-cpu", model, bin, "-test.v",
				"-test.run", "^("+run(i)+")$").CombinedOutput()
		}()
	}
	wg.Wait()
	return outs, errs
}

// checkOutput fails t for each of want that a qemu run's output lacks and
// each of lack that it has, and logs the output.
func checkOutput(t *testing.T, emulator, model, out string, want, lack []string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("qemu -cpu %s: output lacks %q:\n%s", model, w, out)
		}
	}
	for _, l := range lack {
		if strings.Contains(out, l) {
			t.Errorf("qemu -cpu %s: output has %q:\n%s", model, l, out)
		}
	}
	t.Logf("under %s -cpu %s:\n%s", emulator, model, out)
}

// crossTest finds the qemu user-mode emulator named (failing under CI
// when it is missing, since .ci/run installs qemu-user-static; skipping
// otherwise) and cross-compiles this package's tests for Linux with env
// (GOARCH, GOARM), returning the emulator's path and the test binary.
func crossTest(ctx context.Context, t *testing.T, emulator string, env ...string) (qemu, bin string) {
	t.Helper()
	qemu, err := exec.LookPath(emulator)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s not installed; .ci/run installs qemu-user-static", emulator)
		}
		t.Skipf("%s not installed (apt-get install qemu-user-static)", emulator)
	}
	bin = filepath.Join(t.TempDir(), "kernels.test")
	build := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin, ".")
	build.Env = append(append(os.Environ(), "GOOS=linux", "CGO_ENABLED=0"), env...)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("cross-compile: %v\n%s", err, out)
	}
	return qemu, bin
}

// TestArmEncodings checks each WORD in qdot_arm.s against the instruction
// its comment names, assembled by llvm-mc for armv7 with NEON: the
// assembler cannot check WORDs, and a wrong register field would still
// assemble. It needs llvm-mc (Debian's llvm package, which .ci/run
// installs); TestArmv7KernelsUnderQEMU checks what the kernels compute.
func TestArmEncodings(t *testing.T) {
	mc, err := exec.LookPath("llvm-mc")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("llvm-mc not installed; .ci/run installs llvm")
		}
		t.Skip("llvm-mc not installed (apt-get install llvm)")
	}
	src, err := os.ReadFile("qdot_arm.s")
	if err != nil {
		t.Fatal(err)
	}
	word := regexp.MustCompile(`\bWORD\b`)
	enc := regexp.MustCompile(`WORD \$0x([0-9a-f]{8})(?:;\s*\\)?\s*// (.+?)\s*$`)
	var words, insns []string
	for i, line := range strings.Split(string(src), "\n") {
		if !word.MatchString(line) || strings.HasPrefix(strings.TrimSpace(line), "//") {
			continue
		}
		m := enc.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("qdot_arm.s:%d: a WORD without its instruction: %s", i+1, line)
			continue
		}
		words, insns = append(words, m[1]), append(insns, m[2])
	}
	if len(words) < 100 {
		t.Fatalf("found %d WORDs in qdot_arm.s; the kernels have more", len(words))
	}
	cmd := exec.Command(mc, "-triple=armv7a-linux-gnueabihf", "-mattr=+neon,+vfp3", "-show-encoding")
	cmd.Stdin = strings.NewReader(strings.Join(insns, "\n") + "\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("llvm-mc: %v\n%s", err, out)
	}
	got := regexp.MustCompile(`encoding: \[0x(..),0x(..),0x(..),0x(..)\]`).FindAllStringSubmatch(string(out), -1)
	if len(got) != len(insns) {
		t.Fatalf("llvm-mc encoded %d of %d instructions:\n%s", len(got), len(insns), out)
	}
	for i, g := range got {
		if w := g[4] + g[3] + g[2] + g[1]; w != words[i] { // little-endian bytes
			t.Errorf("WORD $0x%s // %s: llvm-mc encodes it as 0x%s", words[i], insns[i], w)
		}
	}
	t.Logf("%d NEON/VFP WORDs match their instructions", len(words))
}

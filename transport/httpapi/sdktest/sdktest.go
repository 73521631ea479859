// Package sdktest runs the official OpenAI and Anthropic Node SDKs, pinned
// in examples/sdk-test, against a Phaseless endpoint from Go tests: the
// handler's own tests (transport/httpapi) and the whole agent's (agent)
// both prove compatibility with the real clients rather than with our
// reading of the API docs.
//
// Node and the SDK packages are optional on a developer machine (the test
// skips) but required under CI (the CI environment variable set), where
// their absence fails the test: CI installs them before `make test`.
package sdktest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// packages are the files that show the pinned SDKs are installed.
var packages = []string{
	filepath.Join("node_modules", "openai", "package.json"),
	filepath.Join("node_modules", "@anthropic-ai", "sdk", "package.json"),
}

// unavailable skips t, or fails it under CI.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// Dir returns the absolute path of examples/sdk-test, found from the
// working directory upwards, once Node and the SDKs are there; otherwise
// it skips t (fails it under CI). It installs nothing, so tests of several
// packages running at once never race on node_modules.
func Dir(t testing.TB) string {
	t.Helper()
	dir := locate(t)
	if _, err := exec.LookPath("node"); err != nil {
		unavailable(t, "node not installed: %v", err)
	}
	for _, p := range packages {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			unavailable(t, "SDKs not installed in %s (npm ci there): %v", dir, err)
		}
	}
	return dir
}

// Install is Dir, except that missing SDKs are installed first with
// `npm ci` from the lock file. Only one package's tests call it
// (transport/httpapi), for a developer who has npm but never ran npm ci.
func Install(t testing.TB) string {
	t.Helper()
	dir := locate(t)
	if _, err := exec.LookPath("node"); err != nil {
		unavailable(t, "node not installed: %v", err)
	}
	installed := true
	for _, p := range packages {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			installed = false
		}
	}
	if !installed {
		npm, err := exec.LookPath("npm")
		if err != nil {
			unavailable(t, "npm not installed: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // hang guard only
		defer cancel()
		cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			unavailable(t, "npm ci in %s: %v\n%s", dir, err, out)
		}
	}
	return Dir(t)
}

// locate finds examples/sdk-test in the module that holds the working
// directory (a package's tests run in that package's directory).
func locate(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(d, "examples", "sdk-test")
		}
		if filepath.Dir(d) == d {
			t.Fatalf("no go.mod above %s", wd)
		}
	}
}

// Run runs `node script` in dir with PHASELESS_BASE_URL=baseURL and decodes
// each line it prints (one JSON result per check) as a T. A script that
// fails, or prints anything that is not a result, fails t.
func Run[T any](t testing.TB, dir, script, baseURL string) []T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // hang guard only
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PHASELESS_BASE_URL="+baseURL)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node %s: %v\n%s", script, err, out)
	}
	t.Logf("%s", out)
	res, err := decodeLines[T](out)
	if err != nil {
		t.Fatalf("node %s: %v\n%s", script, err, out)
	}
	return res
}

// decodeLines decodes one T per non-empty line.
func decodeLines[T any](out []byte) ([]T, error) {
	var res []T
	for _, line := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
		var r T
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, fmt.Errorf("not a result line %q: %v", line, err)
		}
		res = append(res, r)
	}
	return res, nil
}

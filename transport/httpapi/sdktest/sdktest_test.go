package sdktest

import (
	"os"
	"path/filepath"
	"testing"
)

func TestLocate(t *testing.T) {
	dir := locate(t)
	for _, f := range []string{"package.json", "package-lock.json", "sdk.mjs", "agent.mjs"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s: %v", dir, err)
		}
	}
}

func TestDecodeLines(t *testing.T) {
	type result struct {
		Check string
		N     int
	}
	got, err := decodeLines[result]([]byte("{\"check\":\"a\",\"n\":1}\n{\"check\":\"b\",\"n\":2}\n"))
	if err != nil || len(got) != 2 || got[0] != (result{"a", 1}) || got[1] != (result{"b", 2}) {
		t.Fatalf("%+v %v", got, err)
	}
	for _, bad := range []string{"", "{\"check\":\"a\"}\nnode: warning\n", "{\"n\":\"x\"}"} {
		if got, err := decodeLines[result]([]byte(bad)); err == nil {
			t.Errorf("%q decoded as %+v", bad, got)
		}
	}
}

// TestRunScript runs a real node script through Run (skipped without node,
// like the SDK tests themselves).
func TestRunScript(t *testing.T) {
	Dir(t)
	dir := t.TempDir()
	script := "console.log(JSON.stringify({check: 'env', n: process.env.PHASELESS_BASE_URL.length}))\n"
	if err := os.WriteFile(filepath.Join(dir, "s.mjs"), []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	got := Run[struct {
		Check string
		N     int
	}](t, dir, "s.mjs", "http://127.0.0.1:1")
	if len(got) != 1 || got[0].Check != "env" || got[0].N != len("http://127.0.0.1:1") {
		t.Fatalf("%+v", got)
	}
}

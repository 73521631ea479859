package cli

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzConfigFile: a YAML config file is outside input (copied, templated,
// edited by hand). Whatever it holds, Parse either applies it or returns a
// FieldError naming a field, never panics, and a file never overrides a
// flag given on the command line.
func FuzzConfigFile(f *testing.F) {
	for _, s := range []string{
		"listen: 0.0.0.0:9000\nidle-timeout: 3s\nworker: [a, b]\n",
		"log_level: debug\nworker: http://x\n",
		"listen: {a: 1}\n",
		"unknown: 1\n",
		"idle-timeout: forever\n",
		"a: &a [*a, *a]\nb: *a\n",
		"- 1\n- 2\n",
		"listen: !!binary aGVsbG8=\n",
		"? [1, 2]\n: x\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		fs, _, listen, _, _ := newFS()
		err := Parse(fs, []string{"--config", path, "--listen", "127.0.0.1:1"}, func(string) string { return "" })
		var fe *FieldError
		if err != nil && (!errors.As(err, &fe) || fe.Field == "") {
			t.Fatalf("error without a field: %v", err)
		}
		if *listen != "127.0.0.1:1" {
			t.Fatalf("file overrode the command line: listen %q", *listen)
		}
	})
}

package docscheck

import (
	"context"
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// runner runs doc command lines on loopback, in process: phaselessctl
// lines as commands of its tree (stdin from `echo …|` or `printf …|`),
// `phaseless-cloud …&` and `phaseless-agent …&` as daemons until the test
// ends, `echo … > FILE` and `export NAME=VALUE` (read by later phaselessctl
// lines, as PHASELESS_* variables are); `make build` and `go build` lines
// are skipped, since the binaries' code runs in process. Every port in the
// lines (":8080") becomes a free one, the same throughout one runner (4433,
// QUIC's, a UDP one), so a doc can say what an operator types while tests
// run side by side. Lines run in a fresh directory; a word naming a file of
// the repository (models/cloudmodel/cloud.gguf, also after NAME=) becomes
// its absolute path, so a command reads the repository's data while what it
// writes stays in the directory, never in the repository.
type runner struct {
	t     *testing.T
	repo  string            // the repository's absolute path
	ports map[string]string // ":8080" → ":41234"
	env   map[string]string
}

var portRE = regexp.MustCompile(`:[0-9]{4,5}\b`)

func newRunner(t *testing.T) *runner {
	repo, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	return &runner{t: t, repo: repo, ports: map[string]string{}, env: map[string]string{}}
}

// repoFile turns a relative path naming a regular file of the repository
// into its absolute path; anything else stays as it is.
func (r *runner) repoFile(w string) string {
	name, p, found := strings.Cut(w, "=")
	if !found {
		name, p = "", w
	} else {
		name += "="
	}
	if p == "" || filepath.IsAbs(p) || strings.HasPrefix(p, "-") {
		return w
	}
	abs := filepath.Join(r.repo, p)
	if st, err := os.Stat(abs); err == nil && st.Mode().IsRegular() {
		return name + abs
	}
	return w
}

func (r *runner) port(p string) string {
	if q, ok := r.ports[p]; ok {
		return q
	}
	network := "tcp"
	if p == ":4433" {
		network = "udp"
	}
	_, q, _ := net.SplitHostPort(freeAddr(r.t, network))
	r.ports[p] = ":" + q
	return r.ports[p]
}

// run runs one line and returns what a command printed.
func (r *runner) run(ctx context.Context, line string) (string, error) {
	line = portRE.ReplaceAllStringFunc(line, r.port)
	words := shellWords(line)
	if len(words) == 0 {
		return "", nil
	}
	for i, w := range words {
		words[i] = r.repoFile(w)
	}
	if words[0] == "echo" && len(words) == 4 && words[2] == ">" {
		return "", os.WriteFile(words[3], []byte(words[1]+"\n"), 0o600)
	}
	if len(words) >= 2 && (words[0] == "make" && words[1] == "build" || words[0] == "go" && words[1] == "build") {
		return "", nil
	}
	stdin := ""
	if i := slices.Index(words, "|"); i > 0 {
		switch words[0] {
		case "echo":
			stdin = strings.Join(words[1:i], " ") + "\n"
		case "printf":
			if i != 2 {
				return "", fmt.Errorf("%q: want printf 'FORMAT' | …", line)
			}
			stdin = strings.ReplaceAll(words[1], `\n`, "\n")
		default:
			return "", fmt.Errorf("docscheck cannot run %q", line)
		}
		words = words[i+1:]
	}
	if words[0] == "export" && len(words) == 2 {
		k, v, ok := strings.Cut(words[1], "=")
		if !ok {
			return "", fmt.Errorf("%q: want export NAME=VALUE", line)
		}
		r.env[k] = v
		return "", nil
	}
	background := words[len(words)-1] == "&"
	if background {
		words = words[:len(words)-1]
	}
	args := words[1:]
	switch bin := path.Base(words[0]); {
	case bin == "phaselessctl" && !background:
		return runCtl(ctx, args, stdin, func(k string) string { return r.env[k] })
	case bin == "phaseless-cloud" && background:
		startCloud(r.t, args...)
		return "", nil
	case bin == "phaseless-agent" && background:
		startAgent(r.t, args...)
		return "", nil
	}
	return "", fmt.Errorf("docscheck cannot run %q", line)
}

// TestRunnableBlocks runs every block marked `<!-- docscheck: run -->`,
// each in a fresh directory: every line must succeed.
func TestRunnableBlocks(t *testing.T) {
	if raceEnabled {
		t.Skip("runs the engine and a 900-request load test: slow under -race; make test runs it without (RACE_FULL)")
	}
	docs, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range docs {
		for _, b := range d.Blocks() {
			if b.Marker != "run" {
				continue
			}
			n++
			t.Run(fmt.Sprintf("%s:%d", filepath.Base(b.File), b.Line), func(t *testing.T) {
				r := newRunner(t)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				for _, l := range b.Commands() {
					out, err := r.run(ctx, l)
					if err != nil {
						t.Fatalf("%s: %v\n%s", l, err, out)
					}
					t.Logf("$ %s\n%.300s", l, out)
				}
			})
		}
	}
	if n == 0 {
		t.Fatal("no block is marked <!-- docscheck: run -->")
	}

}

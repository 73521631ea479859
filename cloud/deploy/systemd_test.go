package deploy

import (
	"bufio"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/agent"
	"github.com/phaseless/phaseless/cloud"
)

// unit is a parsed systemd unit file: section → key → values (a key may
// repeat, as ExecStartPre does).
type unit map[string]map[string][]string

func parseUnit(t *testing.T, path string) unit {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: not a key=value line in a section: %q", path, n, line)
			}
			u[section][strings.TrimSpace(k)] = append(u[section][strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	return u
}

// parseDaemonArgs parses a command line with the binary's own flags (plus
// the --config that every Phaseless daemon takes) and validates it.
func parseDaemonArgs(t *testing.T, unitName string, argv []string) {
	t.Helper()
	bin := filepath.Base(argv[0])
	fs := flag.NewFlagSet(bin, flag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	var config string
	fs.StringVar(&config, "config", "", "")
	var validate func() error
	switch bin {
	case "phaseless-cloud":
		var c cloud.Config
		c.RegisterFlags(fs)
		validate = c.Validate
	case "phaseless-agent":
		var c agent.Config
		c.RegisterFlags(fs)
		validate = c.Validate
	default:
		t.Fatalf("%s runs %s, not a Phaseless daemon", unitName, bin)
	}
	args := argv[1:]
	if len(args) > 0 && args[0] == "selfcheck" {
		return // a subcommand without flags
	}
	if len(args) > 0 && args[0] == "supervise" {
		// The boot supervisor's own flags, then -- and the agent's.
		sup := flag.NewFlagSet("supervise", flag.ContinueOnError)
		sup.SetOutput(new(strings.Builder))
		sup.String("data-dir", "", "")
		sup.String("health", "", "")
		sup.Duration("trial-timeout", 0, "")
		sup.String("log-level", "", "")
		if err := sup.Parse(args[1:]); err != nil {
			t.Errorf("%s: supervise: %v", unitName, err)
			return
		}
		args = sup.Args()
	}
	if err := fs.Parse(args); err != nil {
		t.Errorf("%s: %v", unitName, err)
		return
	}
	if err := validate(); err != nil {
		t.Errorf("%s: %v", unitName, err)
	}
}

// TestSystemdUnits parses both units, checks that every command line uses
// flags the binaries have, and runs `systemd-analyze verify` on them (with
// the binaries' paths pointed at stand-ins, since verify checks that the
// executables exist). Without systemd-analyze it skips that part, except
// under CI=true.
func TestSystemdUnits(t *testing.T) {
	files, _ := filepath.Glob("systemd/*.service")
	if len(files) != 2 {
		t.Fatalf("units %v, want the agent's and the cloud's", files)
	}
	for _, f := range files {
		u := parseUnit(t, f)
		for _, s := range []string{"Unit", "Service", "Install"} {
			if u[s] == nil {
				t.Errorf("%s: no [%s]", f, s)
			}
		}
		svc := u["Service"]
		if len(svc["ExecStart"]) != 1 || svc["Restart"] == nil || svc["StateDirectory"] == nil || len(u["Install"]["WantedBy"]) == 0 {
			t.Errorf("%s: needs one ExecStart, Restart, StateDirectory and WantedBy: %v", f, u)
		}
		for _, cmd := range append(svc["ExecStartPre"], svc["ExecStart"]...) {
			parseDaemonArgs(t, f, strings.Fields(cmd))
		}
		dataDir := "/var/lib/" + svc["StateDirectory"][0]
		if strings.Count(svc["ExecStart"][0], "--data-dir "+dataDir) != strings.Count(svc["ExecStart"][0], "--data-dir") {
			t.Errorf("%s: --data-dir is not the StateDirectory %s", f, dataDir)
		}
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("systemd-analyze is not installed (apt-get install systemd)")
		}
		t.Skip("systemd-analyze is not installed")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	os.Mkdir(bin, 0o755)
	self, _ := os.Executable()
	for _, name := range []string{"phaseless-cloud", "phaseless-agent"} {
		if err := os.Symlink(self, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	var paths []string
	for _, f := range files {
		b, _ := os.ReadFile(f)
		p := filepath.Join(dir, filepath.Base(f))
		os.WriteFile(p, []byte(strings.ReplaceAll(string(b), "/usr/local/bin/", bin+"/")), 0o644)
		paths = append(paths, p)
	}
	out, err := exec.Command(analyze, append([]string{"verify", "--man=no"}, paths...)...).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

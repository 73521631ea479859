package docscheck

import (
	"bytes"
	"context"
	"flag"
	"log/slog"
	"regexp"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/agent"
	"github.com/phaseless/phaseless/agent/ota"
	"github.com/phaseless/phaseless/cloud"
	"github.com/phaseless/phaseless/cloud/ctl"
	"github.com/phaseless/phaseless/internal/cli"
)

// The binaries' configuration, built as their main.go builds it: the
// component's flags and the common ones (--config, --log-level, …).

func agentFlags() (*flag.FlagSet, *agent.Config) {
	var cfg agent.Config
	fs := flag.NewFlagSet("phaseless-agent", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	new(cli.Common).Register(fs)
	return fs, &cfg
}

func cloudFlags() (*flag.FlagSet, *cloud.Config) {
	var cfg cloud.Config
	fs := flag.NewFlagSet("phaseless-cloud", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	new(cli.Common).Register(fs)
	return fs, &cfg
}

func noEnv(string) string { return "" }

// startCloud runs phaseless-cloud in process with args, as its main would,
// until the test ends.
func startCloud(t *testing.T, args ...string) *cloud.Cloud {
	t.Helper()
	fs, cfg := cloudFlags()
	if err := cli.Parse(fs, args, noEnv); err != nil {
		t.Fatalf("phaseless-cloud %s: %v", strings.Join(args, " "), err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("phaseless-cloud %s: %v", strings.Join(args, " "), err)
	}
	c, err := cloud.New(*cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("phaseless-cloud: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	wait, err := c.Serving(ctx)
	if err != nil {
		cancel()
		t.Fatalf("phaseless-cloud: %v", err)
	}
	t.Cleanup(func() { cancel(); wait() })
	return c
}

// startAgent runs phaseless-agent in process with args until the test ends.
func startAgent(t *testing.T, args ...string) *agent.Agent {
	t.Helper()
	fs, cfg := agentFlags()
	if err := cli.Parse(fs, args, noEnv); err != nil {
		t.Fatalf("phaseless-agent %s: %v", strings.Join(args, " "), err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("phaseless-agent %s: %v", strings.Join(args, " "), err)
	}
	a, err := agent.New(*cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("phaseless-agent: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("phaseless-agent: %v", err)
		}
	})
	return a
}

// runCtl runs one phaselessctl command line in process, stdin its input.
func runCtl(ctx context.Context, args []string, stdin string, getenv func(string) string) (string, error) {
	var out bytes.Buffer
	err := ctl.Root().Dispatch(ctx, cli.IO{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &out, Getenv: getenv}, args)
	return out.String(), err
}

var defaultsFlagRE = regexp.MustCompile(`(?m)^  -([a-z][a-z0-9-]*)`)

// helpFlags asks a command for --help and reads the flag names
// flag.PrintDefaults wrote.
func helpFlags(run func(context.Context, cli.IO, []string) error) map[string]bool {
	var out bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // --help must not start anything
	run(ctx, cli.IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out, Getenv: noEnv}, []string{"--help"})
	flags := map[string]bool{}
	for _, m := range defaultsFlagRE.FindAllStringSubmatch(out.String(), -1) {
		flags[m[1]] = true
	}
	return flags
}

// binaries gathers the three binaries' commands and flags from the code.
func binaries(t *testing.T) map[string]*Command {
	t.Helper()
	fsFlags := func(fs *flag.FlagSet) map[string]bool {
		m := map[string]bool{}
		fs.VisitAll(func(f *flag.Flag) { m[f.Name] = true })
		return m
	}
	af, _ := agentFlags()
	cf, _ := cloudFlags()
	agentCmd := &Command{Path: "phaseless-agent", Flags: fsFlags(af), Subs: map[string]*Command{
		"supervise": {Path: "phaseless-agent supervise", Flags: helpFlags(ota.Supervise)},
		"selfcheck": {Path: "phaseless-agent selfcheck", Flags: map[string]bool{}},
	}}
	cloudCmd := &Command{Path: "phaseless-cloud", Flags: fsFlags(cf)}
	var tree func(path string, c *cli.Command) *Command
	tree = func(path string, c *cli.Command) *Command {
		out := &Command{Path: path}
		if c.Run != nil {
			out.Flags = helpFlags(c.Run)
			if len(out.Flags) == 0 {
				t.Errorf("%s --help lists no flags", path)
			}
			return out
		}
		out.Subs = map[string]*Command{}
		for _, s := range c.Subcommands {
			out.Subs[s.Name] = tree(path+" "+s.Name, s)
		}
		return out
	}
	return map[string]*Command{
		"phaseless-agent": agentCmd, "phaseless-cloud": cloudCmd,
		"phaselessctl": tree("phaselessctl", ctl.Root()),
	}
}

package phaseless

import (
	"bytes"
	"strings"
	"testing"

	"github.com/phaseless/phaseless/agent"
	"github.com/phaseless/phaseless/cloud"
	"github.com/phaseless/phaseless/cloud/ctl"
	"github.com/phaseless/phaseless/internal/cli"
)

// helpNode is one command of a binary: the arguments that name it, and how
// to run the binary with more arguments.
type helpNode struct {
	path []string
	exec func(cli.IO, []string) int
}

// commandTree lists c and every command under it, as named from the binary.
func commandTree(c *cli.Command, path []string, exec func(cli.IO, []string) int) []helpNode {
	out := []helpNode{{path: path, exec: exec}}
	for _, s := range c.Subcommands {
		out = append(out, commandTree(s, append(append([]string(nil), path...), s.Name), exec)...)
	}
	return out
}

// TestHelpEveryCommand asks every command and subcommand of the three
// binaries for --help and -h, walking the command tables the binaries run:
// each prints its usage to stdout, nothing to stderr, and exits 0.
func TestHelpEveryCommand(t *testing.T) {
	var nodes []helpNode
	nodes = append(nodes, commandTree(ctl.Root(), []string{"phaselessctl"}, func(cio cli.IO, args []string) int {
		return cli.ToolExec(ctl.Root(), cio, args)
	})...)
	for _, d := range []func() *cli.Daemon{cloud.Daemon, agent.Daemon} {
		name := d().Name
		// A Daemon registers its common flags when it runs, so each run
		// gets a fresh one.
		run := func(cio cli.IO, args []string) int { return d().Exec(cio, args) }
		nodes = append(nodes, helpNode{path: []string{name}, exec: run})
		for _, c := range d().Commands {
			nodes = append(nodes, commandTree(c, []string{name, c.Name}, run)...)
		}
	}
	if len(nodes) < 50 {
		t.Fatalf("only %d commands found: the walk misses the tables", len(nodes))
	}
	for _, n := range nodes {
		for _, flag := range []string{"--help", "-h"} {
			name := strings.Join(n.path, " ") + " " + flag
			t.Run(name, func(t *testing.T) {
				var stdout, stderr bytes.Buffer
				cio := cli.IO{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}
				code := n.exec(cio, append(append([]string(nil), n.path[1:]...), flag))
				// Usage is the flags (cli.PrintUsage) or the verbs
				// (Command.PrintHelp), not the verb's own work.
				usage := strings.Contains(stdout.String(), "Flags (each also PHASELESS_") || strings.Contains(stdout.String(), "\nCommands:\n")
				if code != 0 || stderr.Len() > 0 || !usage {
					t.Errorf("%s: exit %d\nstdout:\n%s\nstderr:\n%s", name, code, stdout.String(), stderr.String())
				}
			})
		}
	}
}

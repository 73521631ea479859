package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Command is one verb of a binary, possibly with sub-verbs (`phaselessctl pki
// init`). A command either runs or dispatches, never both.
type Command struct {
	Name        string
	Summary     string
	Run         func(ctx context.Context, io IO, args []string) error
	Subcommands []*Command
}

// IO is what a command reads and writes; tests pass buffers.
type IO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
}

// ErrUsage marks an error caused by how the command was called; binaries exit 2.
var ErrUsage = errors.New("usage")

// Dispatch runs the command named by args[0] among c's subcommands,
// recursively. A verb that answered --help (printed its usage and returned
// flag.ErrHelp) succeeded: help is not a usage error.
func (c *Command) Dispatch(ctx context.Context, cio IO, args []string) error {
	if c.Run != nil {
		if err := c.Run(ctx, cio, args); !errors.Is(err, flag.ErrHelp) {
			return err
		}
		return nil
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		c.PrintHelp(cio.Stdout)
		if len(args) == 0 {
			return fmt.Errorf("%w: %s needs a subcommand", ErrUsage, c.Name)
		}
		return nil
	}
	for _, s := range c.Subcommands {
		if s.Name == args[0] {
			return s.Dispatch(ctx, cio, args[1:])
		}
	}
	return fmt.Errorf("%w: unknown command %q for %s (one of: %s)", ErrUsage, args[0], c.Name, strings.Join(c.names(), ", "))
}

func (c *Command) names() []string {
	out := make([]string, 0, len(c.Subcommands))
	for _, s := range c.Subcommands {
		out = append(out, s.Name)
	}
	sort.Strings(out)
	return out
}

// PrintHelp lists the subcommands with their summaries.
func (c *Command) PrintHelp(w io.Writer) {
	fmt.Fprintf(w, "%s — %s\n\nCommands:\n", c.Name, c.Summary)
	for _, s := range c.Subcommands {
		fmt.Fprintf(w, "  %-12s %s\n", s.Name, s.Summary)
	}
}

// ParseVerb parses a verb's flags, filled from PHASELESS_* like every
// binary's; the positional arguments stay in fs.Args(). On -h or --help it
// prints usage and the flags to stdout and returns flag.ErrHelp, which
// Dispatch turns into success.
func ParseVerb(fs *flag.FlagSet, cio IO, args []string, usage string) error {
	err := Parse(fs, args, cio.Getenv)
	switch {
	case errors.Is(err, flag.ErrHelp):
		PrintUsage(cio.Stdout, fs, usage)
		return err
	case err != nil:
		return fmt.Errorf("%w: %v (usage: %s)", ErrUsage, err, usage)
	}
	return nil
}

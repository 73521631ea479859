package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
)

// Daemon is the shape of a long-running binary's main: its flags, and what to
// run once they are parsed and validated.
type Daemon struct {
	Name    string
	Summary string
	Flags   *flag.FlagSet
	// Validate checks the parsed configuration and returns a *FieldError for
	// the first bad field.
	Validate func() error
	// Fields is the binary's configuration table; when set, a *FieldError
	// from Validate naming a Go field is reported under its flag's name.
	Fields Fields
	// Commands are optional verbs (`phaseless-agent selfcheck`) that run
	// instead of the daemon when named as the first argument.
	Commands []*Command
	// Exposure, when set, says what the validated configuration serves
	// without authentication ("" for nothing); it is the first log line, a
	// warning, before anything binds.
	Exposure func() string
	Run      func(ctx context.Context, log *slog.Logger) error
}

// Main runs d with the process arguments and returns the exit code: 0 on a
// clean shutdown, 1 on a runtime failure, 2 on a configuration error.
func (d *Daemon) Main(args []string) int {
	return d.Exec(IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}, args)
}

// Exec is Main with the process's standard streams and environment in cio
// (tests run a daemon's help and verbs in-process). It registers the common
// flags on d.Flags, so it runs once per Daemon.
func (d *Daemon) Exec(cio IO, args []string) int {
	var common Common
	common.Register(d.Flags)
	if len(args) > 0 {
		for _, c := range d.Commands {
			if c.Name == args[0] {
				ctx, stop := SignalContext(context.Background())
				defer stop()
				return exitCode(cio.Stderr, d.Name, c.Dispatch(ctx, cio, args[1:]))
			}
		}
	}
	if err := Parse(d.Flags, args, cio.Getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			PrintUsage(cio.Stdout, d.Flags, d.Summary)
			for _, c := range d.Commands {
				fmt.Fprintf(cio.Stdout, "\nSubcommand: %s %s — %s\n", d.Name, c.Name, c.Summary)
			}
			return 0
		}
		fmt.Fprintf(cio.Stderr, "%s: %v\n", d.Name, err)
		return 2
	}
	if common.ShowVersion {
		fmt.Fprintln(cio.Stdout, VersionLine(d.Name))
		return 0
	}
	log, err := common.Logger(cio.Stderr)
	if err == nil && d.Validate != nil {
		err = d.Fields.Rename(d.Validate())
	}
	if err != nil {
		fmt.Fprintf(cio.Stderr, "%s: %v\n", d.Name, err)
		return 2
	}
	if d.Exposure != nil {
		if s := d.Exposure(); s != "" {
			log.Warn(s)
		}
	}
	ctx, stop := SignalContext(context.Background())
	defer stop()
	log.Info("starting", "binary", d.Name, "version", Version, "commit", Commit)
	if err := d.Fields.Rename(d.Run(ctx, log)); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("stopped", "err", err)
		return 1
	}
	log.Info("stopped cleanly")
	return 0
}

func exitCode(stderr io.Writer, name string, err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrUsage):
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	default:
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
}

// Tool runs a command tree (phaselessctl) with the process arguments and
// returns the exit code.
func Tool(root *Command, args []string) int {
	return ToolExec(root, IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}, args)
}

// ToolExec is Tool with the streams and environment in cio.
func ToolExec(root *Command, cio IO, args []string) int {
	if len(args) == 1 && (args[0] == "--version" || args[0] == "version") {
		fmt.Fprintln(cio.Stdout, VersionLine(root.Name))
		return 0
	}
	ctx, stop := SignalContext(context.Background())
	defer stop()
	return exitCode(cio.Stderr, root.Name, root.Dispatch(ctx, cio, args))
}

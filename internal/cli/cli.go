// Package cli is the command-line contract the three binaries share: flags,
// PHASELESS_* environment variables, an optional YAML file, the version stamp,
// logging and signal handling.
//
// One flag name is the whole contract for a setting: `--mqtt-url` on the command
// line, `PHASELESS_MQTT_URL` in the environment and `mqtt-url:` in the YAML file
// all set the same thing. Precedence is flag > environment > file > default, so an
// operator can override one field of a shipped file without editing it.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"gopkg.in/yaml.v3"
)

// Version and Commit are stamped at build time with
// -ldflags "-X github.com/phaseless/phaseless/internal/cli.Version=...".
var (
	Version = "dev"
	Commit  = "unknown"
)

// EnvPrefix is the prefix of every environment variable a binary reads.
const EnvPrefix = "PHASELESS_"

// VersionLine is what every binary prints for --version.
func VersionLine(binary string) string {
	return fmt.Sprintf("%s %s (commit %s)", binary, Version, Commit)
}

// Common holds the flags every binary has.
type Common struct {
	ConfigFile  string
	LogLevel    string
	LogFormat   string
	ShowVersion bool
}

// Register adds the common flags to fs.
func (c *Common) Register(fs *flag.FlagSet) {
	fs.StringVar(&c.ConfigFile, "config", "", "optional YAML config file; keys are flag names")
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&c.LogFormat, "log-format", "text", "log format: text or json")
	fs.BoolVar(&c.ShowVersion, "version", false, "print the version and exit")
}

// LogLevel is the level of the logger Common.Logger builds; the agent
// changes it at run time when the fleet sets "log-level".
var LogLevel = new(slog.LevelVar)

// Logger builds the process logger writing to w, at LogLevel.
func (c *Common) Logger(w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return nil, &FieldError{Field: "log-level", Err: fmt.Errorf("%q is not one of debug, info, warn, error", c.LogLevel)}
	}
	LogLevel.Set(lvl)
	opts := &slog.HandlerOptions{Level: LogLevel}
	switch c.LogFormat {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, &FieldError{Field: "log-format", Err: fmt.Errorf("%q is not text or json", c.LogFormat)}
}

// FieldError names the configuration field that is wrong, so an operator knows
// what to fix without reading code.
type FieldError struct {
	Field  string
	Source string // "flag", "env PHASELESS_X", "file F"; empty when not known
	Err    error
}

func (e *FieldError) Error() string {
	if e.Source != "" {
		return fmt.Sprintf("config field %q (from %s): %v", e.Field, e.Source, e.Err)
	}
	return fmt.Sprintf("config field %q: %v", e.Field, e.Err)
}

func (e *FieldError) Unwrap() error { return e.Err }

// Parse parses args into fs, then fills every flag not given on the command
// line from the environment and then from the YAML file named by --config.
// It returns flag.ErrHelp when help was asked for.
func Parse(fs *flag.FlagSet, args []string, getenv func(string) string) error {
	fs.SetOutput(io.Discard) // errors are returned, not printed twice
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w (see --help)", err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if envErr != nil || set[f.Name] || f.Name == "config" {
			return
		}
		name := EnvName(f.Name)
		v := getenv(name)
		if v == "" {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			envErr = &FieldError{Field: f.Name, Source: "env " + name, Err: err}
			return
		}
		set[f.Name] = true
	})
	if envErr != nil {
		return envErr
	}

	file := ""
	if f := fs.Lookup("config"); f != nil {
		file = f.Value.String()
		if file == "" {
			file = getenv(EnvName("config"))
		}
	}
	if file == "" {
		return nil
	}
	return applyFile(fs, file, set)
}

// EnvName is the environment variable that sets flag name.
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func applyFile(fs *flag.FlagSet, path string, set map[string]bool) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return &FieldError{Field: "config", Err: err}
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return &FieldError{Field: "config", Source: "file " + path, Err: err}
	}
	keys := make([]string, 0, len(doc))
	for k := range doc {
		keys = append(keys, k)
	}
	sort.Strings(keys) // report the first bad field deterministically
	for _, k := range keys {
		name := strings.ReplaceAll(k, "_", "-")
		src := "file " + path
		if k == "" {
			// A key that decodes to nothing ("? !tag", "'': 1") names no field.
			return &FieldError{Field: "config", Source: src, Err: errors.New("a key is empty: every key must name a flag")}
		}
		f := fs.Lookup(name)
		if f == nil || name == "config" {
			return &FieldError{Field: k, Source: src, Err: errors.New("unknown field")}
		}
		if set[name] {
			continue
		}
		values, err := yamlValues(doc[k])
		if err != nil {
			return &FieldError{Field: k, Source: src, Err: err}
		}
		for _, v := range values {
			if err := fs.Set(name, v); err != nil {
				return &FieldError{Field: k, Source: src, Err: err}
			}
		}
	}
	return nil
}

// yamlValues turns a scalar into one flag value and a list into one value per
// element, which is how repeatable flags (--worker URL ...) read from a file.
func yamlValues(v any) ([]string, error) {
	switch t := v.(type) {
	case nil:
		return nil, nil
	case []any:
		out := make([]string, 0, len(t))
		for _, e := range t {
			s, err := yamlScalar(e)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
		return out, nil
	default:
		s, err := yamlScalar(t)
		if err != nil {
			return nil, err
		}
		return []string{s}, nil
	}
}

func yamlScalar(v any) (string, error) {
	switch v.(type) {
	case map[string]any, []any:
		return "", errors.New("expected a scalar value")
	}
	return fmt.Sprint(v), nil
}

// StringList is a repeatable flag; a comma-separated value (as the environment
// gives it) adds several entries.
type StringList []string

func (l *StringList) String() string { return strings.Join(*l, ",") }

// Set adds one or more comma-separated values.
func (l *StringList) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// SignalContext is cancelled on SIGINT or SIGTERM, so every binary shuts down
// gracefully the same way.
func SignalContext(parent context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
}

// PrintUsage writes a help text: the summary line, then every flag.
func PrintUsage(w io.Writer, fs *flag.FlagSet, summary string) {
	fmt.Fprintf(w, "%s\n\nFlags (each also PHASELESS_<NAME> or a key in --config FILE):\n", summary)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

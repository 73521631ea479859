package cli

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"time"
)

// Field is one row of a binary's configuration table: a Go field of its
// Config and the flag that sets it. The flag name is the whole contract for
// the setting: it is also the PHASELESS_* variable (EnvName) and the YAML key
// (with "-" or "_"). A Config's Validate names the Go field; the table turns
// that into the flag an operator types.
type Field struct {
	Flag  string // flag name, e.g. "data-dir"
	Go    string // Go field name, as Validate's *FieldError names it, e.g. "DataDir"
	Usage string
	// Value points at the field: *string, *int, *int64, *float64, *bool,
	// *time.Duration, or any flag.Value (StringList for repeatable flags).
	// Its current value is the flag's default, so a binary fills its
	// Config's defaults before registering.
	Value any
}

// Fields is one binary's table.
type Fields []Field

// Register adds every row's flag to fs, with the field's current value as
// its default. A Value of an unsupported type is a programming error.
func (t Fields) Register(fs *flag.FlagSet) {
	for _, f := range t {
		switch v := f.Value.(type) {
		case *string:
			fs.StringVar(v, f.Flag, *v, f.Usage)
		case *int:
			fs.IntVar(v, f.Flag, *v, f.Usage)
		case *int64:
			fs.Int64Var(v, f.Flag, *v, f.Usage)
		case *float64:
			fs.Float64Var(v, f.Flag, *v, f.Usage)
		case *bool:
			fs.BoolVar(v, f.Flag, *v, f.Usage)
		case *time.Duration:
			fs.DurationVar(v, f.Flag, *v, f.Usage)
		case flag.Value:
			fs.Var(v, f.Flag, f.Usage)
		default:
			panic(fmt.Sprintf("cli: field %s (--%s) has unsupported type %T", f.Go, f.Flag, f.Value))
		}
	}
}

// Flag returns the flag that sets the Go field, or "" when none does.
func (t Fields) Flag(goField string) string {
	for _, f := range t {
		if f.Go == goField {
			return f.Flag
		}
	}
	return ""
}

// Rename returns err with a *FieldError that names a Go field of the table
// renamed to the field's flag, so the operator reads the name they can set.
// Other errors, and fields no flag sets, come back unchanged.
func (t Fields) Rename(err error) error {
	var fe *FieldError
	if !errors.As(err, &fe) {
		return err
	}
	if name := t.Flag(fe.Field); name != "" {
		renamed := *fe
		renamed.Field = name
		return &renamed
	}
	return err
}

// URL is a flag value holding a parsed URL with a host, so a binary parses
// it once, when it is set, and its Config carries the parsed form. The zero
// URL (or an empty value) means unset.
type URL struct{ *url.URL }

// Set parses s; an empty s unsets the URL.
func (u *URL) Set(s string) error {
	if s == "" {
		u.URL = nil
		return nil
	}
	p, err := url.Parse(s)
	if err != nil || p.Host == "" {
		return fmt.Errorf("%q is not a URL with a host, like scheme://host:port", s)
	}
	u.URL = p
	return nil
}

// String is the URL as given; "" when unset.
func (u *URL) String() string {
	if u == nil || u.URL == nil {
		return ""
	}
	return u.URL.String()
}

// IsSet reports whether a URL was given.
func (u *URL) IsSet() bool { return u != nil && u.URL != nil }

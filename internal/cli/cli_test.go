package cli

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func newFS() (*flag.FlagSet, *Common, *string, *time.Duration, *StringList) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	var c Common
	c.Register(fs)
	listen := fs.String("listen", "127.0.0.1:7070", "")
	timeout := fs.Duration("idle-timeout", time.Second, "")
	var workers StringList
	fs.Var(&workers, "worker", "")
	return fs, &c, listen, timeout, &workers
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPrecedenceFlagEnvFile(t *testing.T) {
	file := writeFile(t, "listen: 1.1.1.1:1\nidle_timeout: 5s\nworker: [http://a, http://b]\nlog-level: debug\n")
	env := map[string]string{"PHASELESS_IDLE_TIMEOUT": "7s"}
	fs, c, listen, timeout, workers := newFS()
	err := Parse(fs, []string{"--config", file, "--listen", "2.2.2.2:2"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if *listen != "2.2.2.2:2" {
		t.Errorf("flag must win over file: listen = %s", *listen)
	}
	if *timeout != 7*time.Second {
		t.Errorf("env must win over file: idle-timeout = %s", *timeout)
	}
	if got := workers.String(); got != "http://a,http://b" {
		t.Errorf("list from file: worker = %s", got)
	}
	if c.LogLevel != "debug" {
		t.Errorf("log-level from file = %s", c.LogLevel)
	}
}

func TestConfigFileFromEnv(t *testing.T) {
	file := writeFile(t, "listen: 3.3.3.3:3\n")
	fs, _, listen, _, _ := newFS()
	if err := Parse(fs, nil, func(k string) string {
		if k == "PHASELESS_CONFIG" {
			return file
		}
		return ""
	}); err != nil {
		t.Fatal(err)
	}
	if *listen != "3.3.3.3:3" {
		t.Errorf("listen = %s", *listen)
	}
}

func TestErrorsNameTheField(t *testing.T) {
	tests := []struct {
		name  string
		file  string
		env   map[string]string
		field string
	}{
		{"unknown file key", "listn: x\n", nil, "listn"},
		{"bad duration in file", "idle-timeout: soon\n", nil, "idle-timeout"},
		{"bad duration in env", "", map[string]string{"PHASELESS_IDLE_TIMEOUT": "soon"}, "idle-timeout"},
		{"map where scalar expected", "listen: {a: b}\n", nil, "listen"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs, _, _, _, _ := newFS()
			args := []string{}
			if tt.file != "" {
				args = append(args, "--config", writeFile(t, tt.file))
			}
			err := Parse(fs, args, func(k string) string { return tt.env[k] })
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field {
				t.Fatalf("err = %v, want a FieldError for %q", err, tt.field)
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Errorf("message %q does not name %q", err, tt.field)
			}
		})
	}
}

func TestLoggerRejectsBadLevel(t *testing.T) {
	c := Common{LogLevel: "loud", LogFormat: "text"}
	var fe *FieldError
	if _, err := c.Logger(os.Stderr); !errors.As(err, &fe) || fe.Field != "log-level" {
		t.Fatalf("err = %v", err)
	}
}

func TestHelpIsNotAnError(t *testing.T) {
	fs, _, _, _, _ := newFS()
	if err := Parse(fs, []string{"--help"}, func(string) string { return "" }); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err = %v", err)
	}
}

func TestFieldsTable(t *testing.T) {
	var cfg struct {
		DataDir string
		Workers StringList
		N       int
		Wait    time.Duration
	}
	cfg.DataDir, cfg.N = "d", 3 // filled defaults become the flags' defaults
	table := Fields{
		{Flag: "data-dir", Go: "DataDir", Value: &cfg.DataDir, Usage: "dir"},
		{Flag: "worker", Go: "Workers", Value: &cfg.Workers, Usage: "repeatable"},
		{Flag: "n", Go: "N", Value: &cfg.N, Usage: "count"},
		{Flag: "wait", Go: "Wait", Value: &cfg.Wait, Usage: "wait"},
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	table.Register(fs)
	if fs.Lookup("n").DefValue != "3" || fs.Lookup("data-dir").DefValue != "d" {
		t.Fatalf("defaults %q %q", fs.Lookup("n").DefValue, fs.Lookup("data-dir").DefValue)
	}
	env := map[string]string{"PHASELESS_WAIT": "2s"}
	if err := Parse(fs, []string{"--worker", "a", "--worker", "b"}, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if cfg.Wait != 2*time.Second || len(cfg.Workers) != 2 || cfg.N != 3 {
		t.Fatalf("parsed %+v", cfg)
	}
	err := table.Rename(&FieldError{Field: "DataDir", Err: errors.New("must not be empty")})
	if err.Error() != `config field "data-dir": must not be empty` {
		t.Fatalf("renamed: %v", err)
	}
	if err := table.Rename(&FieldError{Field: "Other", Err: errors.New("x")}); err.Error() != `config field "Other": x` {
		t.Fatalf("unknown field renamed: %v", err)
	}
}

func TestURLValue(t *testing.T) {
	var u URL
	if u.IsSet() || u.String() != "" {
		t.Fatal("zero URL is set")
	}
	if err := u.Set("mqtt://user:pw@broker:1883"); err != nil || u.Host != "broker:1883" || u.User.Username() != "user" {
		t.Fatalf("set: %v %+v", err, u.URL)
	}
	for _, bad := range []string{"broker:1883", "://x", "/just/a/path"} {
		var v URL
		if err := v.Set(bad); err == nil {
			t.Errorf("%q accepted as %v", bad, v.URL)
		}
	}
	if err := u.Set(""); err != nil || u.IsSet() {
		t.Fatalf("empty value did not unset: %v", err)
	}
}

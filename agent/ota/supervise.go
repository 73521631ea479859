package ota

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/internal/cli"
)

// Supervise is `phaseless-agent supervise [flags] [-- agent flags]`: the
// board's boot supervisor. It starts the agent binary of the slot the A/B
// state names (the factory install, i.e. this executable, until an update
// lands), commits a trial slot once its agent answers /readyz, and rolls a
// trial back when it does not start, exits or stays unready. The systemd unit
// runs this, not the agent directly.
func Supervise(ctx context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("phaseless-agent supervise", flag.ContinueOnError)
	dataDir := fs.String("data-dir", "phaseless-agent-data", "the agent's data directory (the A/B slots live in DATA_DIR/ota)")
	health := fs.String("health", "http://127.0.0.1:7070/readyz", "URL that answers 200 when the started agent is ready")
	trialTimeout := fs.Duration("trial-timeout", 2*time.Minute, "how long an updated slot has to become ready before it is rolled back")
	logLevel := fs.String("log-level", "info", "debug|info|warn|error")
	if err := cli.Parse(fs, args, cio.Getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			cli.PrintUsage(cio.Stdout, fs, "phaseless-agent supervise [flags] [-- agent flags] — the boot supervisor")
			return nil
		}
		return fmt.Errorf("%w: %v", cli.ErrUsage, err)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return &cli.FieldError{Field: "log-level", Err: err}
	}
	if *trialTimeout <= 0 {
		return &cli.FieldError{Field: "trial-timeout", Err: errors.New("must be positive")}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	slots, err := firmware.OpenSlots(filepath.Join(*dataDir, "ota"), cli.Version)
	if err != nil {
		return err
	}
	client := &http.Client{}
	s := &firmware.Supervisor{
		Slots:   slots,
		Factory: self,
		Args:    fs.Args(),
		// The agent finds the same slots: its --data-dir, unless the
		// arguments after "--" name another (flags beat the environment).
		Env:          []string{"PHASELESS_DATA_DIR=" + *dataDir},
		TrialTimeout: *trialTimeout,
		Healthy:      func(ctx context.Context) error { return probe(ctx, client, *health) },
		Log:          slog.New(slog.NewTextHandler(cio.Stderr, &slog.HandlerOptions{Level: level})).With("component", "supervisor"),
	}
	return s.Run(ctx)
}

// probe is one GET of a readiness URL; only 200 counts.
func probe(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

package cloud

import (
	"context"
	"flag"
	"log/slog"

	"github.com/phaseless/phaseless/internal/cli"
)

// Daemon is the phaseless-cloud binary: its flags, and a coordinator built
// from them. A function here, not in main, so the test of every binary's
// help (help_test.go at the module root) walks the same tree the binary runs.
func Daemon() *cli.Daemon {
	var cfg Config
	fs := flag.NewFlagSet("phaseless-cloud", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	return &cli.Daemon{
		Name:     "phaseless-cloud",
		Summary:  "phaseless-cloud — coordinator: QUIC/HTTP ingress, admission, phase-less scheduling, worker pools, fleet",
		Flags:    fs,
		Validate: cfg.Validate,
		Exposure: cfg.Exposure,
		Fields:   cfg.Fields(),
		Run: func(ctx context.Context, log *slog.Logger) error {
			c, err := New(cfg, log)
			if err != nil {
				return err
			}
			return c.Run(ctx)
		},
	}
}

// Command phaseless-cloud is the coordinator: it takes work from agents over
// QUIC and from any client over HTTP, schedules it onto worker pools and
// manages the fleet over MQTT.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"

	"github.com/phaseless/phaseless/cloud"
	"github.com/phaseless/phaseless/internal/cli"
)

func main() {
	var cfg cloud.Config
	fs := flag.NewFlagSet("phaseless-cloud", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	d := &cli.Daemon{
		Name:     "phaseless-cloud",
		Summary:  "phaseless-cloud — coordinator: QUIC/HTTP ingress, admission, phase-less scheduling, worker pools, fleet",
		Flags:    fs,
		Validate: cfg.Validate,
		Fields:   cfg.Fields(),
		Run: func(ctx context.Context, log *slog.Logger) error {
			c, err := cloud.New(cfg, log)
			if err != nil {
				return err
			}
			return c.Run(ctx)
		},
	}
	os.Exit(d.Main(os.Args[1:]))
}

// Command phaseless-agent is the device agent: apps on the device call its
// OpenAI- and Anthropic-compatible API; it answers locally or offloads to the
// cloud over QUIC.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"

	"github.com/phaseless/phaseless/agent"
	"github.com/phaseless/phaseless/agent/ota"
	"github.com/phaseless/phaseless/internal/cli"
)

func main() {
	var cfg agent.Config
	fs := flag.NewFlagSet("phaseless-agent", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	d := &cli.Daemon{
		Name:     "phaseless-agent",
		Summary:  "phaseless-agent — on-device LLM gateway: local engine or cloud offload, decided per request",
		Flags:    fs,
		Validate: cfg.Validate,
		Fields:   cfg.Fields(),
		Commands: []*cli.Command{{
			Name:    "supervise",
			Summary: "boot supervisor: run the agent of the A/B slot the OTA state names, commit a healthy update, roll back a failing one",
			Run:     ota.Supervise,
		}, {
			Name:    "selfcheck",
			Summary: "check storage, crypto and the engine on this board, then exit",
			Run: func(ctx context.Context, cio cli.IO, _ []string) error {
				return agent.SelfCheck(ctx, cio.Stdout)
			},
		}},
		Run: func(ctx context.Context, log *slog.Logger) error {
			a, err := agent.New(cfg, log)
			if err != nil {
				return err
			}
			return a.Run(ctx)
		},
	}
	os.Exit(d.Main(os.Args[1:]))
}

// Package ctl is the command tree of phaselessctl, the operator's tool. Each
// area registers its verbs here (pki, lm, model, fleet, replay); the verbs
// themselves call into the packages that own the work, so this package stays
// a thin layer of argument parsing.
package ctl

import "github.com/phaseless/phaseless/transport/cli"

// Root returns the whole phaselessctl command tree.
func Root() *cli.Command {
	return &cli.Command{
		Name:        "phaselessctl",
		Summary:     "operate a Phaseless fleet: PKI, models, fleet, replay and benchmarks",
		Subcommands: []*cli.Command{},
	}
}

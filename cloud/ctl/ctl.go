// Package ctl is the command tree of phaselessctl, the operator's tool. Each
// area adds its verbs (pki, lm, model, fleet, replay) from its own file with
// register; the verbs call into the packages that own the work, so this
// package stays a thin layer of argument parsing.
package ctl

import (
	"sort"

	"github.com/phaseless/phaseless/internal/cli"
)

// commands is filled by each file's init; Root sorts it.
var commands []*cli.Command

func register(c *cli.Command) { commands = append(commands, c) }

// Root returns the whole phaselessctl command tree.
func Root() *cli.Command {
	sub := append([]*cli.Command(nil), commands...)
	sort.Slice(sub, func(i, j int) bool { return sub[i].Name < sub[j].Name })
	return &cli.Command{
		Name:        "phaselessctl",
		Summary:     "operate a Phaseless fleet: PKI, models, fleet, replay and benchmarks",
		Subcommands: sub,
	}
}

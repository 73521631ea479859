// Command phaselessctl is the operator's tool: PKI, fleet operations, model
// training and evaluation, trace replay and benchmarks.
package main

import (
	"os"

	"github.com/phaseless/phaseless/cloud/ctl"
	"github.com/phaseless/phaseless/internal/cli"
)

func main() { os.Exit(cli.Tool(ctl.Root(), os.Args[1:])) }

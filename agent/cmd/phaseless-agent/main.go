// Command phaseless-agent is the device agent: apps on the device call its
// OpenAI- and Anthropic-compatible API; it answers locally or offloads to the
// cloud over QUIC.
package main

import (
	"os"

	"github.com/phaseless/phaseless/agent"
)

func main() { os.Exit(agent.Daemon().Main(os.Args[1:])) }

// Command phaseless-cloud is the coordinator: it takes work from agents over
// QUIC and from any client over HTTP, schedules it onto worker pools and
// manages the fleet over MQTT.
package main

import (
	"os"

	"github.com/phaseless/phaseless/cloud"
)

func main() { os.Exit(cloud.Daemon().Main(os.Args[1:])) }

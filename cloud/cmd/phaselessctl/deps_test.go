package main

import (
	"os/exec"
	"strings"
	"testing"
)

// phaselessctl is an operator tool: it talks to the fleet over the cloud's
// admin API (cloud/fleetapi) and must not link the MQTT broker, the fleet
// manager or its bbolt store to do so.
func TestCtlDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	forbidden := []string{
		"github.com/mochi-mqtt/server",
		"go.etcd.io/bbolt",
		"github.com/phaseless/phaseless/cloud/fleet/", // the broker and its internals
		"github.com/phaseless/phaseless/agent",
	}
	linksAPI := false
	for _, dep := range deps {
		if dep == "github.com/phaseless/phaseless/cloud/fleet" {
			t.Errorf("phaselessctl links the fleet manager (cloud/fleet); use cloud/fleetapi")
		}
		linksAPI = linksAPI || dep == "github.com/phaseless/phaseless/cloud/fleetapi"
		for _, f := range forbidden {
			if strings.HasPrefix(dep, f) {
				t.Errorf("phaselessctl links %s (forbidden prefix %s)", dep, f)
			}
		}
	}
	if !linksAPI {
		t.Error("phaselessctl does not link cloud/fleetapi: the fleet verbs lost their client")
	}
}

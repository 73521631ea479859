package route

import (
	"strings"
	"testing"

	"github.com/phaseless/phaseless/llm"
)

// TestToolRequestsRoute: a request that offers tools goes where they are
// served, whatever its score (0.9 prefers the cloud here): on the device
// when its model serves them or the cloud calls none, to the cloud when
// only the cloud does; a pin, the operator's route mode and a request
// without tools are decided as before.
func TestToolRequestsRoute(t *testing.T) {
	car := []llm.Tool{{Name: "set_fan_speed"}}
	home := []llm.Tool{{Name: "dim_lights"}}
	knows := func(tools []llm.Tool) bool { return tools[0].Name == "set_fan_speed" }
	tests := []struct {
		name       string
		tools      []llm.Tool
		cloudTools bool
		link       Link
		pin, mode  string
		want       string
		reason     string
	}{
		{"the local model serves them", car, true, up, "", "", PathLocal, "tools: the local model serves them"},
		{"the cloud calls no tools", home, false, up, "", "", PathLocal, "the cloud calls no tools"},
		{"only the cloud serves them", home, true, up, "", "", PathCloud, "only the cloud serves them"},
		{"only the cloud serves them, unreachable", home, true, Link{Configured: true}, "", "", PathLocal, "cloud unreachable"},
		{"offline", car, false, Link{}, "", "", PathLocal, "offline-only"},
		{"pinned to the cloud", car, false, up, "cloud", "", PathCloud, "x-phaseless-route: cloud"},
		{"route mode cloud", car, false, up, "", "cloud", PathCloud, "route-mode: cloud"},
		{"no tools: the score", nil, false, up, "", "", PathCloud, "p=0.90"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewRouter(Config{CloudTools: tt.cloudTools, LocalTools: knows, Mode: tt.mode}, &fixedPredictor{p: 0.9})
			if err != nil {
				t.Fatal(err)
			}
			req := userReq("hey car")
			req.Tools, req.Hints.Route = tt.tools, tt.pin
			d := r.Decide(req, tt.link, Load{})
			if d.Path != tt.want || !strings.Contains(d.Reason, tt.reason) {
				t.Errorf("got %s (%s), want %s (%s)", d.Path, d.Reason, tt.want, tt.reason)
			}
			if tt.pin == "" && tt.mode == "" && d.Override != "" {
				t.Errorf("a tool route is recorded as an override (%q): a refused local request could not offload", d.Override)
			}
		})
	}
}

package cartools

import (
	"strings"
	"testing"

	"github.com/phaseless/phaseless/models/lm/grammar"
)

// TestSchemasCompile: every tool's schema compiles to a grammar, so the
// engine can constrain calls to it.
func TestSchemasCompile(t *testing.T) {
	var tools []grammar.Tool
	for _, tl := range Tools() {
		if _, err := grammar.Schema(tl.Parameters); err != nil {
			t.Errorf("%s: %v", tl.Name, err)
		}
		tools = append(tools, grammar.Tool{Name: tl.Name, Schema: tl.Parameters})
	}
	g, err := grammar.ToolCalls(grammar.CallFormat{Open: "<tool_call>", Close: "</tool_call>", Sep: "\n"}, tools, grammar.ToolCallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !g.Match([]byte(`<tool_call>{"name":"set_window","arguments":{"window":"rear left","action":"open"}}</tool_call>`)) {
		t.Error("a valid call does not match")
	}
	if len(Names()) != len(Tools()) {
		t.Error("names and tools differ")
	}
}

func TestCarExecutesCalls(t *testing.T) {
	c := NewCar()
	for _, tc := range []struct{ name, args, result string }{
		{"set_temperature", `{"temperature":23}`, "cabin set to 23 degrees"},
		{"set_fan_speed", `{"level":0}`, "fan at level 0"},
		{"set_window", `{"window":"all","action":"open"}`, "all window open"},
		{"set_window", `{"window":"driver","action":"close"}`, "driver window closed"},
		{"set_seat_heater", `{"seat":"rear","on":true}`, "rear seat heater on"},
		{"navigate_to", `{"destination":"Denver"}`, "route to Denver started"},
		{"play_media", `{"query":"jazz"}`, "playing jazz"},
		{"media_control", `{"action":"pause"}`, "media pause"},
		{"set_volume", `{"level":12}`, "volume 12"},
		{"set_timer", `{"minutes":10}`, "timer set for 10 minutes"},
		{"call_contact", `{"name":"Alice"}`, "calling Alice"},
		{"get_vehicle_status", `{"item":"fuel"}`, "fuel at 64 percent"},
		{"lock_doors", `{"locked":false}`, "doors unlocked"},
		{"set_defrost", `{"on":true}`, "defrost on"},
	} {
		got, err := c.Call(tc.name, tc.args)
		if err != nil || got != tc.result {
			t.Errorf("%s %s = %q, %v; want %q", tc.name, tc.args, got, err, tc.result)
		}
	}
	want := "23°C fan 0 defrost on | windows open: passenger, rear left, rear right | seat heat: rear | nav: Denver | media: jazz (paused) vol 12 | timers [10] | call: Alice | unlocked"
	if c.String() != want {
		t.Errorf("state\n%s\nwant\n%s", c, want)
	}
	for _, bad := range [][2]string{{"set_fan_speed", `{"level":9}`}, {"set_window", `{"window":"roof","action":"open"}`}, {"set_timer", `{"minutes":1.5}`}, {"nope", `{}`}, {"lock_doors", `locked`}} {
		if _, err := c.Call(bad[0], bad[1]); err == nil || !strings.Contains(err.Error(), bad[0]) && bad[0] != "nope" {
			t.Errorf("%s %s: err %v", bad[0], bad[1], err)
		}
	}
}

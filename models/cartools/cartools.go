// Package cartools is the in-car tool set the edge model is trained to call:
// climate, fan, windows, seats, navigation, media, timers, phone and vehicle
// status, each described by a JSON schema, and a simulated Car that executes
// the calls so a demo (and the tests) can show its state changing.
package cartools

import (
	"encoding/json"

	"github.com/phaseless/phaseless/llm"
)

// def is one tool: name, description and the arguments' JSON schema. The
// order of properties in each schema is the order the model writes them;
// free-form values and enums carry grammar.CopyKeyword, so the engine's
// grammar keeps them to what the request says (a span of its words, a
// number it writes, the enum value it names).
type def struct{ name, desc, schema string }

var defs = []def{
	{"set_temperature", "Set the cabin temperature in degrees Celsius.",
		`{"type":"object","properties":{"temperature":{"type":"integer","minimum":16,"maximum":30,"x-phaseless-copy":true}},"required":["temperature"],"additionalProperties":false}`},
	{"set_fan_speed", "Set the climate fan speed (0 is off).",
		`{"type":"object","properties":{"level":{"type":"integer","minimum":0,"maximum":5,"x-phaseless-copy":true}},"required":["level"],"additionalProperties":false}`},
	{"set_defrost", "Turn the windshield defroster on or off.",
		`{"type":"object","properties":{"on":{"type":"boolean"}},"required":["on"],"additionalProperties":false}`},
	{"set_window", "Open or close a window.",
		`{"type":"object","properties":{"window":{"type":"string","enum":["driver","passenger","rear left","rear right","all"],"x-phaseless-copy":true},"action":{"type":"string","enum":["open","close"],"x-phaseless-copy":true}},"required":["window","action"],"additionalProperties":false}`},
	{"set_seat_heater", "Turn a seat heater on or off.",
		`{"type":"object","properties":{"seat":{"type":"string","enum":["driver","passenger","rear"],"x-phaseless-copy":true},"on":{"type":"boolean"}},"required":["seat","on"],"additionalProperties":false}`},
	{"navigate_to", "Start route guidance to a destination: a city, street or place.",
		`{"type":"object","properties":{"destination":{"type":"string","minLength":1,"maxLength":60,"x-phaseless-copy":true}},"required":["destination"],"additionalProperties":false}`},
	{"play_media", "Play music: a genre, artist or station.",
		`{"type":"object","properties":{"query":{"type":"string","minLength":1,"maxLength":60,"x-phaseless-copy":true}},"required":["query"],"additionalProperties":false}`},
	{"media_control", "Pause, resume or skip the current media.",
		`{"type":"object","properties":{"action":{"type":"string","enum":["pause","resume","next","previous"],"x-phaseless-copy":true}},"required":["action"],"additionalProperties":false}`},
	{"set_volume", "Set the audio volume.",
		`{"type":"object","properties":{"level":{"type":"integer","minimum":0,"maximum":30,"x-phaseless-copy":true}},"required":["level"],"additionalProperties":false}`},
	{"set_timer", "Start a countdown timer.",
		`{"type":"object","properties":{"minutes":{"type":"integer","minimum":1,"maximum":180,"x-phaseless-copy":true}},"required":["minutes"],"additionalProperties":false}`},
	{"call_contact", "Phone a contact by name.",
		`{"type":"object","properties":{"name":{"type":"string","minLength":1,"maxLength":40,"x-phaseless-copy":true}},"required":["name"],"additionalProperties":false}`},
	{"get_vehicle_status", "Read a vehicle status item.",
		`{"type":"object","properties":{"item":{"type":"string","enum":["fuel","battery","range","tire_pressure","oil","doors"],"x-phaseless-copy":true}},"required":["item"],"additionalProperties":false}`},
	{"lock_doors", "Lock or unlock the doors.",
		`{"type":"object","properties":{"locked":{"type":"boolean"}},"required":["locked"],"additionalProperties":false}`},
}

// Tools returns the car tool set, in the form an API request carries.
func Tools() []llm.Tool {
	out := make([]llm.Tool, len(defs))
	for i, d := range defs {
		out[i] = llm.Tool{Name: d.name, Description: d.desc, Parameters: json.RawMessage(d.schema), Strict: true}
	}
	return out
}

// Names lists the tools' names in the order of Tools.
func Names() []string {
	out := make([]string, len(defs))
	for i, d := range defs {
		out[i] = d.name
	}
	return out
}

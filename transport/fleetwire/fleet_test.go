package fleetwire

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestTopicBuilders(t *testing.T) {
	var def Topics
	if got := def.Device("d1", SuffixTelemetry); got != "phaseless/dev/d1/telemetry" {
		t.Errorf("Device = %q", got)
	}
	if got := def.DeviceFilter(SuffixCmdResult); got != "phaseless/dev/+/cmd/result" {
		t.Errorf("DeviceFilter = %q", got)
	}
	acme := Topics{Prefix: "acme/"}
	if got := acme.Fleet("rollout"); got != "acme/fleet/rollout" {
		t.Errorf("Fleet = %q", got)
	}
}

func TestParseDevice(t *testing.T) {
	acme := Topics{Prefix: "acme/"}
	for _, tc := range []struct {
		t          Topics
		topic      string
		id, suffix string
		ok         bool
	}{
		{Topics{}, "phaseless/dev/d1/status", "d1", "status", true},
		{Topics{}, "phaseless/dev/d-1.x_y/cmd/result", "d-1.x_y", "cmd/result", true},
		{Topics{}, "phaseless/dev/d1/telemetry/ack", "d1", "telemetry/ack", true},
		{acme, "acme/dev/d1/config/desired", "d1", "config/desired", true},
		{acme, "phaseless/dev/d1/status", "", "", false}, // other prefix
		{Topics{}, "phaseless/dev/d1", "", "", false},    // no suffix
		{Topics{}, "phaseless/dev/d1/", "", "", false},   // empty suffix
		{Topics{}, "phaseless/dev//status", "", "", false},
		{Topics{}, "phaseless/dev/+/status", "", "", false}, // a filter is not a device
		{Topics{}, "phaseless/dev/#", "", "", false},
		{Topics{}, "phaseless/fleet/x", "", "", false},
		{Topics{}, "phaseless/dev/" + strings.Repeat("a", 65) + "/status", "", "", false},
	} {
		id, suffix, ok := tc.t.ParseDevice(tc.topic)
		if id != tc.id || suffix != tc.suffix || ok != tc.ok {
			t.Errorf("ParseDevice(%q) = %q, %q, %v; want %q, %q, %v", tc.topic, id, suffix, ok, tc.id, tc.suffix, tc.ok)
		}
	}
}

func TestDeviceMay(t *testing.T) {
	var tp Topics
	for _, tc := range []struct {
		id, topic string
		write     bool
		want      bool
	}{
		{"d1", "phaseless/dev/d1/status", true, true},
		{"d1", "phaseless/dev/d1/telemetry", true, true},
		{"d1", "phaseless/dev/d1/cmd", false, true},
		{"d1", "phaseless/dev/d1/#", false, true}, // wildcard subscribe inside its own subtree
		{"d1", "phaseless/dev/d1/+/result", false, true},
		{"d1", "phaseless/dev/d1/#", true, false}, // never publish to a filter
		{"d1", "phaseless/dev/d1/+", true, false},
		{"d1", "phaseless/dev/d2/status", true, false}, // another device
		{"d1", "phaseless/dev/d2/cmd", false, false},
		{"d1", "phaseless/dev/d10/status", true, false}, // prefix of another id
		{"d1", "phaseless/dev/+/status", false, false},
		{"d1", "phaseless/dev/#", false, false},
		{"d1", "phaseless/#", false, false},
		{"d1", "#", false, false},
		{"d1", "phaseless/fleet/announce", false, true}, // read fleet announcements
		{"d1", "phaseless/fleet/#", false, true},
		{"d1", "phaseless/fleet/announce", true, false}, // but not write them
		{"d1", "$share/g/phaseless/dev/d1/cmd", false, false},
		{"d1", "phaseless/dev/d1", true, false},
		{"", "phaseless/dev//status", true, false}, // invalid ids own nothing
		{"+", "phaseless/dev/+/status", true, false},
		{"#", "phaseless/dev/#/x", false, false},
	} {
		if got := tp.DeviceMay(tc.id, tc.topic, tc.write); got != tc.want {
			t.Errorf("DeviceMay(%q, %q, write=%v) = %v, want %v", tc.id, tc.topic, tc.write, got, tc.want)
		}
	}
	acme := Topics{Prefix: "acme/"}
	if acme.DeviceMay("d1", "phaseless/dev/d1/status", true) {
		t.Error("DeviceMay ignores the prefix")
	}
	if !acme.DeviceMay("d1", "acme/dev/d1/status", true) {
		t.Error("DeviceMay denies its own topic under a custom prefix")
	}
}

func TestValidateDeviceID(t *testing.T) {
	for _, ok := range []string{"d1", "A-b_c.9", strings.Repeat("x", 64)} {
		if err := ValidateDeviceID(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", strings.Repeat("x", 65), "a/b", "a+b", "a#", "ä", "a b", "a\x00"} {
		if ValidateDeviceID(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// The JSON field names are the wire contract between agent and cloud.
func TestPayloadWireNames(t *testing.T) {
	b, _ := json.Marshal(TelemetryBatch{DeviceID: "d", BatchID: "1-2", Records: []Record{{Seq: 1, Time: time.Unix(0, 0).UTC(), Kind: "request", Data: json.RawMessage(`{"a":1}`)}}, Dropped: 3})
	want := `{"device_id":"d","batch_id":"1-2","records":[{"seq":1,"time":"1970-01-01T00:00:00Z","kind":"request","data":{"a":1}}],"dropped":3}`
	if string(b) != want {
		t.Errorf("TelemetryBatch JSON\n got %s\nwant %s", b, want)
	}
	b, _ = json.Marshal(TelemetryAck{BatchID: "1-2", UpTo: 2})
	if string(b) != `{"batch_id":"1-2","up_to":2}` {
		t.Errorf("TelemetryAck JSON %s", b)
	}
}

// FuzzParseDevice: topic names come from the network. Whatever parses
// must rebuild to the same topic, and a device may always use it.
func FuzzParseDevice(f *testing.F) {
	f.Add("phaseless/dev/d1/status")
	f.Add("phaseless/dev/d1/cmd/result")
	f.Add("phaseless/dev//x")
	f.Add("phaseless/dev/+/#")
	f.Fuzz(func(t *testing.T, topic string) {
		var tp Topics
		id, suffix, ok := tp.ParseDevice(topic)
		if !ok {
			return
		}
		if ValidateDeviceID(id) != nil || suffix == "" {
			t.Fatalf("parsed invalid id %q or empty suffix from %q", id, topic)
		}
		if tp.Device(id, suffix) != topic {
			t.Fatalf("Device(%q, %q) != %q", id, suffix, topic)
		}
		if !strings.ContainsAny(suffix, "+#") && !tp.DeviceMay(id, topic, true) {
			t.Fatalf("device %q may not publish its own topic %q", id, topic)
		}
	})
}

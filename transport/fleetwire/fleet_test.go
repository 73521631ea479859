package fleetwire

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
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
		{"d1", "phaseless/dev/d1/config/reported", true, true},
		{"d1", "phaseless/dev/d1/cmd/result", true, true},
		{"d1", "phaseless/dev/d1/cmd", false, true},
		{"d1", "phaseless/dev/d1/cmd", true, false}, // cloud→device topics are the cloud's to write
		{"d1", "phaseless/dev/d1/config/desired", true, false},
		{"d1", "phaseless/dev/d1/telemetry/ack", true, false},
		{"d1", "phaseless/dev/d1/junk", true, false}, // no subtopic outside the protocol
		{"d1", "phaseless/dev/d1/status/x", true, false},
		{"d1", "phaseless/dev/d1/telemetry/", true, false},
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

// Only status and config/reported are retained by the protocol (DESIGN.md §4).
func TestDeviceWriteRules(t *testing.T) {
	var tp Topics
	for _, tc := range []struct {
		suffix string
		retain bool
	}{{SuffixStatus, true}, {SuffixConfigReported, true}, {SuffixTelemetry, false}, {SuffixCmdResult, false}} {
		w, ok := tp.DeviceWriteRule("d1", tp.Device("d1", tc.suffix))
		if !ok || w.Retain != tc.retain || w.MaxBytes <= 0 {
			t.Errorf("%s: rule %+v, %v; want retain=%v and a size limit", tc.suffix, w, ok, tc.retain)
		}
	}
}

func TestTruncateResult(t *testing.T) {
	for _, r := range []CommandResult{
		{ID: "c1", Output: strings.Repeat("x", 3*MaxCmdResultBytes)},
		{ID: "c1", Output: strings.Repeat("\x00", MaxCmdResultBytes)}, // six bytes each in JSON
		{ID: "c1", Output: strings.Repeat("é", MaxCmdResultBytes), Error: strings.Repeat("\x01", MaxCmdResultBytes)},
	} {
		got := TruncateResult(r)
		b, _ := json.Marshal(got)
		if len(b) > MaxCmdResultBytes || got.ID != r.ID || !utf8.ValidString(got.Output) {
			t.Errorf("TruncateResult: %d bytes, id %q, valid UTF-8 %v", len(b), got.ID, utf8.ValidString(got.Output))
		}
	}
	small := CommandResult{ID: "c1", OK: true, Output: "done"}
	if TruncateResult(small) != small {
		t.Error("TruncateResult changed a result that fits")
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
		_, listed := tp.DeviceWriteRule(id, topic)
		if tp.DeviceMay(id, topic, true) != listed {
			t.Fatalf("DeviceMay and DeviceWriteRule disagree on %q", topic)
		}
		if listed != slices.ContainsFunc(DeviceWrites, func(w DeviceWrite) bool { return w.Suffix == suffix }) {
			t.Fatalf("device %q: write to %q allowed=%v, not what DeviceWrites says", id, topic, listed)
		}
		if !tp.DeviceMay(id, topic, false) {
			t.Fatalf("device %q may not subscribe to its own topic %q", id, topic)
		}
	})
}

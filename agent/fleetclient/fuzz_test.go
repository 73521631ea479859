package fleetclient

import (
	"testing"

	"github.com/phaseless/phaseless/transport/fleetwire"
)

// FuzzDecodeInbound feeds arbitrary topics and payloads to the decoder of
// everything the device receives from the broker: it must never panic,
// and never accept a topic of another device.
func FuzzDecodeInbound(f *testing.F) {
	t := fleetwire.Topics{}
	f.Add(t.Device("d1", fleetwire.SuffixConfigDesired), []byte(`{"version":3,"values":{"route":"local"}}`))
	f.Add(t.Device("d1", fleetwire.SuffixCmd), []byte(`{"id":"c1","name":"update","args":{"v":"2"}}`))
	f.Add(t.Device("d1", fleetwire.SuffixTelemetryAck), []byte(`{"batch_id":"1-9","up_to":9}`))
	f.Add(t.Device("d2", fleetwire.SuffixCmd), []byte(`{"id":"c1","name":"x"}`))
	f.Add(t.Device("d1", fleetwire.SuffixCmd), []byte(`{"id":""}`))
	f.Add("phaseless/dev/d1/cmd/extra", []byte(`null`))
	f.Fuzz(func(tt *testing.T, topic string, payload []byte) {
		in, err := decodeInbound(t, "d1", topic, payload)
		if err != nil {
			return
		}
		id, _, ok := t.ParseDevice(topic)
		if !ok || id != "d1" {
			tt.Fatalf("accepted topic %q of another device", topic)
		}
		n := 0
		if in.desired != nil {
			n++
		}
		if in.cmd != nil {
			n++
			if in.cmd.ID == "" {
				tt.Fatal("accepted a command without id")
			}
		}
		if in.ack != nil {
			n++
			if in.ack.BatchID == "" {
				tt.Fatal("accepted an ack without batch id")
			}
		}
		if n != 1 {
			tt.Fatalf("decoded %d messages from one publish", n)
		}
	})
}

package fleet

import (
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/fleet/broker"
)

func TestConfigValidate(t *testing.T) {
	b := startBroker(t, broker.Config{DevAuth: true})
	ext := func(u string) *External { return &External{URL: u} }
	for _, c := range []struct {
		name  string
		cfg   Config
		field string
	}{
		{"no data dir", Config{Broker: b}, "data-dir"},
		{"no broker", Config{DataDir: "x"}, "mqtt-url"},
		{"both brokers", Config{DataDir: "x", Broker: b, External: ext("mqtt://h:1883")}, "mqtt-url"},
		{"bad url", Config{DataDir: "x", External: ext("h:1883")}, "mqtt-url"},
		{"bad scheme", Config{DataDir: "x", External: ext("http://h:1883")}, "mqtt-url"},
		{"bad session expiry", Config{DataDir: "x", External: &External{URL: "mqtt://h:1883", SessionExpiry: time.Millisecond}}, "mqtt-session-expiry"},
		{"bad prefix", Config{DataDir: "x", Broker: b, Prefix: "p"}, "mqtt-prefix"},
		{"negative records", Config{DataDir: "x", Broker: b, MaxRecords: -1}, "fleet-max-records"},
		{"negative age", Config{DataDir: "x", Broker: b, MaxAge: -time.Second}, "fleet-max-age"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Open(c.cfg)
			if err == nil || !strings.Contains(err.Error(), `"`+c.field+`"`) {
				t.Fatalf("err = %v, want field %q", err, c.field)
			}
		})
	}
}

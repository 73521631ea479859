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
		{"no data dir", Config{Broker: b}, "DataDir"},
		{"no broker", Config{DataDir: "x"}, "External"},
		{"both brokers", Config{DataDir: "x", Broker: b, External: ext("mqtt://h:1883")}, "External"},
		{"bad url", Config{DataDir: "x", External: ext("h:1883")}, "External"},
		{"bad scheme", Config{DataDir: "x", External: ext("http://h:1883")}, "External"},
		{"bad session expiry", Config{DataDir: "x", External: &External{URL: "mqtt://h:1883", SessionExpiry: time.Millisecond}}, "External.SessionExpiry"},
		{"bad prefix", Config{DataDir: "x", Broker: b, Prefix: "p"}, "Prefix"},
		{"negative records", Config{DataDir: "x", Broker: b, MaxRecords: -1}, "MaxRecords"},
		{"negative age", Config{DataDir: "x", Broker: b, MaxAge: -time.Second}, "MaxAge"},
		{"lease on postgres", Config{DataDir: "x", Broker: b, DB: "postgres://h/db", Lease: &RedisLease{}}, "Lease"},
		{"archive on postgres", Config{DataDir: "x", Broker: b, DB: "postgres://h/db", ArchiveDir: "a"}, "ArchiveDir"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Open(c.cfg)
			if err == nil || !strings.Contains(err.Error(), `"`+c.field+`"`) {
				t.Fatalf("err = %v, want field %q", err, c.field)
			}
		})
	}
}

package agent

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phaseless/phaseless/transport/pki"
)

// TestHandoverMidStream: the device's addresses change (Wi-Fi to LTE) in
// the middle of a cloud answer that travels through a link emulator. The
// agent moves its connection to a new local socket; then the carrier's NAT
// rebinds the path (linkemu's path change: the cloud sees the device at a
// new address). The answer goes on through both without a new connection
// or handshake.
func TestHandoverMidStream(t *testing.T) {
	pkiDir := t.TempDir()
	if err := pki.EnsureDev(pkiDir, "car-1"); err != nil {
		t.Fatal(err)
	}
	srv, _ := startPacedCloud(t, pkiDir, 15*time.Millisecond, nil)
	relay := relayTo(t, srv.Addr().String())
	cfg := testConfig(t)
	cfg.Cloud, cfg.DeviceID, cfg.PKIDir = relay.Addr().String(), "car-1", pkiDir
	cfg.CloudFirstToken = time.Minute
	cfg.NetWatch = 20 * time.Millisecond
	a, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	addrs := []string{"192.168.1.20/24"} // on the garage's Wi-Fi
	a.netAddrs = func() ([]string, error) {
		mu.Lock()
		defer mu.Unlock()
		return addrs, nil
	}
	url := runAgent(t, a)
	waitUntil(t, "the agent to connect", func() bool { return a.cloud.Link().Connected })
	before := a.cloud.Link().LocalAddr
	got := readStream(t, url, resumeChat, func(n int) {
		if n == 5 {
			mu.Lock()
			addrs = []string{"10.64.3.7/32"} // out of the garage, on LTE
			mu.Unlock()
			waitUntil(t, "the uplink to move", func() bool { return a.cloud.Link().LocalAddr != before })
		}
		if n == 15 {
			if err := relay.ChangePath(); err != nil {
				t.Error(err)
			}
		}
	})
	l := a.cloud.Link()
	if !got.done || got.chunks < 20 || got.continued != "" || relay.Stats().PathChanges != 1 {
		t.Fatalf("answer across the handover: %d chunks, done %v, continued %q", got.chunks, got.done, got.continued)
	}
	if st := srv.Stats(); st.Conns != 1 || l.Reconnects != 0 || l.Resumes != 0 || !l.Connected {
		t.Fatalf("the handover made a new connection: cloud %+v, link %+v", st, l)
	}
	var b strings.Builder
	a.metrics.WriteText(&b)
	if !strings.Contains(b.String(), `phaseless_uplink_migrations_total{result="ok"} 1`) {
		t.Fatalf("migration metric:\n%s", b.String())
	}
}

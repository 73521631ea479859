package fleet

import (
	"errors"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/admit/redistest"
	"github.com/phaseless/phaseless/cloud/fleet/broker"
)

// TestPlainWriterBindsTheStore: a writer opened with Open (phaseless-cloud
// --redis without --fleet-standby) records its store id too, so a standby
// on a store of its own does not take the fleet over empty when it stops.
func TestPlainWriterBindsTheStore(t *testing.T) {
	url := redistest.Start(t)
	b := startBroker(t, broker.Config{DevAuth: true})
	a, err := Open(Config{DataDir: t.TempDir(), Broker: b, Lease: testLease(t, url, "cloud-a", 3*time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	bs, err := OpenStandby(Config{DataDir: t.TempDir(), Broker: b, Lease: testLease(t, url, "cloud-b", 3*time.Second)}, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	a.Close()
	waitFor(t, "B decides", func() bool { return bs.Manager() != nil || errors.Is(bs.Writer(), ErrOtherStore) })
	if bs.Manager() != nil {
		t.Errorf("B took the fleet over with an empty store of its own after a plain writer")
	}
}

package fleet

import (
	"context"
	"errors"
	"sync/atomic"
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
	lb := &acquireCounter{RedisLease: testLease(t, url, "cloud-b", 3*time.Second)}
	bs, err := OpenStandby(Config{DataDir: t.TempDir(), Broker: b, Lease: lb}, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	a.Close()
	waitFor(t, "B decides", func() bool { return bs.Manager() != nil || errors.Is(bs.Writer(), ErrOtherStore) })
	if bs.Manager() != nil {
		t.Fatalf("B took the fleet over with an empty store of its own after a plain writer")
	}
	// Refused for its store, B asks for the lease again only after
	// otherStoreWait (30 s, not a number of polls, so a slow machine
	// leaves the same margin), so a writer on the fleet's store that
	// starts meanwhile finds the lease free.
	before := lb.n.Load()
	time.Sleep(10 * 20 * time.Millisecond)
	if n := lb.n.Load() - before; n != 0 {
		t.Fatalf("B took the lease %d times within 10 polls of being refused for its store", n)
	}
}

// acquireCounter counts a lease's Acquire calls.
type acquireCounter struct {
	*RedisLease
	n atomic.Int64
}

func (l *acquireCounter) Acquire(ctx context.Context) error {
	l.n.Add(1)
	return l.RedisLease.Acquire(ctx)
}

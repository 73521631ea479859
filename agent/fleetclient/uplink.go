package fleetclient

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"

	"github.com/phaseless/phaseless/agent/telemetry"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// maxBatchBytes keeps one TelemetryBatch well under the packet limits
// brokers commonly set, whatever the records weigh.
const maxBatchBytes = 256 << 10

// flight is a published batch awaiting its TelemetryAck.
type flight struct {
	id       string
	seqs     []uint64
	deadline time.Time
	acked    bool
	upTo     uint64
}

func (f *flight) first() uint64 { return f.seqs[0] }
func (f *flight) last() uint64  { return f.seqs[len(f.seqs)-1] }

// uplinkLoop drains the telemetry store to the cloud, oldest first: it
// keeps up to MaxInFlight batches published and unacknowledged, deletes
// records only when the cloud's ack covers a contiguous prefix, and after
// an ack timeout or a reconnect goes back to the oldest unacknowledged
// record (go-back-N; the cloud ingests idempotently on (device, seq)).
func (c *Client) uplinkLoop(ctx context.Context, cm *autopaho.ConnectionManager) {
	store := c.cfg.Store
	clock := c.cfg.Clock
	bucket := newTokenBucket(c.cfg.UplinkRate, c.cfg.BatchSize, clock.Now())
	del := newDeleter(store, c.log)
	var wg sync.WaitGroup
	wg.Go(func() { del.run(ctx) })
	defer wg.Wait()
	var inflight []*flight
	var after uint64 // highest seq published in this pass
	reset := func() {
		inflight = inflight[:0]
		after = 0
	}
	for {
		up, connCh := c.connState()
		if !up {
			reset()
			select {
			case <-ctx.Done():
				return
			case <-connCh:
			}
			continue
		}
		changed := store.Changed() // before reading, so no commit is missed
		if len(inflight) < c.cfg.MaxInFlight {
			// Skip what the cloud acknowledged but the deleter has not
			// removed yet.
			recs, err := store.PendingAfter(max(after, del.acked()), c.cfg.BatchSize)
			if err != nil {
				c.log.Error("read telemetry", "err", err)
				if !sleep(ctx, clock, time.Second) {
					return
				}
				continue
			}
			if len(recs) > 0 {
				recs = trimToBytes(recs, maxBatchBytes)
				if wait := bucket.reserve(clock.Now(), len(recs)); wait > 0 {
					c.stats.rateWaits.Add(1)
					if !sleep(ctx, clock, wait) {
						return
					}
				}
				f, err := c.sendBatch(ctx, cm, recs)
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					c.stats.publishErrors.Add(1)
					c.log.Debug("telemetry publish failed; resending from the oldest", "err", err)
					reset()
					if !sleep(ctx, clock, c.cfg.BackoffMin) {
						return
					}
					continue
				}
				inflight = append(inflight, f)
				after = f.last()
				continue
			}
		}
		var timeout <-chan time.Time
		if len(inflight) > 0 {
			timeout = clock.After(inflight[0].deadline.Sub(clock.Now()))
		}
		var wake <-chan struct{}
		if len(inflight) < c.cfg.MaxInFlight {
			wake = changed
		}
		select {
		case <-ctx.Done():
			return
		case <-connCh:
			// Batches published on a connection that dropped may be lost
			// with it; start over from the oldest unacknowledged record.
			reset()
		case <-wake:
		case a := <-c.acks:
			if c.handleAck(a, &inflight, del) {
				reset()
			}
		case <-timeout:
			c.stats.ackTimeouts.Add(1)
			c.log.Info("telemetry ack timed out; resending from the oldest", "batch", inflight[0].id)
			reset()
		}
	}
}

// handleAck records a TelemetryAck and hands the acknowledged prefix to
// the deleter. It returns true when the uplink must resend from the
// oldest record (a partial ack).
func (c *Client) handleAck(a fleetwire.TelemetryAck, inflight *[]*flight, del *deleter) (resend bool) {
	i := slices.IndexFunc(*inflight, func(f *flight) bool { return f.id == a.BatchID })
	if i < 0 {
		c.log.Debug("ack for a batch not in flight", "batch", a.BatchID)
		return false
	}
	(*inflight)[i].acked, (*inflight)[i].upTo = true, a.UpTo
	// Acks may arrive out of order; delete only a contiguous acked prefix,
	// because Store.Ack removes everything up to a seq.
	for len(*inflight) > 0 && (*inflight)[0].acked {
		f := (*inflight)[0]
		upTo := min(f.upTo, f.last())
		if upTo >= f.first() {
			del.ack(upTo)
			n := 0
			for _, s := range f.seqs {
				if s <= upTo {
					n++
				}
			}
			c.stats.recordsAcked.Add(uint64(n))
		}
		if f.upTo < f.last() {
			return true // the cloud stored only part of it: resend the rest
		}
		*inflight = (*inflight)[1:]
	}
	return false
}

func (c *Client) sendBatch(ctx context.Context, cm *autopaho.ConnectionManager, recs []fleetwire.Record) (*flight, error) {
	f := &flight{seqs: make([]uint64, len(recs))}
	for i, r := range recs {
		f.seqs[i] = r.Seq
	}
	// The id names the records it carries, so a resend of the same records
	// has the same id and a late ack of the first send still matches.
	f.id = fmt.Sprintf("%d-%d", f.first(), f.last())
	st := c.cfg.Store.Stats()
	payload, err := json.Marshal(fleetwire.TelemetryBatch{
		DeviceID: c.cfg.DeviceID,
		BatchID:  f.id,
		Records:  recs,
		Dropped:  st.Dropped,
		Pending:  uint64(st.Records),
	})
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, c.cfg.AckTimeout)
	defer cancel()
	if _, err := cm.Publish(pctx, &paho.Publish{Topic: c.tTelemetry, QoS: 1, Payload: payload}); err != nil {
		return nil, err
	}
	f.deadline = c.cfg.Clock.Now().Add(c.cfg.AckTimeout)
	c.stats.batchesSent.Add(1)
	c.stats.recordsSent.Add(uint64(len(recs)))
	return f, nil
}

// trimToBytes keeps the longest prefix of recs (at least one record) whose
// encoded size stays under limit.
func trimToBytes(recs []fleetwire.Record, limit int) []fleetwire.Record {
	size := 0
	for i, r := range recs {
		size += len(r.Data) + len(r.Kind) + 80 // seq, time and JSON punctuation
		if size > limit && i > 0 {
			return recs[:i]
		}
	}
	return recs
}

// sleep waits d on clock; false means ctx ended first.
func sleep(ctx context.Context, clock Clock, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-clock.After(d):
		return true
	}
}

// deleter removes acknowledged records from the store off the uplink's
// critical path: a delete is a write transaction with an fsync, as slow as
// a publish round trip, and acks that arrive while one runs coalesce into
// the next.
type deleter struct {
	store *telemetry.Store
	log   *slog.Logger
	kick  chan struct{} // 1-buffered

	mu      sync.Mutex // guards want
	want    uint64     // delete every seq <= want
	deleted uint64     // last seq deleted; only run touches it
}

func newDeleter(store *telemetry.Store, log *slog.Logger) *deleter {
	return &deleter{store: store, log: log, kick: make(chan struct{}, 1)}
}

// ack asks for every seq <= upTo to be deleted.
func (d *deleter) ack(upTo uint64) {
	d.mu.Lock()
	d.want = max(d.want, upTo)
	d.mu.Unlock()
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// acked is the highest seq the cloud acknowledged.
func (d *deleter) acked() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.want
}

// run deletes until ctx ends, then once more so that everything
// acknowledged before shutdown is gone from the store.
func (d *deleter) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			d.flush()
			return
		case <-d.kick:
			d.flush()
		}
	}
}

func (d *deleter) flush() {
	want := d.acked()
	if want <= d.deleted {
		return
	}
	if err := d.store.Ack(want); err != nil {
		// Left in place, the records are resent after a restart and
		// deduplicated by the cloud; nothing is lost.
		d.log.Error("delete acknowledged telemetry", "err", err)
		return
	}
	d.deleted = want
}

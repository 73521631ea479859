package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/fleet/pgtest"
)

// pgStores opens n empty PostgreSQL stores on one throwaway cluster.
func pgStores(t *testing.T, n int) []*pgStore {
	url := pgtest.Start(t)
	var out []*pgStore
	for i := range n {
		st, err := openPGStore(context.Background(), pgtest.CreateDB(t, url, fmt.Sprintf("group%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.close() })
		out = append(out, st)
	}
	return out
}

// groupCalls is a group as the queue would hand it over: devices out of
// id order, one new, one with records retention deleted (a floor), one
// with a seq twice in its batch and one resending records it has.
func groupCalls(now time.Time) []*pgIngestCall {
	call := func(id string, seqs ...uint64) *pgIngestCall {
		return &pgIngestCall{id: id, b: batchOf(id, seqs...), now: now, maxRecords: 12, done: make(chan struct{})}
	}
	return []*pgIngestCall{
		call("car-3", 7, 7, 8),
		call("car-1", 1, 2, 3, 9, 10, 11), // 1-3 under the floor, 9 stored before
		call("new-9", 1, 2),
		call("car-2", 4, 5, 6),
	}
}

// seedGroupStore gives st the devices groupCalls expects: car-1 with seqs
// 1-9 of which retention deleted 1-3 (maxRecords 12 over 15 records),
// car-2 with 4 and car-3 with 1-2.
func seedGroupStore(t *testing.T, st *pgStore) {
	for _, c := range []*pgIngestCall{
		{id: "car-1", b: batchOf("car-1", seqRange(1, 9)...)},
		{id: "car-2", b: batchOf("car-2", 4)},
		{id: "car-3", b: batchOf("car-3", 1, 2)},
		{id: "car-1", b: batchOf("car-1", 100, 101, 102)},
	} {
		c.now, c.maxRecords, c.done = t0, 12, make(chan struct{})
		if st.commitGroup([]*pgIngestCall{c}); c.err != nil {
			t.Fatal(c.err)
		}
	}
	if c := must[Counts](t)(st.counts()); c.Stored != 12 || c.Deleted != 3 {
		t.Fatalf("seed counts %+v", c)
	}
}

// TestPGIngestGroupMatchesAlone: a group transaction gives each call the
// result, and leaves the store in the state, that the same calls made
// one at a time give.
func TestPGIngestGroupMatchesAlone(t *testing.T) {
	sts := pgStores(t, 2)
	grouped, alone := sts[0], sts[1]
	now := t0.Add(time.Minute)
	seedGroupStore(t, grouped)
	seedGroupStore(t, alone)

	g := groupCalls(now)
	grouped.commitGroup(g)
	a := groupCalls(now)
	for _, c := range a {
		alone.commitGroup([]*pgIngestCall{c})
	}
	for _, c := range append(g, a...) {
		if c.err != nil {
			t.Fatal(c.err)
		}
	}
	want := map[string]ingestResult{
		"car-3": {stored: 2, duplicates: 1, upTo: 8},
		"car-1": {stored: 2, duplicates: 4, upTo: 11},
		"new-9": {stored: 2, upTo: 2, newDevice: true},
		"car-2": {stored: 2, duplicates: 1, upTo: 6},
	}
	deleted := [2]int{}
	for i := range g {
		for k, c := range []*pgIngestCall{g[i], a[i]} {
			r := c.res
			deleted[k] += r.deleted
			r.deleted = 0
			if r != want[c.id] {
				t.Errorf("%s (grouped %v): %+v, want %+v", c.id, k == 0, c.res, want[c.id])
			}
		}
	}
	// Retention deletes the same records either way (20 stored, bound 12),
	// once after the group or spread over the calls.
	if deleted != [2]int{8, 8} {
		t.Errorf("deleted %v, want 8 each", deleted)
	}
	if cg, ca := must[Counts](t)(grouped.counts()), must[Counts](t)(alone.counts()); cg != ca || cg.Stored != 12 || cg.Devices != 4 {
		t.Errorf("counts grouped %+v, alone %+v", cg, ca)
	}
	for _, id := range []string{"car-1", "car-2", "car-3", "new-9"} {
		dg, da := must[*Device](t)(grouped.device(id)), must[*Device](t)(alone.device(id))
		if dg.Telemetry != da.Telemetry || !dg.FirstSeen.Equal(da.FirstSeen) || !dg.LastSeen.Equal(now) {
			t.Errorf("%s: grouped %+v first %v, alone %+v first %v", id, dg.Telemetry, dg.FirstSeen, da.Telemetry, da.FirstSeen)
		}
	}
	eg, ea := exported(t, grouped, time.Time{}, ""), exported(t, alone, time.Time{}, "")
	slices.Sort(eg)
	slices.Sort(ea)
	if !slices.Equal(eg, ea) {
		t.Errorf("records grouped %v, alone %v", eg, ea)
	}
}

// TestPGIngestGroupFailsAlone: a batch whose transaction fails (here its
// device's stored document is corrupt) fails alone; the group's other
// batches are stored.
func TestPGIngestGroupFailsAlone(t *testing.T) {
	st := pgStores(t, 1)[0]
	for _, id := range []string{"a", "bad", "c"} {
		if _, err := st.ingest(id, batchOf(id, 1), t0, 1000, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.pool.Exec(context.Background(), `UPDATE fleet_devices SET doc = 'not json' WHERE id = 'bad'`); err != nil {
		t.Fatal(err)
	}
	var group []*pgIngestCall
	for _, id := range []string{"c", "bad", "a"} {
		group = append(group, &pgIngestCall{id: id, b: batchOf(id, 2, 3), now: t0, maxRecords: 1000, done: make(chan struct{})})
	}
	st.commitGroup(group)
	for _, c := range group {
		<-c.done
		switch {
		case c.id == "bad" && !errors.Is(c.err, errCorrupt):
			t.Errorf("bad: err %v, want errCorrupt", c.err)
		case c.id != "bad" && (c.err != nil || c.res.stored != 2):
			t.Errorf("%s: %+v, err %v", c.id, c.res, c.err)
		}
	}
	got := exported(t, st, time.Time{}, "")
	slices.Sort(got)
	if want := []string{"a/1", "a/2", "a/3", "bad/1", "c/1", "c/2", "c/3"}; !slices.Equal(got, want) {
		t.Errorf("records %v, want %v", got, want)
	}
}

// TestPGIngestQueueGroups: calls that wait together share transactions, a
// device's batches going to different ones, and every call gets its own
// result. The committers are held until all calls are queued, so the
// grouping does not depend on timing.
func TestPGIngestQueueGroups(t *testing.T) {
	st := pgStores(t, 1)[0]
	q := &st.queue
	q.mu.Lock()
	q.running = pgIngestTxns // no call starts a committer
	q.mu.Unlock()

	// 100 calls over 40 devices: each device's first batch, then 40
	// second batches, then 20 third ones, which resend the second's seqs.
	type call struct {
		id   string
		seqs []uint64
	}
	var calls []call
	for round := range 3 {
		for d := range 40 - 20*(round/2) {
			from := uint64(min(round, 1)*10 + 1)
			calls = append(calls, call{fmt.Sprintf("dev-%02d", d), seqRange(from, from+9)})
		}
	}
	results := make([]ingestResult, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		// Queued in order: each call is in the queue before the next starts.
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := st.ingest(c.id, batchOf(c.id, c.seqs...), t0, 1<<30, 0)
			if err != nil {
				t.Error(err)
			}
			results[i] = res
		}()
		for {
			q.mu.Lock()
			n := len(q.waiting)
			q.mu.Unlock()
			if n == i+1 {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	q.mu.Lock()
	q.running = 1
	q.mu.Unlock()
	st.commitQueued()
	wg.Wait()

	// take: the 40 first batches, then the 40 second ones, then the 20 third.
	if g, b := q.groups.Load(), q.batches.Load(); g != 3 || b != 100 {
		t.Errorf("%d groups of %d batches, want 3 of 100", g, b)
	}
	for i, r := range results {
		want := ingestResult{stored: 10, upTo: calls[i].seqs[9], newDevice: i < 40}
		if i >= 80 {
			want.stored, want.duplicates = 0, 10
		}
		if r != want {
			t.Errorf("call %d (%s): %+v, want %+v", i, calls[i].id, r, want)
		}
	}
	if c := must[Counts](t)(st.counts()); c.Stored != 800 || c.Duplicates != 200 || c.Devices != 40 {
		t.Errorf("counts %+v", c)
	}
	for _, d := range must[[]*Device](t)(st.devices()) {
		if d.Telemetry.Stored != 20 || d.Telemetry.LastSeq != 20 || d.Telemetry.Batches != uint64(2+d.Telemetry.Duplicates/10) {
			t.Errorf("%s: %+v", d.ID, d.Telemetry)
		}
	}
}

// TestPGDeviceCountMigration: a database made before the device counter
// gets it from its rows when a manager of this version opens it, and
// counts devices made through either path after that.
func TestPGDeviceCountMigration(t *testing.T) {
	url := pgtest.CreateDB(t, pgtest.Start(t), "migrate")
	st, err := openPGStore(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		must[ingestResult](t)(st.ingest(id, batchOf(id, 1), t0, 1000, 0))
	}
	// Back to the first schema: no device counter.
	if _, err := st.pool.Exec(context.Background(), `DELETE FROM fleet_counters WHERE name = 'devices'; UPDATE fleet_schema SET version = 1`); err != nil {
		t.Fatal(err)
	}
	if c := must[Counts](t)(st.counts()); c.Devices != 0 {
		t.Fatalf("before the migration: %d devices", c.Devices)
	}
	st.close()
	st, err = openPGStore(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	must[*Device](t)(st.updateDevice("d", t0, true, func(*Device) error { return nil }))
	must[ingestResult](t)(st.ingest("e", batchOf("e", 1), t0, 1000, 0))
	must[ingestResult](t)(st.ingest("a", batchOf("a", 2), t0, 1000, 0))
	if c := must[Counts](t)(st.counts()); c.Devices != 5 {
		t.Fatalf("%d devices, want 5", c.Devices)
	}
}

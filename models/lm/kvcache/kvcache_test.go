package kvcache

import (
	"slices"
	"testing"
)

func TestBlockHashesChainOnPrefix(t *testing.T) {
	a := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	b := []int32{1, 2, 3, 4, 5, 6, 7, 0, 9}
	ha, hb := BlockHashes(a, 4), BlockHashes(b, 4)
	if len(ha) != 2 {
		t.Fatalf("%d hashes for 9 tokens in blocks of 4, want 2", len(ha))
	}
	if ha[0] != hb[0] || ha[1] == hb[1] {
		t.Fatalf("hashes %x vs %x: want equal first block, different second", ha, hb)
	}
	// The same block content after a different prefix must hash differently.
	c := []int32{9, 9, 9, 9, 5, 6, 7, 8}
	if hc := BlockHashes(c, 4); hc[1] == ha[1] {
		t.Fatal("block hash ignores its parent")
	}
	if got := BlockHashes(a, 3); got[0] == ha[0] {
		t.Fatal("block size does not enter the hash")
	}
	if !slices.Equal(BlockHashes(a, 4), ha) {
		t.Fatal("not deterministic")
	}
}

func TestAllocatorLifecycle(t *testing.T) {
	a, err := New(3)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int32
	for range 3 {
		id, ev, ok := a.Allocate()
		if !ok || ev {
			t.Fatalf("allocate: ok=%v evicted=%v", ok, ev)
		}
		ids = append(ids, id)
	}
	if _, _, ok := a.Allocate(); ok {
		t.Fatal("allocated a fourth block out of three")
	}
	a.Register(ids[0], 100)
	a.Register(ids[1], 200)
	a.Register(ids[2], 100) // duplicate content stays private
	if !a.Shared(ids[0]) || a.Shared(ids[2]) {
		t.Fatal("Shared: registered block must be shared, private one not")
	}
	a.Release(ids[1]) // cached, newest
	a.Release(ids[0]) // cached, newest now
	a.Release(ids[2]) // free
	if h, c, f := a.Counts(); h != 0 || c != 2 || f != 1 {
		t.Fatalf("counts held=%d cached=%d free=%d, want 0 2 1", h, c, f)
	}
	if n := a.Probe([]uint64{200, 100}); n != 2 {
		t.Fatalf("probe = %d, want 2", n)
	}
	// Free blocks go first, then the least recently released cached block,
	// which the evict hook sees with its hash before it is handed out.
	type dropped struct {
		id   int32
		hash uint64
	}
	var seen []dropped
	a.SetEvictHook(func(id int32, h uint64) { seen = append(seen, dropped{id, h}) })
	if id, ev, _ := a.Allocate(); id != ids[2] || ev {
		t.Fatalf("allocate = %d evicted=%v, want free block %d", id, ev, ids[2])
	}
	if id, ev, _ := a.Allocate(); id != ids[1] || !ev {
		t.Fatalf("allocate = %d evicted=%v, want LRU block %d evicted", id, ev, ids[1])
	}
	if n := a.Probe([]uint64{200}); n != 0 {
		t.Fatal("evicted hash still found")
	}
	if !slices.Equal(seen, []dropped{{ids[1], 200}}) {
		t.Fatalf("evict hook saw %v, want block %d with hash 200", seen, ids[1])
	}
	got := a.Acquire([]uint64{100, 200})
	if !slices.Equal(got, []int32{ids[0]}) {
		t.Fatalf("acquire = %v, want [%d]", got, ids[0])
	}
	// A second holder makes the block shared for writes.
	a.Acquire([]uint64{100})
	if h, c, f := a.Counts(); h != 3 || c != 0 || f != 0 {
		t.Fatalf("counts held=%d cached=%d free=%d, want 3 0 0", h, c, f)
	}
	st := a.Stats()
	if st.Evictions != 1 || st.Failures != 1 || st.Hits != 2 || st.Allocations != 5 {
		t.Fatalf("stats %+v", st)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("double release did not panic")
		}
	}()
	a.Release(ids[2])
	a.Release(ids[2])
}

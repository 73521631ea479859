package affinity

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/phaseless/phaseless/cloud/place"
)

// failing is a directory that does not answer.
type failing struct{}

func (failing) Record(context.Context, uint64, string, time.Duration) error { return nil }
func (failing) Lookup(context.Context, []uint64) (string, int, error) {
	return "", 0, errors.New("down")
}
func (failing) Close() error { return nil }

// TestLocateAndPinnedBlock: a pin is recorded under its last full block
// and found as the worker's index with its length; a worker this replica
// lacks, a miss and a directory error place nothing; a breakpoint that
// covers no full block, or renders nothing (-1), records nothing.
func TestLocateAndPinnedBlock(t *testing.T) {
	hashes := []uint64{11, 12, 13, 14}
	for _, c := range []struct{ tokens, want int }{{-1, 0}, {0, 0}, {15, 0}, {16, 1}, {47, 2}, {64, 4}, {80, 0}} {
		h, ok := PinnedBlock(hashes, c.tokens, 16)
		if ok != (c.want > 0) || ok && h != hashes[c.want-1] {
			t.Errorf("PinnedBlock(%d tokens) = %d, %v; want block %d", c.tokens, h, ok, c.want)
		}
	}
	d := NewMemory(nil)
	h, _ := PinnedBlock(hashes, 40, 16)
	if err := d.Record(t.Context(), h, "gpu-b", time.Minute); err != nil {
		t.Fatal(err)
	}
	index := func(name string) int {
		if i, ok := map[string]int{"gpu-a": 0, "gpu-b": 1}[name]; ok {
			return i
		}
		return -1
	}
	if pin, res := Locate(t.Context(), d, hashes, index); pin != (place.Pin{Worker: 1, Blocks: 2}) || res != Hit {
		t.Errorf("Locate = %+v, %v", pin, res)
	}
	if pin, res := Locate(t.Context(), d, hashes, func(string) int { return -1 }); pin != (place.Pin{}) || res != Hit {
		t.Errorf("a worker this replica lacks: %+v, %v", pin, res)
	}
	if pin, res := Locate(t.Context(), d, []uint64{99}, index); pin != (place.Pin{}) || res != Miss {
		t.Errorf("miss: %+v, %v", pin, res)
	}
	if pin, res := Locate(t.Context(), failing{}, hashes, index); pin != (place.Pin{}) || res != Error || res.String() != "error" {
		t.Errorf("a directory error: %+v, %v", pin, res)
	}
}

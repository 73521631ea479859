package worker

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/llm"
)

// probedEngine answers each Probe with the next of its errors (nil: a
// healthy load).
type probedEngine struct{ errs []error }

func (p *probedEngine) Generate(context.Context, *llm.Request, llm.Emit) (llm.Final, error) {
	return llm.Final{}, nil
}
func (p *probedEngine) Probe(context.Context) (Load, error) {
	err := p.errs[0]
	p.errs = p.errs[1:]
	return Load{Capacity: 8}, err
}
func (p *probedEngine) CachedPrefixBlocks([]uint64) int { return -1 }
func (p *probedEngine) Close() error                    { return nil }

// TestProbeHealth: a probe that fails outright takes the worker out at
// once; one that only timed out does so after slowProbes in a row (a busy
// engine answering one /metrics scrape late is still serving); a success
// brings it back and resets the count.
func TestProbeHealth(t *testing.T) {
	late := fmt.Errorf("remote x: %w", context.DeadlineExceeded)
	refused := errors.New("remote x: connection refused")
	eng := &probedEngine{errs: []error{late, late, nil, late, late, late, nil, refused}}
	w, err := New(Config{Name: "p", Role: sched.RoleDecode}, eng)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i, want := range []bool{true, true, true, true, true, false, true, false} {
		w.probe(context.Background())
		if w.Healthy() != want {
			t.Fatalf("probe %d: healthy %v, want %v (error %q)", i, w.Healthy(), want, w.ProbeError())
		}
	}
}

package worker

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/llm"
)

// gatedEngine emits its tokens once first is closed, then waits on rest:
// the test reads the worker's signals while the request is prefilling and
// while it decodes.
type gatedEngine struct {
	first, rest chan struct{}
	emitted     chan struct{}
}

func (g *gatedEngine) Generate(ctx context.Context, _ *llm.Request, emit llm.Emit) (llm.Final, error) {
	<-g.first
	if err := emit(llm.Token{Text: "a"}); err != nil {
		return llm.Final{}, err
	}
	close(g.emitted)
	<-g.rest
	return llm.Final{}, emit(llm.Token{Text: "b"})
}
func (g *gatedEngine) Probe(context.Context) (Load, error) { return Load{}, nil }
func (g *gatedEngine) CachedPrefixBlocks(h []uint64) int   { return -1 }
func (g *gatedEngine) Close() error                        { return nil }

// TestPendingPrefill: a request counts as pending prefill (its uncached
// tokens, one request) from Generate until its first token, and the
// worker's declared class reaches the scheduler's signals. It runs in a
// synctest bubble so the request is read while it waits in the engine, not
// after a wall-clock poll saw it start.
func TestPendingPrefill(t *testing.T) { synctest.Test(t, testPendingPrefill) }

func testPendingPrefill(t *testing.T) {
	g := &gatedEngine{first: make(chan struct{}), rest: make(chan struct{}), emitted: make(chan struct{})}
	cls := sched.Class{ID: sched.ClassL4, PrefillTokensPerSec: 4500, DecodeStepSec: 0.06, PricePerHour: 0.8}
	w, err := New(Config{Name: "g", Role: sched.RoleDecode, Class: cls}, g)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// Two of the prompt's three blocks were routed here before.
	hashes := []uint64{1, 2, 3}
	w.prefix.add(hashes[:2])
	done := make(chan error)
	go func() {
		_, _, err := w.Generate(context.Background(), chat("x", 2), 50, hashes, func(llm.Token) error { return nil })
		done <- err
	}()
	signals := func() sched.Worker {
		var s sched.Worker
		w.Signals(&s, hashes, time.Now())
		return s
	}
	synctest.Wait() // Generate has counted the request and waits on g.first
	if n := w.Inflight(); n != 1 {
		t.Fatalf("inflight %d before the engine ran, want 1", n)
	}
	if s := signals(); s.PendingPrefill != 50-2*16 || s.Prefilling != 1 || s.Class != cls {
		t.Fatalf("prefilling: pending %d tokens in %d requests, class %+v", s.PendingPrefill, s.Prefilling, s.Class)
	}
	close(g.first)
	<-g.emitted
	if s := signals(); s.PendingPrefill != 0 || s.Prefilling != 0 || s.Running != 1 {
		t.Fatalf("decoding: pending %d tokens in %d requests, running %d", s.PendingPrefill, s.Prefilling, s.Running)
	}
	close(g.rest)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if tok, n := w.PendingPrefill(); tok != 0 || n != 0 {
		t.Fatalf("after: %d, %d", tok, n)
	}
}

package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/phaseless/phaseless/cloud/sched"
)

// Set is every worker of a coordinator, in every pool, with the goroutine
// that probes them.
type Set struct {
	workers []*Worker
	every   time.Duration

	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
}

// NewSet takes ownership of workers and probes each every interval (default
// 500 ms: load moves fast, and a probe is one small GET or a counter read).
// It probes once before returning so the first decisions see real state.
func NewSet(ctx context.Context, interval time.Duration, workers ...*Worker) (*Set, error) {
	if len(workers) == 0 {
		return nil, errors.New("worker set: no workers")
	}
	seen := map[string]bool{}
	for _, w := range workers {
		if seen[w.Name()] {
			return nil, fmt.Errorf("worker set: duplicate worker name %q", w.Name())
		}
		seen[w.Name()] = true
	}
	if interval <= 0 {
		interval = 500 * time.Millisecond
	}
	s := &Set{workers: workers, every: interval, done: make(chan struct{})}
	s.probeAll(ctx)
	ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	go s.loop(ctx)
	return s, nil
}

func (s *Set) loop(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.probeAll(ctx)
		}
	}
}

func (s *Set) probeAll(ctx context.Context) {
	var wg sync.WaitGroup
	for _, w := range s.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.probe(ctx)
		}()
	}
	wg.Wait()
}

// Workers returns the workers; index i matches Snapshot's index i.
func (s *Set) Workers() []*Worker { return s.workers }

// Snapshot fills dst with every worker's signals for a request with the
// given prompt block hashes. It reuses dst.Workers' storage.
func (s *Set) Snapshot(dst *sched.Snapshot, hashes []uint64) {
	now := time.Now()
	if cap(dst.Workers) < len(s.workers) {
		dst.Workers = make([]sched.Worker, len(s.workers))
	}
	dst.Workers, dst.Now = dst.Workers[:len(s.workers)], now
	for i, w := range s.workers {
		w.Signals(&dst.Workers[i], hashes, now)
	}
}

// Ready reports an error unless some worker is healthy.
func (s *Set) Ready() error {
	for _, w := range s.workers {
		if w.Healthy() {
			return nil
		}
	}
	msgs := make([]error, 0, len(s.workers))
	for _, w := range s.workers {
		msgs = append(msgs, fmt.Errorf("%s: %s", w.Name(), w.ProbeError()))
	}
	return fmt.Errorf("no healthy worker: %w", errors.Join(msgs...))
}

// Close stops probing and closes every worker. Idempotent.
func (s *Set) Close() error {
	var errs []error
	s.closeOnce.Do(func() {
		s.cancel()
		<-s.done
		for _, w := range s.workers {
			errs = append(errs, w.Close())
		}
	})
	return errors.Join(errs...)
}

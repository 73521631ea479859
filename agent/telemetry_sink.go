package agent

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/phaseless/phaseless/agent/telemetry"
	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// telemetrySink hands request records to the telemetry store off the
// request path: the store fsyncs every commit, and a response should not end
// later because its record is being made durable. Records wait in a bounded
// channel; when it is full they are counted and dropped rather than slowing
// requests down.
//
// Several writers drain the channel, because the store group-commits the
// appends that wait at the same time into one fsync'd transaction: with one
// writer every record costs its own fsync, and a burst of requests sits in
// memory (and is lost in a crash) for as many fsyncs as it has records.
type telemetrySink struct {
	store   *telemetry.Store
	log     *slog.Logger
	ch      chan fleetwire.RequestRecord
	writers sync.WaitGroup
	dropped *metrics.Counter
	failed  *metrics.Counter

	mu     sync.RWMutex // guards closed against sends racing Close
	closed bool
}

var errSinkFull = errors.New("telemetry queue full")

// sinkWriters is how many appends the sink keeps in the store's commit queue
// at once; see BenchmarkTelemetrySink for what it buys.
const sinkWriters = 32

func newTelemetrySink(store *telemetry.Store, reg *metrics.Registry, log *slog.Logger, writers int) *telemetrySink {
	s := &telemetrySink{
		store: store, log: log, ch: make(chan fleetwire.RequestRecord, 1024),
		dropped: reg.Counter("phaseless_agent_telemetry_dropped_total", "request records dropped because the telemetry queue was full"),
		failed:  reg.Counter("phaseless_agent_telemetry_errors_total", "request records the telemetry store refused"),
	}
	reg.GaugeFunc("phaseless_agent_telemetry_pending", "records stored and not yet acknowledged by the cloud", func() float64 { return float64(store.Stats().Records) })
	for range max(writers, 1) {
		s.writers.Go(s.run)
	}
	return s
}

func (s *telemetrySink) run() {
	for rec := range s.ch {
		if _, err := s.store.AppendRequest(context.Background(), rec); err != nil {
			s.failed.Inc()
			s.log.Warn("telemetry append failed", "trace", rec.TraceID, "err", err)
		}
	}
}

// record queues rec; it never blocks.
func (s *telemetrySink) record(_ context.Context, rec fleetwire.RequestRecord) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return telemetry.ErrClosed
	}
	select {
	case s.ch <- rec:
		return nil
	default:
		s.dropped.Inc()
		return errSinkFull
	}
}

// err is telemetry.ErrClosed once the sink is closed.
func (s *telemetrySink) err() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return telemetry.ErrClosed
	}
	return nil
}

// close stores what is queued and stops the writer; safe to call twice.
func (s *telemetrySink) close() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.ch)
	}
	s.mu.Unlock()
	s.writers.Wait()
}

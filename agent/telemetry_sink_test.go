package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/phaseless/phaseless/agent/telemetry"
	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

func openSink(tb testing.TB, writers int) (*telemetrySink, *telemetry.Store) {
	tb.Helper()
	store, err := telemetry.Open(filepath.Join(tb.TempDir(), "telemetry.db"), telemetry.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { store.Close() })
	return newTelemetrySink(store, metrics.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)), writers), store
}

// burst queues n records, as n requests ending at once would, and returns
// how many the sink accepted.
func burst(s *telemetrySink, n int) int {
	accepted := 0
	for i := range n {
		if s.record(context.Background(), fleetwire.RequestRecord{TraceID: fmt.Sprintf("trace-%d", i), Decision: "local", Path: "local", Outcome: "ok"}) == nil {
			accepted++
		}
	}
	return accepted
}

// TestTelemetrySinkStoresWhatItAccepted: every record the sink accepted is
// in the bbolt file once the sink is closed, whatever the writer count.
func TestTelemetrySinkStoresWhatItAccepted(t *testing.T) {
	for _, writers := range []int{1, sinkWriters} {
		s, store := openSink(t, writers)
		accepted := burst(s, 1500) // more than the queue holds: some may be dropped
		s.close()
		s.close() // idempotent
		if got := store.Stats().Records; got != accepted {
			t.Errorf("%d writers: %d records stored, %d accepted", writers, got, accepted)
		}
		if err := s.record(context.Background(), fleetwire.RequestRecord{TraceID: "late"}); err != telemetry.ErrClosed {
			t.Errorf("record after close: %v, want ErrClosed", err)
		}
	}
}

// BenchmarkTelemetrySink drains a burst of 1,024 request records (the
// queue's size) into a real bbolt file with one writer and, in the same run,
// with sinkWriters, and reports how much sooner the burst is durable.
func BenchmarkTelemetrySink(b *testing.B) {
	drain := func(writers int) time.Duration {
		s, _ := openSink(b, writers)
		start := time.Now()
		burst(s, 1024)
		s.close()
		return time.Since(start)
	}
	var one, many time.Duration
	for b.Loop() {
		one += drain(1)
		many += drain(sinkWriters)
	}
	n := float64(b.N * 1024)
	b.ReportMetric(n/one.Seconds(), "records/s-1-writer")
	b.ReportMetric(n/many.Seconds(), "records/s-32-writers")
	b.ReportMetric(one.Seconds()/many.Seconds(), "x-faster")
}

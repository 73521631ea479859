package telemetry

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// appendConcurrently appends n records from workers goroutines and returns
// the elapsed time.
func appendConcurrently(b *testing.B, s *Store, n, workers int) time.Duration {
	b.Helper()
	body := []byte(`{"trace_id":"0123456789abcdef","cloud_prob":0.42,"decision":"local","path":"local","ttft_ms":31.5,"itl_ms":9.1,"prompt_tokens":120,"completion_tokens":64,"outcome":"ok"}`)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				if _, err := s.Append(context.Background(), KindRequest, body); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// BenchmarkAppend measures durable appends/s from 32 concurrent callers
// with group commit, and in the same run with one fsync per record
// (MaxBatch 1), and reports the ratio.
func BenchmarkAppend(b *testing.B) {
	const workers = 32
	group, err := Open(filepath.Join(b.TempDir(), "group.db"), Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer group.Close()
	single, err := Open(filepath.Join(b.TempDir(), "single.db"), Config{MaxBatch: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer single.Close()
	b.ResetTimer()
	var tg, ts time.Duration
	for b.Loop() {
		tg += appendConcurrently(b, group, 256, workers)
		ts += appendConcurrently(b, single, 256, workers)
	}
	n := float64(b.N * 256)
	gs, ss := n/tg.Seconds(), n/ts.Seconds()
	b.ReportMetric(gs, "group-appends/s")
	b.ReportMetric(ss, "fsync-each-appends/s")
	b.ReportMetric(gs/ss, "x-group-vs-fsync-each")
	st := group.Stats()
	b.ReportMetric(float64(st.Appends)/float64(st.Commits), "records/commit")
}

// BenchmarkAppendSerial is one caller at a time: the latency of a durable
// append, where group commit cannot help.
func BenchmarkAppendSerial(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "serial.db"), Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for b.Loop() {
		if _, err := s.Append(context.Background(), KindRequest, []byte(`{"a":1}`)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPendingAck reads and acknowledges 500-record batches, the
// uplink's disk work per batch.
func BenchmarkPendingAck(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "p.db"), Config{MaxRecords: 1 << 30, MaxBytes: 1 << 40})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for b.Loop() {
		b.StopTimer()
		appendConcurrently(b, s, 500, 64)
		b.StartTimer()
		recs, err := s.Pending(500)
		if err != nil || len(recs) != 500 {
			b.Fatal(len(recs), err)
		}
		if err := s.Ack(recs[len(recs)-1].Seq); err != nil {
			b.Fatal(err)
		}
	}
}

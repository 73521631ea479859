package agent

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/phaseless/phaseless/agent/telemetry"
	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// MaxShadowShare bounds --shadow-share: shadow evaluation sends request text
// and the local answer off the device, so at most a quarter of the local
// answers may be sampled, whatever the fleet config says.
const MaxShadowShare = 0.25

// shadowTap samples locally answered requests for shadow evaluation: with
// probability share (decided by a hash of the request id, so a retried id
// is sampled the same way) the local answer is kept, and after it finished
// the request's messages and the answer go into the telemetry store as a
// fleetwire.ShadowRecord. The cloud re-runs it and grades the local answer
// against its own (cloud/fleet). Off (share 0) by default: today's
// telemetry otherwise carries features only, never text.
type shadowTap struct {
	next  llm.Generator
	share atomic.Uint64 // float64 bits; changed live by the fleet config
	store *telemetry.Store
	log   *slog.Logger

	ch      chan fleetwire.ShadowRecord
	done    sync.WaitGroup
	sampled *metrics.Counter
	dropped *metrics.Counter

	mu     sync.RWMutex // guards closed against sends racing close
	closed bool
}

var _ llm.Generator = (*shadowTap)(nil)

// shadowQueue bounds shadow records waiting for the store; beyond it they
// are dropped and counted (a sample, not a record anyone relies on).
const shadowQueue = 64

func newShadowTap(next llm.Generator, store *telemetry.Store, reg *metrics.Registry, log *slog.Logger, share float64) *shadowTap {
	s := &shadowTap{
		next: next, store: store, log: log, ch: make(chan fleetwire.ShadowRecord, shadowQueue),
		sampled: reg.Counter("phaseless_agent_shadow_sampled_total", "local answers sampled for shadow evaluation (their text goes to the cloud)"),
		dropped: reg.Counter("phaseless_agent_shadow_dropped_total", "shadow samples dropped because the queue to the telemetry store was full"),
	}
	s.setShare(share)
	s.done.Go(s.write)
	return s
}

func (s *shadowTap) setShare(v float64) { s.share.Store(math.Float64bits(v)) }

func (s *shadowTap) getShare() float64 { return math.Float64frombits(s.share.Load()) }

// sampledID reports whether request id falls in the sampled share.
func sampledID(id string, share float64) bool {
	if share <= 0 || id == "" {
		return false
	}
	h := sha256.Sum256([]byte("shadow\x00" + id))
	return float64(binary.BigEndian.Uint64(h[:8])>>11)/float64(1<<53) < share
}

// Generate implements llm.Generator: the local engine answers, and a
// sampled answer is kept.
func (s *shadowTap) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	if !sampledID(req.ID, s.getShare()) {
		return s.next.Generate(ctx, req, emit)
	}
	var answer strings.Builder
	fin, err := s.next.Generate(ctx, req, func(t llm.Token) error {
		answer.WriteString(t.Text)
		return emit(t)
	})
	if err != nil || answer.Len() == 0 {
		return fin, err
	}
	rec := fleetwire.ShadowRecord{TraceID: req.ID, Answer: answer.String(), MaxTokens: req.MaxTokens}
	for _, m := range req.Messages {
		rec.Messages = append(rec.Messages, fleetwire.ShadowMessage{Role: m.Role, Content: m.Content})
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return fin, err
	}
	select {
	case s.ch <- rec:
		s.sampled.Inc()
	default:
		s.dropped.Inc()
	}
	return fin, err
}

func (s *shadowTap) write() {
	for rec := range s.ch {
		data, _ := json.Marshal(rec)
		if _, err := s.store.Append(context.Background(), fleetwire.KindShadow, data); err != nil {
			s.log.Warn("shadow sample not stored", "err", err)
		}
	}
}

// close stores what is queued and stops the writer; safe twice.
func (s *shadowTap) close() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.ch)
	}
	s.mu.Unlock()
	s.done.Wait()
}

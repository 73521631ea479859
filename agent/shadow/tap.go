// Package shadow samples the device's locally answered requests for shadow
// evaluation: a sampled request's messages and the local answer go into the
// telemetry store, the cloud re-runs the request and grades the local answer
// against its own (cloud/fleet), and the grades label the next router's
// training data (phaselessctl model train --telemetry).
//
// How it fits: the agent puts a Tap in front of its local engine, so the
// dispatcher's local path runs through it, and the fleet config's
// shadow-share setting changes its share live (SetShare). The sample is
// drawn by request id whatever the route: a sampled request the cloud
// answered is also run on the local engine, off the request's path
// (ShadowCloud), so the sample with the router's scores is an unbiased
// sample of the device's traffic, which the fleet calibrates the device's
// threshold on (docs/predictor.md, "Per-device calibration").
package shadow

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

	"github.com/phaseless/phaseless/agent/route"
	"github.com/phaseless/phaseless/agent/telemetry"
	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/transport/fleetwire"
)

// MaxShare bounds --shadow-share: shadow evaluation sends request text
// and the local answer off the device, so at most a quarter of the local
// answers may be sampled, whatever the fleet config says.
const MaxShare = 0.25

// Tap samples locally answered requests for shadow evaluation: with
// probability share (decided by a hash of the request id, so a retried id
// is sampled the same way) the local answer is kept, and after it finished
// the request's messages and the answer go into the telemetry store as a
// fleetwire.ShadowRecord. The cloud re-runs it and grades the local answer
// against its own (cloud/fleet). Off (share 0) by default: today's
// telemetry otherwise carries features only, never text.
type Tap struct {
	next  llm.Generator
	share atomic.Uint64 // float64 bits; changed live by the fleet config
	// router names the router model in force (ShadowRecord.Router); nil
	// names none.
	router func() string
	store  *telemetry.Store
	log    *slog.Logger

	ch      chan fleetwire.ShadowRecord
	done    sync.WaitGroup
	sampled *metrics.Counter
	dropped *metrics.Counter

	mu     sync.RWMutex // guards closed against sends racing close
	closed bool

	// Cloud-routed samples run on the local engine one at a time, under
	// stop; busy says one is running (another sample is then skipped).
	busy    atomic.Bool
	stop    context.Context
	cancel  context.CancelFunc
	side    sync.WaitGroup
	skipped *metrics.Counter
}

var (
	_ llm.Generator  = (*Tap)(nil)
	_ route.Shadower = (*Tap)(nil)
)

// queueLen bounds shadow records waiting for the store; beyond it they
// are dropped and counted (a sample, not a record anyone relies on).
const queueLen = 64

// NewTap samples share (0..MaxShare) of next's answers into store, counting
// them in reg; router (nil: none) names the router model in force for each
// sample's ShadowRecord.Router. Close stops it.
func NewTap(next llm.Generator, store *telemetry.Store, reg *metrics.Registry, log *slog.Logger, share float64, router func() string) *Tap {
	s := &Tap{
		next: next, store: store, log: log, router: router, ch: make(chan fleetwire.ShadowRecord, queueLen),
		sampled: reg.Counter("phaseless_agent_shadow_sampled_total", "local answers sampled for shadow evaluation (their text goes to the cloud)"),
		dropped: reg.Counter("phaseless_agent_shadow_dropped_total", "shadow samples dropped because the queue to the telemetry store was full"),
		skipped: reg.Counter("phaseless_agent_shadow_cloud_skipped_total", "cloud-answered shadow samples not run locally because one was already running"),
	}
	s.stop, s.cancel = context.WithCancel(context.Background())
	s.SetShare(share)
	s.done.Go(s.write)
	return s
}

// SetShare changes the sampled share for the requests that start from now.
func (s *Tap) SetShare(v float64) { s.share.Store(math.Float64bits(v)) }

func (s *Tap) getShare() float64 { return math.Float64frombits(s.share.Load()) }

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
func (s *Tap) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	// The cloud re-runs chat only, and only whole local answers: a
	// continuation of a cloud answer (req.Continue) is half of one.
	if req.Raw || req.Continue != "" || !sampledID(req.ID, s.getShare()) {
		return s.next.Generate(ctx, req, emit)
	}
	router := s.routerNow() // the router just scored req: read before the answer, which a rollout may outlast
	var answer strings.Builder
	fin, err := s.next.Generate(ctx, req, func(t llm.Token) error {
		answer.WriteString(t.Text)
		return emit(t)
	})
	if err == nil {
		var prob *float64
		if p, ok := route.CloudProb(ctx); ok {
			prob = &p
		}
		s.keep(req, answer.String(), route.PathLocal, prob, router)
	}
	return fin, err
}

// ShadowCloud implements route.Shadower: a sampled request the cloud
// answered is run on the local engine in the background, so its local
// answer can be graded too. One runs at a time; the request's user never
// waits for it.
func (s *Tap) ShadowCloud(req *llm.Request, cloudProb float64) {
	if req.Raw || !sampledID(req.ID, s.getShare()) {
		return
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return
	}
	if !s.busy.CompareAndSwap(false, true) {
		s.skipped.Inc()
		return
	}
	router := s.routerNow()
	s.side.Go(func() {
		defer s.busy.Store(false)
		var answer strings.Builder
		if _, err := s.next.Generate(s.stop, req, func(t llm.Token) error { answer.WriteString(t.Text); return nil }); err == nil {
			s.keep(req, answer.String(), route.PathCloud, &cloudProb, router)
		}
	})
}

// routerNow is the router model in force, "" when the tap was given none.
func (s *Tap) routerNow() string {
	if s.router == nil {
		return ""
	}
	return s.router()
}

// keep queues the sample of req for the telemetry store.
func (s *Tap) keep(req *llm.Request, answer, path string, cloudProb *float64, router string) {
	if answer == "" {
		return
	}
	rec := fleetwire.ShadowRecord{TraceID: req.ID, Answer: answer, MaxTokens: req.MaxTokens, CloudProb: cloudProb, Path: path, Router: router}
	for _, m := range req.Messages {
		rec.Messages = append(rec.Messages, fleetwire.ShadowMessage{Role: m.Role, Content: m.Content})
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return
	}
	select {
	case s.ch <- rec:
		s.sampled.Inc()
	default:
		s.dropped.Inc()
	}
}

func (s *Tap) write() {
	for rec := range s.ch {
		data, _ := json.Marshal(rec)
		if _, err := s.store.Append(context.Background(), fleetwire.KindShadow, data); err != nil {
			s.log.Warn("shadow sample not stored", "err", err)
		}
	}
}

// Close stops a cloud-routed sample in progress, stores what is queued and
// stops the writer; safe twice.
func (s *Tap) Close() {
	s.mu.Lock()
	first := !s.closed
	s.closed = true // no sample is queued or started from now on
	s.mu.Unlock()
	s.cancel()
	s.side.Wait()
	if first {
		close(s.ch)
	}
	s.done.Wait()
}

package sim

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/phaseless/phaseless/cloud/admit"
	"github.com/phaseless/phaseless/cloud/place"
	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/worker"
	"github.com/phaseless/phaseless/llm"
)

// Placement in the simulated cluster is the coordinator's own: one
// place.Placer, built as phaseless-cloud builds it (the policy in force
// behind Config.Layers), decides every request from the same View the
// coordinator gives it (worker.FillSignals, each engine's prefix probe, the
// breaker), and a worker that refuses a request sends it where the
// Placer's Fallback says. The simulator adds nothing of its own between a
// request and its worker.

// Outage is a worker's server failing at From and refusing every new
// request until To, as a live worker whose engine died and answers 503
// while it restarts. At From everything its engine holds is lost (Engine.
// Fail: the sequences and the KV cache), and the coordinator does with
// each request what its generate does when a worker's stream ends in a
// 503-like error (cloud/coordinator: fallbackEligible): one that has not
// streamed its first token runs once more where the Placer's Fallback
// says, if its tenant's fallbacks allow, else fails; one that has is
// lost, the error reaching its client after the tokens it had. A request
// its batcher releases to it during the outage fails before its first
// token in the same way, a split's KV handoff into it is lost, and its
// probe fails, so from the first probe inside the outage the coordinator
// sees it unhealthy. After To it serves again with an empty cache. Times
// are the run's virtual time (Sweep scales them with the trace).
type Outage struct {
	Worker   string // a WorkerInfo.Name, e.g. h100-0
	From, To time.Duration
}

// ParseOutage reads WORKER@FROM+DURATION, e.g. h100-0@60s+30s.
func ParseOutage(s string) (Outage, error) {
	name, span, ok := strings.Cut(s, "@")
	from, dur, ok2 := strings.Cut(span, "+")
	if !ok || !ok2 || name == "" {
		return Outage{}, fmt.Errorf("outage %q: want WORKER@FROM+DURATION, e.g. h100-0@60s+30s", s)
	}
	f, err := time.ParseDuration(from)
	if err != nil {
		return Outage{}, fmt.Errorf("outage %q: %w", s, err)
	}
	d, err := time.ParseDuration(dur)
	if err != nil {
		return Outage{}, fmt.Errorf("outage %q: %w", s, err)
	}
	if f < 0 || d <= 0 {
		return Outage{}, fmt.Errorf("outage %q: want FROM ≥ 0 and DURATION > 0", s)
	}
	return Outage{Worker: name, From: f, To: f + d}, nil
}

// refusing reports whether w is in an outage at now.
func (w *simWorker) refusing(now time.Duration) bool {
	for _, o := range w.outages {
		if now >= o.From && now < o.To {
			return true
		}
	}
	return false
}

// Placement is one call of the Placer in a run, as Config.Placed sees it:
// what it was given, and what it decided. The coordinator's
// TestOnePlacementPath replays these through a Coordinator.
type Placement struct {
	Request int // the request's index in the trace
	// Place is the request as the Placer read it (Sig a copy).
	Place place.Request
	// View is the workers as it saw them, Snap a copy taken before the
	// Placer changed it for the decision.
	View place.View
	// Failed is the worker that refused the request, for a fallback; -1
	// for a first placement.
	Failed   int
	Decision place.Decision
	Err      error
}

// enablePlacement builds the Placer, as the coordinator does, and gives
// each worker its outages.
func (c *Cluster) enablePlacement() error {
	pc := place.Config{Scheduler: c.cfg.Scheduler, Policy: c.cfg.Policy, Layers: c.cfg.Layers,
		Options: sched.Options{SLOTTFT: c.cfg.SLOTTFT, SLOTPOT: c.cfg.SLOTPOT, Learned: c.cfg.Learned}}
	if c.cfg.Hook != nil {
		pc.Hook = func(r *place.Request, s *sched.Snapshot, d *sched.Decision) { c.cfg.Hook(c.placing, r.Sig, s, d) }
	}
	var err error
	if c.placer, err = place.New(pc); err != nil {
		return err
	}
	if err := c.placer.Check(&place.Request{Hints: c.cfg.Hints}); err != nil {
		return fmt.Errorf("sim.Config.Hints: %w", err)
	}
	for range c.workers {
		c.infos = append(c.infos, place.Worker{Model: c.cfg.Model.Name})
	}
	for _, o := range c.cfg.Outages {
		i := slices.IndexFunc(c.workers, func(w *simWorker) bool { return w.info.Name == o.Worker })
		switch {
		case i < 0:
			return fmt.Errorf("sim.Config.Outages: no worker %q", o.Worker)
		case o.From < 0 || o.To <= o.From:
			return fmt.Errorf("sim.Config.Outages: %s from %v to %v", o.Worker, o.From, o.To)
		}
		c.workers[i].outages = append(c.workers[i].outages, o)
	}
	return nil
}

// policyName is the policy in force, as the results name it.
func (c *Cluster) policyName() string {
	switch {
	case c.cfg.Policy != nil:
		return c.cfg.Policy.Name()
	case c.cfg.Scheduler != "":
		return c.cfg.Scheduler
	}
	return sched.NameScheduler
}

// view is the workers as the coordinator's decision sees them: every
// worker's signals, as worker.Set.Snapshot fills them (load as of the last
// probe, in-flight counts live, the engine's own prefix probe for hashes),
// and the breaker's state.
func (c *Cluster) view(hashes []uint64) place.View {
	now := c.clk.Now()
	for i, w := range c.workers {
		s := &c.snap.Workers[i]
		worker.FillSignals(s, w.info.Role, w.healthy, w.inflight, w.batcher.Waiting(), w.capacity(), &w.load, w.burst.Sigma(now))
		s.PrefixBlocks = w.eng.CachedPrefixBlocks(hashes)
		s.PendingPrefill, s.Prefilling, s.Class = w.pending, w.prefills, w.class
	}
	c.snap.Now = now
	return place.View{Snap: &c.snap, Workers: c.infos, BreakerOpen: c.breaker.Open()}
}

// record returns what tells Config.Placed of a decision on v, if it is set;
// failed is the refusing worker of a fallback, else -1.
func (c *Cluster) record(f *flight, v place.View, failed int) func(place.Decision, error) {
	if c.cfg.Placed == nil {
		return func(place.Decision, error) {}
	}
	p := Placement{Request: f.i, Place: f.req, View: v, Failed: failed}
	sig := *f.req.Sig
	p.Place.Sig = &sig
	snap := *v.Snap
	snap.Workers = slices.Clone(v.Snap.Workers)
	p.View.Snap = &snap
	return func(d place.Decision, err error) {
		p.Decision, p.Err = d, err
		c.cfg.Placed(p)
	}
}

// refused is a request its worker refused before its first token (an
// outage), as a live worker's 503: the coordinator runs it once more where
// the Placer's Fallback says, if the tenant's fallbacks allow (cloud/admit:
// 2 per 10 minutes); otherwise it fails, and the breaker counts a server
// error. A split gives up its decode worker first, as a live split that
// failed runs whole.
func (c *Cluster) refused(f *flight) {
	failed := slices.Index(c.workers, f.w)
	c.prefilled(f)
	if f.split {
		f.dw.inflight--
		f.dw.batcher.Kick()
		f.split, f.dw = false, nil
		o := &c.out[f.i]
		o.Split, o.DecodeWorker = false, 0
	}
	if !f.fellBack && c.admitter.AllowFallback(context.Background(), f.tenant) {
		v := c.view(f.sig.BlockHashes)
		rec := c.record(f, v, failed)
		d, err := c.placer.Fallback(&f.req, v, failed)
		rec(d, err)
		if err == nil {
			f.fellBack = true
			c.out[f.i].Fallback = true
			c.assign(f, d.Decision)
			return
		}
	}
	f.ticket.Release()
	c.admitter.Refund(context.Background(), f.tenant, f.cost, admit.Bucket{})
	c.breaker.Record(true, 0)
	c.refuse(f, StatusFailed)
}

// fail is w's server dying (an Outage's From): its engine's sequences
// are lost, a step in flight with them, and each request meets the
// coordinator's answer to a failed stream (workerFailed).
func (c *Cluster) fail(w *simWorker) {
	w.gen++
	w.stepping = false
	for _, s := range w.eng.Fail() {
		f := s.User.(*flight)
		if f.warm {
			c.warmed(f) // a prefetch warm-up just ends
			continue
		}
		c.workerFailed(f)
	}
}

// workerFailed is f's worker failing under it, as the coordinator's
// generate takes a 503-like error from a worker's stream: before the first
// token it runs f once more where the Placer's Fallback says (refused),
// after it the request ends in that error.
func (c *Cluster) workerFailed(f *flight) {
	if f.tokens > 0 {
		c.finish(f, StatusLost)
		return
	}
	f.w.inflight--
	f.w.batcher.Kick()
	f.seq = Seq{Prompt: f.seq.Prompt, MaxOutput: f.seq.MaxOutput, Hashes: f.seq.Hashes, User: f,
		PinBlocks: f.seq.PinBlocks, PinTTL: f.seq.PinTTL, Tenant: f.seq.Tenant}
	c.refused(f)
}

// blockTurn is how a hash_id reads in a request's made-up conversation,
// prefixTurn how its shared prefix (id/tokens) does.
const blockTurn, prefixTurn = "b", "p"

// messages are request i's conversation as the placement layers read it
// (semantic grouping and prefetch fingerprint it). A trace has no text, so
// a shared prefix is a system turn naming it, each of its 512-token
// hash_ids a turn naming it, and the rest of the prompt, its own, one last
// user turn naming the request: requests that share a prefix or prefix
// blocks share turns, as conversations that share a system prompt and
// earlier turns do, and prefetch's shared prefix (the turns before the
// last) is the shared blocks.
func messages(i int, r *Request) []llm.Message {
	msgs := make([]llm.Message, 0, len(r.Blocks)+2)
	if r.PrefixLen > 0 {
		msgs = append(msgs, llm.Message{Role: "system", Content: prefixTurn + strconv.Itoa(r.PrefixID) + "/" + strconv.Itoa(r.PrefixLen)})
	}
	for _, b := range r.Blocks {
		msgs = append(msgs, llm.Message{Role: "user", Content: blockTurn + strconv.Itoa(b)})
	}
	return append(msgs, llm.Message{Role: "user", Content: "r" + strconv.Itoa(i)})
}

// turnPrefix reads back the shared prefix and the hash_ids of a prefix of
// messages' turns: the request those turns are the start of.
func turnPrefix(msgs []llm.Message) Request {
	var r Request
	if len(msgs) > 0 {
		if p, ok := strings.CutPrefix(msgs[0].Content, prefixTurn); ok {
			id, n, _ := strings.Cut(p, "/")
			pid, err1 := strconv.Atoi(id)
			pn, err2 := strconv.Atoi(n)
			if err1 == nil && err2 == nil && pn > 0 {
				r.PrefixID, r.PrefixLen = pid, pn
				msgs = msgs[1:]
			}
		}
	}
	for _, m := range msgs {
		id, ok := strings.CutPrefix(m.Content, blockTurn)
		b, err := strconv.Atoi(id)
		if !ok || err != nil {
			break
		}
		r.Blocks = append(r.Blocks, b)
	}
	return r
}

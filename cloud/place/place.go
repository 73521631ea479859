package place

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/phaseless/phaseless/cloud/prefetch"
	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/semantic"
	"github.com/phaseless/phaseless/llm"
)

// Config is what a Placer is built from. The zero value places with the
// project's default policy behind the default layers.
type Config struct {
	// Scheduler names the policy in force (sched.Names; phaseless-cloud
	// --scheduler); "" is sched.NameScheduler, the project's default.
	Scheduler string
	// Policy, when set, is the policy in force instead of Scheduler's
	// (tests, training, embedders with a policy of their own).
	Policy sched.Policy
	// Options configure the policies built by name, the overrides' too.
	Options sched.Options
	// AllowOverride honours Request.Hints.Policy (x-phaseless-policy), so
	// one coordinator serves the replay's several policies (--dev only).
	AllowOverride bool
	Layers        Layers
	Affinity      sched.AffinityConfig
	Group         semantic.GroupConfig
	Prefetch      prefetch.Config
	// Hook, when set, may change what the policy in force decided, before
	// Place checks it: training forces resource combinations on sampled
	// requests with it (cloud/sim/learn). Nothing live sets it.
	Hook func(r *Request, s *sched.Snapshot, d *sched.Decision)
}

// Placer is the per-request placement decision (doc.go). It is safe for
// concurrent use.
type Placer struct {
	cfg    Config
	policy sched.Policy // in force: Scheduler's or Policy, behind affinity unless off
	// overrides are the policies a request may name, by name; nil unless
	// AllowOverride.
	overrides map[string]sched.Policy
	groups    *semantic.Grouper
	model     *prefetch.Model
}

// New builds the policy in force and, with AllowOverride, every policy a
// request may name.
func New(cfg Config) (*Placer, error) {
	p := &Placer{cfg: cfg, policy: cfg.Policy}
	var err error
	if p.policy == nil {
		if p.policy, err = sched.New(cfg.Scheduler, cfg.Options); err != nil {
			return nil, err
		}
	}
	if !cfg.Layers.NoAffinity {
		if p.policy, err = sched.NewAffinity(p.policy, cfg.Affinity); err != nil {
			return nil, err
		}
	}
	if p.groups, err = semantic.NewGrouper(cfg.Group); err != nil {
		return nil, err
	}
	if p.model, err = prefetch.New(cfg.Prefetch); err != nil {
		return nil, err
	}
	if cfg.AllowOverride {
		p.overrides = map[string]sched.Policy{}
		for _, name := range sched.Names() {
			if p.overrides[name], err = sched.New(name, cfg.Options); err != nil {
				return nil, err
			}
		}
		p.overrides[sched.NameScheduler] = p.policy
		if p.overrides[sched.NameDisaggregated], err = sched.NewDisaggregated(); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Policy is the policy in force, as Place runs it (behind affinity unless
// that layer is off).
func (p *Placer) Policy() sched.Policy { return p.policy }

// Layers are the prompt-caching layers the Placer runs.
func (p *Placer) Layers() Layers { return p.cfg.Layers }

// GroupStats are semantic grouping's counters (its metrics).
func (p *Placer) GroupStats() semantic.GroupStats { return p.groups.Stats() }

// Request is what Place reads about a request.
type Request struct {
	// Sig is the request's measured signals, which the policies read.
	Sig *sched.Request
	// Model is the model the request names; "" and "auto" let any worker
	// take it.
	Model  string
	Tenant string
	Hints  llm.Hints
	// Messages are the conversation, which semantic grouping and prefetch
	// fingerprint; read only when one of them is on for the request.
	Messages []llm.Message
	// MaxOutput is the most tokens it asks for: a split needs two (the
	// prefill samples the first).
	MaxOutput int
	// CarriesKV reports that a remote prefill worker can render the
	// request's prompt (worker.KVCarries); without it a split keeps its
	// prefill off remote workers.
	CarriesKV bool
	// Pinned is where the replicas' pinned-prefix directory says part of
	// the prompt lives; Blocks 0 when it says nothing.
	Pinned Pin

	fp   semantic.Fingerprint // in Hints.SemanticMode, once fingerprinted
	fpOK bool
}

// Pin is a directory answer: worker Worker holds the prompt's first Blocks
// blocks pinned.
type Pin struct {
	Worker, Blocks int
}

// View is the workers as a decision sees them.
type View struct {
	// Snap is every worker's signals, filled by the driver for the
	// request's block hashes, with the time it was taken. Place changes it
	// (model pins, the directory's prefix) for this decision.
	Snap *sched.Snapshot
	// Workers says, per index of Snap.Workers, what the signals do not;
	// nil when no worker declares a model, renders for itself or shares
	// this process.
	Workers []Worker
	// BreakerOpen runs FIFO (cloud/admit's circuit breaker).
	BreakerOpen bool
}

// Worker is what a worker is, beside its signals.
type Worker struct {
	Model string // the model it serves
	// Remote: its engine renders prompts itself, so a split's prefill can
	// run there only for a request that carries its KV (CarriesKV).
	Remote bool
	// Builtin: it shares this process's KV handoff store (Resume).
	Builtin bool
}

// Path is the step of Place that made a decision.
type Path uint8

// Paths.
const (
	PathPolicy   Path = iota // the policy in force (behind affinity unless off)
	PathGroup                // joined an open semantic group
	PathOverride             // the policy the request named (x-phaseless-policy)
	PathBreaker              // FIFO while the circuit breaker is open
	PathFallback             // the conservative pool after an overload (Fallback)
	PathResume               // a parked KV handoff's built-in worker (Resume)
)

var pathNames = [...]string{"policy", "group", "override", "breaker", "fallback", "resume"}

func (p Path) String() string {
	if int(p) < len(pathNames) {
		return pathNames[p]
	}
	return fmt.Sprintf("path(%d)", p)
}

// Decision is where a request runs, and how Place came to it.
type Decision struct {
	sched.Decision
	Path Path
	// Group is what semantic grouping did with the request (NoGroup when
	// it took no part): it may have joined a group whose worker then had
	// no room (Path is not PathGroup).
	Group semantic.JoinResult
}

// ErrUnknownPolicy is Check's error for a policy no override names.
var ErrUnknownPolicy = errors.New("unknown scheduler policy")

// Check refuses a request whose hints this Placer would ignore: a policy
// it does not know, a layer's header while the layer is off for the
// request (DESIGN.md §4: no header is accepted and then ignored).
func (p *Placer) Check(r *Request) error {
	h := &r.Hints
	switch {
	case h.Policy != "" && !known(h.Policy):
		return llm.Errorf(llm.CodeInvalid, "%v %q (%s)", ErrUnknownPolicy, h.Policy, strings.Join(append(sched.Names(), sched.NameDisaggregated), ", "))
	case h.Prefetch != "" && h.Prefetch != string(prefetch.None) && !p.cfg.Layers.Prefetch:
		return llm.Errorf(llm.CodeInvalid, "header x-prefetch-hint: prefetch is off on this coordinator (--cache-layers)")
	case h.SemanticMode != "" && !p.cfg.Layers.Prefetch && !p.grouping(r):
		return llm.Errorf(llm.CodeInvalid, "header x-semantic-mode: neither semantic grouping (x-batch-threshold, --cache-layers semantic) nor prefetch is on for this request")
	}
	return nil
}

func known(policy string) bool {
	return policy == sched.NameDisaggregated || slices.Contains(sched.Names(), policy)
}

// grouping reports whether r takes part in semantic grouping.
func (p *Placer) grouping(r *Request) bool {
	return p.cfg.Layers.Semantic || r.Hints.BatchThreshold > 0
}

// Fingerprints reports whether a layer reads r's Messages: semantic
// grouping or prefetch. A driver that makes up messages (the simulator)
// makes them only then.
func (p *Placer) Fingerprints(r *Request) bool {
	return p.grouping(r) || p.cfg.Layers.Prefetch
}

func (r *Request) fingerprint() *semantic.Fingerprint {
	if !r.fpOK {
		r.fp, r.fpOK = semantic.Of(r.Messages, r.Hints.SemanticMode), true
	}
	return &r.fp
}

// Place decides where r runs (doc.go has the order).
func (p *Placer) Place(r *Request, v View) (Decision, error) {
	s := v.Snap
	pinModel(r.Model, v)
	if pin := r.Pinned; pin.Blocks > 0 && pin.Worker >= 0 && pin.Worker < len(s.Workers) {
		// Another replica may have placed the conversation, and a remote
		// engine's cache cannot be probed.
		w := &s.Workers[pin.Worker]
		w.PrefixBlocks = max(w.PrefixBlocks, pin.Blocks)
	}
	var d Decision
	var err error
	switch pol, ok := p.overrides[r.Hints.Policy]; {
	case ok && r.Hints.Policy != "":
		// An explicit policy (--dev experiments, the replay's comparison)
		// runs as asked, even with the breaker open, or the comparison
		// would measure FIFO under several names.
		d.Path = PathOverride
		d.Decision, err = pol.Decide(r.Sig, s)
	case v.BreakerOpen:
		d.Path = PathBreaker
		d.Decision, err = sched.FIFO(r.Sig, s)
	default:
		d, err = p.placeLayered(r, s)
	}
	if err != nil {
		return d, err
	}
	if d.Worker < 0 || d.Worker >= len(s.Workers) {
		return d, fmt.Errorf("place: %s chose worker %d of %d", d.Path, d.Worker, len(s.Workers))
	}
	if d.Split && !splittable(r, v, &d.Decision) {
		d.Split, d.DecodeWorker = false, 0
	}
	return d, nil
}

// placeLayered is Place with the breaker closed and no override: a
// semantic group with room, else the policy in force.
func (p *Placer) placeLayered(r *Request, s *sched.Snapshot) (Decision, error) {
	grouping := p.grouping(r)
	var d Decision
	if grouping {
		w, res := p.groups.Join(s.Now, r.fingerprint(), firstBlock(r.Sig.BlockHashes), r.Hints.BatchThreshold)
		d.Group = res
		if res >= semantic.Joined && w < len(s.Workers) && s.Workers[w].Healthy && s.Workers[w].Load() < 1 {
			d.Path, d.Decision = PathGroup, sched.Place(r.Sig, s, w, sched.ReasonPrefix)
			return d, nil
		}
	}
	var err error
	d.Path = PathPolicy
	if d.Decision, err = p.policy.Decide(r.Sig, s); err != nil {
		return d, err
	}
	if p.cfg.Hook != nil {
		// A copy: handing the hook d itself would move d to the heap on
		// every decision, hook or not.
		hooked := d.Decision
		p.cfg.Hook(r, s, &hooked)
		d.Decision = hooked
	}
	if grouping && d.Worker >= 0 && d.Worker < len(s.Workers) {
		p.groups.Open(s.Now, r.fingerprint(), firstBlock(r.Sig.BlockHashes), d.Worker)
	}
	return d, nil
}

// Fallback places r, whose attempt on worker failed with an overload
// before its first token: the least loaded conservative worker, else the
// least loaded other one, among those serving its model (DESIGN.md §5).
// The driver decides whether the tenant may fall back (cloud/admit).
func (p *Placer) Fallback(r *Request, v View, failed int) (Decision, error) {
	pinModel(r.Model, v)
	d, err := sched.Fallback(r.Sig, v.Snap, failed)
	return Decision{Decision: d, Path: PathFallback}, err
}

// Resume places a request that names a KV handoff parked in this process
// (this coordinator serves as another's decode worker): on the least loaded
// healthy built-in worker, which resumes it from the store they share.
func (p *Placer) Resume(v View) (Decision, error) {
	s := v.Snap
	best := -1
	for i := range s.Workers {
		if i >= len(v.Workers) || !v.Workers[i].Builtin || !s.Workers[i].Healthy {
			continue
		}
		if best < 0 || s.Workers[i].Load() < s.Workers[best].Load() {
			best = i
		}
	}
	if best < 0 {
		return Decision{}, sched.ErrNoWorker
	}
	d := sched.Decision{Worker: best, Pool: s.Workers[best].Role, Reason: sched.ReasonLeastLoad, Policy: sched.PolicyLeastLoaded}
	return Decision{Decision: d, Path: PathResume}, nil
}

// pinModel takes the workers that do not serve model out of the view, so
// every policy (and the fallback) places a request that names a model only
// where that model runs. "auto" leaves the view as it is.
func pinModel(model string, v View) {
	if model == "" || model == "auto" {
		return
	}
	for i := range v.Snap.Workers {
		if i >= len(v.Workers) || v.Workers[i].Model != model {
			v.Snap.Workers[i].Healthy = false
		}
	}
}

// splittable reports whether d's split can run: another worker decodes, a
// token is left to decode after the prefill's, and a remote prefill worker
// can render the prompt. Otherwise the prefill worker runs it whole.
func splittable(r *Request, v View, d *sched.Decision) bool {
	if d.DecodeWorker == d.Worker || d.DecodeWorker < 0 || d.DecodeWorker >= len(v.Snap.Workers) || r.MaxOutput < 2 {
		return false
	}
	return d.Worker >= len(v.Workers) || !v.Workers[d.Worker].Remote || r.CarriesKV
}

func firstBlock(hashes []uint64) uint64 {
	if len(hashes) == 0 {
		return 0
	}
	return hashes[0]
}

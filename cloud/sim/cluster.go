package sim

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/phaseless/phaseless/cloud/admit"
	"github.com/phaseless/phaseless/cloud/affinity"
	"github.com/phaseless/phaseless/cloud/batch"
	"github.com/phaseless/phaseless/cloud/place"
	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/worker"
	"github.com/phaseless/phaseless/llm"
)

// Request is one request of a workload (a trace row).
type Request struct {
	At     time.Duration // arrival
	Input  int           // prompt tokens
	Output int           // tokens generated (the request's max_tokens: it runs to the end)
	// Blocks are Mooncake hash_ids: equal ids are equal 512-token prefix
	// blocks. Without them every prompt is unique.
	Blocks []int
	// PrefixLen leading prompt tokens are a prefix shared by every
	// request with the same PrefixID (a system prompt, tool definitions);
	// where it overlaps Blocks it takes precedence. 0 = no shared prefix.
	PrefixID, PrefixLen int
	Tenant              string // "" = one anonymous tenant, as a trace without keys
}

// Pool is a group of identical GPUs with one scheduling role.
type Pool struct {
	GPU   GPU
	Count int // GPUs (each worker takes TP of them)
	Role  sched.Role
	// Deployment, when set, is the workers' physics as given (a calibrated
	// CPU engine, FitCPU) instead of one sized from GPU and Config.Model.
	Deployment *Deployment
}

// CPU names a pool of built-in CPU engines in a cluster spec ("2xcpu"):
// its physics is not a datasheet but FitCPU's fit of lm bench figures,
// which the caller puts in Pool.Deployment.
const CPU = "cpu"

// ParseCluster reads "8xh100[:ROLE],8xl4[:ROLE]". A pool without a role
// gets one: a single pool cycles its workers through decode-heavy,
// prefill-heavy and stream as phaseless-cloud does with unnamed workers
// (ok reports which pools named none); several pools put the pool with the
// most FLOPS on prefill-heavy and the rest on decode-heavy (DESIGN.md §5:
// prefill on big GPUs, decode on cheap ones).
func ParseCluster(spec string) (pools []Pool, cycle bool, err error) {
	named := 0
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		head, role, hasRole := strings.Cut(part, ":")
		n, gname, ok := strings.Cut(strings.ToLower(head), "x")
		count, cerr := strconv.Atoi(n)
		if !ok || cerr != nil || count < 1 || count > 100000 {
			return nil, false, fmt.Errorf("cluster %q: %q is not COUNTxGPU[:ROLE]", spec, part)
		}
		g, err := LookupGPU(gname)
		if gname == CPU {
			g, err = GPU{Name: CPU}, nil // its Deployment comes from FitCPU
		}
		if err != nil {
			return nil, false, fmt.Errorf("cluster %q: %w", spec, err)
		}
		p := Pool{GPU: g, Count: count}
		if hasRole {
			if p.Role, err = sched.ParseRole(role); err != nil {
				return nil, false, fmt.Errorf("cluster %q: %w", spec, err)
			}
			named++
		}
		pools = append(pools, p)
	}
	switch {
	case named == len(pools):
	case named > 0:
		return nil, false, fmt.Errorf("cluster %q: name a role for every pool or for none", spec)
	case len(pools) == 1:
		cycle = true
	default:
		best := 0
		for i, p := range pools {
			if p.GPU.PeakFLOPS > pools[best].GPU.PeakFLOPS {
				best = i
			}
		}
		for i := range pools {
			pools[i].Role = sched.RoleDecode
		}
		pools[best].Role = sched.RolePrefill
	}
	return pools, cycle, nil
}

// roleCycle is phaseless-cloud's assignment of unnamed workers.
var roleCycle = []sched.Role{sched.RoleDecode, sched.RolePrefill, sched.RoleStream}

// Config is one simulated cluster and the coordinator in front of it.
type Config struct {
	Pools []Pool
	// CycleRoles gives the workers roles in turn (decode-heavy,
	// prefill-heavy, stream) instead of their pool's Role.
	CycleRoles bool
	Model      Model
	TP         int // GPUs per worker; 0 = the smallest that fits
	Engine     EngineConfig
	// Scheduler names the policy in force (sched.Names; phaseless-cloud
	// --scheduler) when Policy is nil; "" is the project's default.
	Scheduler string
	// Policy, when set, is the policy in force instead of Scheduler's.
	Policy sched.Policy
	// Learned is the learned policy's classifier when Scheduler names it;
	// nil = the shipped one.
	Learned *sched.LearnedModel
	// Layers are the coordinator's prompt-caching layers in front of the
	// policy (phaseless-cloud --cache-layers); the zero value is the
	// coordinator's default, affinity on. The Placer (cloud/place) runs
	// them and the policy as the coordinator does.
	Layers place.Layers
	// Breaker is the coordinator's circuit breaker (zero: its defaults, as
	// phaseless-cloud runs it), on the virtual clock: while it is open the
	// Placer places FIFO and the fair queue serves in arrival order.
	Breaker admit.BreakerConfig
	// Hints are what every request asks of the coordinator's layers, as a
	// client's x-semantic-mode, x-batch-threshold and x-prefetch-hint;
	// one the layers would ignore is refused (place.Placer.Check).
	Hints llm.Hints
	// Outages fail workers' servers and make them refuse new requests for
	// a while (place.go): what they ran is lost or placed again, as the
	// coordinator does, and the fallback and the breaker act on it.
	Outages []Outage
	// Placed, when set, is told every decision the Placer made and what it
	// was given (place.go).
	Placed func(Placement)
	// SLOTTFT and SLOTPOT define a request that met its SLO. Defaults 2 s
	// and 100 ms.
	SLOTTFT, SLOTPOT time.Duration
	// ProbeInterval is how often worker load is re-read, as worker.Set
	// does. Default 500 ms.
	ProbeInterval time.Duration
	// Batch configures each worker's batcher (cloud/batch); zero = its
	// defaults.
	Batch batch.Config
	// Fair is the coordinator's fair queue; Slots 0 = twice the workers'
	// capacity, as phaseless-cloud sets --max-running.
	Fair admit.FairConfig
	// Budget is every tenant's token bucket; zero = unlimited (a trace
	// replay is not a budget test).
	Budget admit.Bucket
	// EntropyBits and CharsPerToken describe the prompts the scheduler
	// measures (the trace has lengths, not text). Defaults 4.1 bits/char,
	// what `phaselessctl replay`'s English word prompts measure, and 4
	// characters per token (Llama 3's tokenizer on English).
	EntropyBits, CharsPerToken float64
	// KVLink, when set, is the link every disaggregated request's KV
	// blocks cross; nil = defaultLink between the two workers' pools.
	KVLink *Link
	// Prices sets $ per GPU-hour by GPU name for the classes the
	// scheduler prices (sched.Class) and each request's Outcome.Cost; a
	// GPU not in it costs its profile's PricePerHour.
	Prices Prices
	// Hook, when set, is called after the policy in force decided, with
	// the request's index, and may change the decision
	// (place.Config.Hook): training forces resource combinations on
	// sampled requests with it (cloud/sim/learn).
	Hook func(i int, req *sched.Request, s *sched.Snapshot, d *sched.Decision)
	// Cache is prompt caching: TTL pinning (cache.go).
	Cache CacheConfig
	// MaxConcurrency, when positive, is a closed-loop client: at most this
	// many requests in flight, the next sent when one ends (at its trace
	// time if that is later), as vLLM's `bench serve --max-concurrency`
	// drives a server. A request's arrival is when it was sent.
	MaxConcurrency int
}

func (c *Config) fill() {
	c.Cache.fill()
	if c.SLOTTFT == 0 {
		c.SLOTTFT = 2 * time.Second
	}
	if c.SLOTPOT == 0 {
		c.SLOTPOT = 100 * time.Millisecond
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = 500 * time.Millisecond
	}
	if c.Budget == (admit.Bucket{}) {
		c.Budget = admit.Bucket{Burst: 1 << 60, PerSecond: 1 << 50}
	}
	if c.EntropyBits == 0 {
		c.EntropyBits = 4.1
	}
	if c.CharsPerToken == 0 {
		c.CharsPerToken = 4
	}
}

// Validate names the first bad field.
func (c *Config) Validate() error {
	switch {
	case len(c.Pools) == 0:
		return errors.New("sim.Config.Pools: empty")
	case c.SLOTTFT < 0 || c.SLOTPOT < 0 || c.ProbeInterval < 0:
		return errors.New("sim.Config.SLOTTFT/SLOTPOT/ProbeInterval: must be > 0")
	case c.EntropyBits < 0 || c.EntropyBits > 8 || c.CharsPerToken < 0:
		return errors.New("sim.Config.EntropyBits/CharsPerToken: out of range")
	case c.MaxConcurrency < 0:
		return errors.New("sim.Config.MaxConcurrency: negative")
	}
	return c.Cache.validate()
}

// Status is how a request ended.
type Status uint8

// Statuses.
const (
	StatusOK       Status = iota
	StatusTooLong         // rejected by the engine: over the model length
	StatusBudget          // refused by the token budget
	StatusQueue           // refused: the coordinator's queue was full
	StatusNoWorker        // the policy found no worker
	StatusFailed          // its worker refused it (an outage) and no fallback ran it
	StatusLost            // its worker failed after its first token (an outage): the stream ended in an error
)

// Outcome is one request's fate.
type Outcome struct {
	Arrival    time.Duration
	TTFT, TPOT time.Duration // TPOT: mean gap after the first token
	Done       time.Duration // when its last token came (or it was refused)
	Prompt     int
	Output     int // tokens generated
	Cached     int // prompt tokens from the prefix cache
	HostCached int // of Cached, copied back from the host KV tier
	Worker     int
	Status     Status
	Finished   int // how many times it finished: must be 1
	// Fallback reports a request its first worker refused (an outage),
	// run again on the worker the Placer's fallback chose (Worker).
	Fallback bool
	// Split reports a disaggregated request: prefilled on Worker, decoded
	// on DecodeWorker after a KV transfer of Transfer.
	Split        bool
	DecodeWorker int
	Transfer     time.Duration
	// Cost is the $ of GPU time spent on it: each step's duration × the
	// worker's price, shared among the step's sequences by their tokens.
	Cost float64
	// ITLs are the gaps between its consecutive tokens (Output − 1 of
	// them), as vLLM's benchmark_serving measures inter-token latency:
	// its ITL percentiles pool every gap of every request.
	ITLs []time.Duration
}

// E2E is the request's end-to-end latency: arrival to its last token.
func (o *Outcome) E2E() time.Duration { return o.Done - o.Arrival }

// WorkerInfo describes one simulated worker.
type WorkerInfo struct {
	Name string
	Pool int
	Role sched.Role
	GPUs int
	Busy time.Duration
	Stat EngineStats
}

// Result is a run's raw outcome; Summarize turns it into the table's row.
type Result struct {
	Policy   string
	Outcomes []Outcome
	Makespan time.Duration // first arrival to the last token
	Events   uint64
	Workers  []WorkerInfo
	Pools    []Pool
	// MaxKVUsed is the most blocks any engine had in use at once, and
	// KVBlocks their capacity (conservation: never more).
	MaxKVUsed, KVBlocks int
	// BreakerTrips is how many times the circuit breaker opened;
	// GroupJoins how many requests the Placer placed with a semantic
	// group; Warmups how many prefetch warm-ups ran.
	BreakerTrips, GroupJoins, Warmups int
}

type simWorker struct {
	info     WorkerInfo
	eng      *Engine
	batcher  *batch.Batcher
	burst    *worker.BurstMeter
	inflight int
	load     worker.Load
	lastPre  uint64
	stepping bool
	kicked   bool
	class    sched.Class
	pool     *Pool
	pending  int           // uncached prompt tokens placed here before their first token
	prefills int           // the requests those tokens belong to
	nicFree  time.Duration // when its NIC has received the KV transfers already under way
	dollarsS float64       // $ per second of stepping
	healthy  bool          // as last probed: false through an outage (place.go)
	outages  []Outage      // this worker's
	gen      int           // its server's incarnation: an outage's failure ends one (place.go)
}

type flight struct {
	i        int
	sig      sched.Request
	req      place.Request // what the Placer reads; its Sig is &sig
	tenant   string
	cost     int64
	ticket   *admit.Ticket
	seq      Seq
	pre      Seq // the prefill half of a split request
	split    bool
	dw       *simWorker // the decode worker of a split request
	pw       *simWorker // where its prefill is pending
	pend     int        // the pending prefill tokens counted on pw
	w        *simWorker
	first    time.Duration
	last     time.Duration
	tokens   int
	gaps     []time.Duration // between consecutive tokens (Outcome.ITLs)
	dollars  float64
	warm     bool          // a prefetch warm-up, not a request (prefetch.go)
	fellBack bool          // placed by the Placer's fallback after a refusal
	started  time.Duration // when its worker's engine took it
}

// Cluster is one simulation: build it with New, Run it once.
type Cluster struct {
	cfg       Config
	dep       *Deployment
	q         eventQueue
	clk       clock
	workers   []*simWorker
	admitter  *admit.Admitter
	fair      *admit.Fair
	breaker   *admit.Breaker
	placer    *place.Placer
	infos     []place.Worker // View.Workers: each serves the model
	placing   int            // the request the Placer is deciding for (Hook's index)
	predictor *sched.OutputPredictor
	snap      sched.Snapshot
	reqs      []Request
	out       []Outcome
	left      int
	next      int // the next request a closed-loop client sends (MaxConcurrency)
	maxKV     int
	ran       bool
	retain    *retainer // predictive pinning (retain.go); nil = off
	warmups   int       // prefetch warm-ups started
	joins     int       // requests placed with a semantic group
	warming   bool      // one is running: one at a time, as live
	// dir is the replicas' pinned-prefix directory, in memory on the
	// virtual clock, as one coordinator's (cloud/affinity), read and
	// written through the same affinity.Locate and affinity.PinnedBlock as
	// the coordinator's cache layer.
	dir   *affinity.Memory
	index map[string]int // a worker's name to its index
}

// New builds the cluster: one engine per TP group of each pool.
func New(cfg Config) (*Cluster, error) {
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg, predictor: sched.NewOutputPredictor(0), index: map[string]int{}}
	c.clk = clock{q: &c.q, epoch: epoch}
	c.dir = affinity.NewMemory(c.clk.Now)
	capacity := 0
	var err error
	named := map[string]int{} // workers per GPU name, so two pools of one GPU name theirs apart
	for pi, p := range cfg.Pools {
		d := p.Deployment
		if d == nil && p.GPU.Name == CPU {
			return nil, errors.New("sim: a cpu pool needs its Deployment fitted from lm bench (FitCPU)")
		}
		if d == nil {
			if d, err = NewDeployment(p.GPU, cfg.Model, cfg.TP, cfg.Engine); err != nil {
				return nil, err
			}
		}
		if c.dep == nil {
			c.dep = d
		}
		n := p.Count / d.TP
		if n < 1 {
			return nil, fmt.Errorf("pool %d×%s: fewer GPUs than the %d tensor parallelism needs", p.Count, p.GPU.Name, d.TP)
		}
		for k := 0; k < n; k++ {
			role := p.Role
			if cfg.CycleRoles {
				role = roleCycle[len(c.workers)%len(roleCycle)]
			}
			price, ok := cfg.Prices[p.GPU.Name]
			if !ok {
				price = p.GPU.PricePerHour
			}
			w := &simWorker{
				info:     WorkerInfo{Name: fmt.Sprintf("%s-%d", p.GPU.Name, named[p.GPU.Name]), Pool: pi, Role: role, GPUs: d.TP},
				eng:      NewEngine(d),
				burst:    worker.NewBurstMeter(),
				class:    d.Class(price),
				pool:     &cfg.Pools[pi],
				dollarsS: price * float64(d.TP) / 3600,
				healthy:  true,
			}
			bc := cfg.Batch
			bc.Now, bc.AfterFunc = c.clk.Now, c.clk.AfterFunc
			if w.batcher, err = batch.New(bc, func() int { return w.capacity() - w.inflight }); err != nil {
				return nil, err
			}
			capacity += d.Engine.MaxNumSeqs
			c.index[w.info.Name] = len(c.workers)
			c.workers = append(c.workers, w)
			named[p.GPU.Name]++
		}
	}
	fc := cfg.Fair
	if fc.Slots == 0 {
		fc.Slots = 2 * capacity
	}
	bc := cfg.Breaker
	bc.Now = c.clk.Now
	if c.breaker, err = admit.NewBreaker(bc); err != nil {
		return nil, err
	}
	if c.fair, err = admit.NewFair(fc, c.breaker.Open); err != nil {
		return nil, err
	}
	if err := c.enablePlacement(); err != nil {
		return nil, err
	}
	if c.admitter, err = admit.New(admit.Config{Budget: cfg.Budget, Now: c.clk.Now}); err != nil {
		return nil, err
	}
	c.snap.Workers = make([]sched.Worker, len(c.workers))
	if err := c.enableCache(); err != nil {
		return nil, err
	}
	return c, nil
}

// Deployment is the first pool's physics (every pool serves the same model).
func (c *Cluster) Deployment() *Deployment { return c.dep }

func (w *simWorker) capacity() int {
	if w.load.Capacity > 0 {
		return w.load.Capacity
	}
	return w.eng.d.Engine.MaxNumSeqs
}

func (c *Cluster) at(t time.Duration, fn func()) { c.q.push(t, fn) }

// Run plays reqs (sorted by arrival) through the cluster to the last token.
// The context is checked between events, so a long run can be stopped.
func (c *Cluster) Run(ctx context.Context, reqs []Request) (*Result, error) {
	if c.ran {
		return nil, errors.New("sim: a Cluster runs once")
	}
	c.ran = true
	c.reqs = reqs
	c.out = make([]Outcome, len(reqs))
	c.left = len(reqs)
	for i := range reqs {
		if i > 0 && reqs[i].At < reqs[i-1].At {
			return nil, fmt.Errorf("sim: request %d arrives before request %d", i, i-1)
		}
	}
	c.next = len(reqs)
	if n := c.cfg.MaxConcurrency; n > 0 {
		c.next = min(n, len(reqs))
	}
	for i := range c.next {
		c.at(reqs[i].At, func() { c.arrive(i) })
	}
	for _, w := range c.workers {
		for _, o := range w.outages {
			c.at(o.From, func() { c.fail(w) })
		}
	}
	c.probe() // as worker.NewSet: the first decisions see real state
	for n := 0; len(c.q.h) > 0; n++ {
		if n&0xffff == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		e := c.q.pop()
		if e.cancelled {
			continue
		}
		c.clk.now = e.at
		c.q.n++
		e.fn()
	}
	res := &Result{Policy: c.policyName(), Outcomes: c.out, Events: c.q.n, Pools: c.cfg.Pools, MaxKVUsed: c.maxKV,
		BreakerTrips: c.breaker.State().Trips, GroupJoins: c.joins, Warmups: c.warmups}
	for i := range c.out {
		res.Makespan = max(res.Makespan, c.out[i].Done)
	}
	for _, w := range c.workers {
		w.info.Stat = w.eng.Stats()
		w.info.Busy = w.info.Stat.Busy
		res.Workers = append(res.Workers, w.info)
		res.KVBlocks = max(res.KVBlocks, w.eng.d.KVBlocks)
	}
	return res, nil
}

// probe refreshes every worker's load as worker.Set's probe does: the
// scheduler sees engine queues and KV state as of the last probe, and its
// own in-flight counts live.
func (c *Cluster) probe() {
	ms := c.cfg.ProbeInterval.Seconds() * 1e3
	for _, w := range c.workers {
		st := w.eng.Stats()
		w.load = worker.Load{
			Running: w.eng.Running(), Waiting: w.eng.Waiting(), Capacity: w.eng.d.Engine.MaxNumSeqs,
			KVUsage: w.eng.KVUsage(), KVFaultsPerMs: float64(st.Preemptions-w.lastPre) / ms,
			PromptTokens: st.PromptTokens, PrefixHitTokens: st.CachedTokens,
		}
		w.lastPre = st.Preemptions
		w.healthy = !w.refusing(c.clk.now) // a failed probe, as live
	}
	if c.left > 0 {
		c.at(c.clk.now+c.cfg.ProbeInterval, c.probe)
	}
}

func (c *Cluster) arrive(i int) {
	r := &c.reqs[i]
	f := &flight{i: i, tenant: r.Tenant}
	if f.tenant == "" {
		f.tenant = "anonymous"
	}
	out := max(1, r.Output)
	f.seq = Seq{Prompt: max(1, r.Input), MaxOutput: out, User: f}
	f.seq.Hashes = blockHashes(i, r, c.dep.Engine.BlockSize)
	c.pinRequest(i, &f.seq, f.tenant)
	f.sig = sched.Request{
		InputTokens:     f.seq.Prompt,
		InputChars:      int(float64(f.seq.Prompt) * c.cfg.CharsPerToken),
		EntropyBits:     c.cfg.EntropyBits,
		PredictedOutput: c.predictor.Predict(f.tenant, out),
		Stream:          true, // as the coordinator: every hop streams
		BlockHashes:     f.seq.Hashes,
	}
	f.req = place.Request{Sig: &f.sig, Tenant: f.tenant, MaxOutput: out, Hints: c.cfg.Hints}
	if c.placer.Fingerprints(&f.req) {
		f.req.Messages = messages(i, r)
	}
	f.cost = int64(f.seq.Prompt + out)
	c.out[i] = Outcome{Arrival: c.clk.now, Prompt: f.seq.Prompt, Worker: -1}
	if _, err := c.admitter.Charge(context.Background(), f.tenant, f.cost, admit.Bucket{}); err != nil {
		c.refuse(f, StatusBudget)
		return
	}
	if err := c.fair.Submit(f.tenant, f.seq.Prompt, func(t *admit.Ticket) {
		f.ticket = t
		c.at(c.clk.now, func() { c.place(f) })
	}); err != nil {
		c.admitter.Refund(context.Background(), f.tenant, f.cost, admit.Bucket{})
		c.refuse(f, StatusQueue)
	}
}

func (c *Cluster) refuse(f *flight, s Status) {
	o := &c.out[f.i]
	o.Status, o.Done = s, c.clk.now
	o.Finished++
	c.ended()
}

// ended counts a request out and, for a closed-loop client, sends the next.
func (c *Cluster) ended() {
	c.left--
	if c.cfg.MaxConcurrency > 0 && c.next < len(c.reqs) {
		i := c.next
		c.next++
		c.at(max(c.clk.now, c.reqs[i].At), func() { c.arrive(i) })
	}
}

// place is the coordinator's decision: every worker's signals, as
// worker.Set.Snapshot fills them, and the breaker's state, then the Placer
// (cloud/place), as the coordinator calls it.
func (c *Cluster) place(f *flight) {
	v := c.view(f.sig.BlockHashes)
	f.req.Pinned, _ = affinity.Locate(context.Background(), c.dir, f.sig.BlockHashes, c.workerIndex)
	c.placing = f.i
	rec := c.record(f, v, -1)
	d, err := c.placer.Place(&f.req, v)
	rec(d, err)
	if err != nil {
		f.ticket.Release()
		c.admitter.Refund(context.Background(), f.tenant, f.cost, admit.Bucket{})
		c.refuse(f, StatusNoWorker)
		return
	}
	if d.Path == place.PathGroup {
		c.joins++
	}
	c.assign(f, d.Decision)
}

// assign sends f to d's worker's batcher (and reserves d's decode worker,
// for a split).
func (c *Cluster) assign(f *flight, d sched.Decision) {
	f.w = c.workers[d.Worker]
	c.out[f.i].Worker = d.Worker
	f.pw, f.pend = f.w, max(1, f.seq.Prompt-c.snap.Workers[d.Worker].PrefixBlocks*c.dep.Engine.BlockSize)
	f.w.pending += f.pend
	f.w.prefills++
	if d.Split {
		// The prefill half samples the first token; the decode worker
		// counts the request from now on, as the coordinator would.
		f.split, f.dw = true, c.workers[d.DecodeWorker]
		f.pre = Seq{Prompt: f.seq.Prompt, MaxOutput: 1, Hashes: f.seq.Hashes, User: f}
		f.dw.inflight++
		o := &c.out[f.i]
		o.Split, o.DecodeWorker = true, d.DecodeWorker
	}
	f.w.batcher.Submit(f.seq.Prompt, func(int) {
		c.at(c.clk.now, func() { c.start(f) })
	})
}

func (c *Cluster) start(f *flight) {
	w := f.w
	if w.refusing(c.clk.now) {
		c.refused(f)
		return
	}
	w.inflight++
	f.started = c.clk.now
	s := &f.seq
	if f.split {
		s = &f.pre
	}
	// The server's own handling (EngineConfig.RequestOverhead) before the
	// engine sees the request.
	gen := w.gen
	c.at(c.clk.now+w.eng.d.Engine.RequestOverhead, func() {
		if w.gen != gen {
			c.workerFailed(f) // its server died under it
			return
		}
		if err := w.eng.Add(s); err != nil {
			c.finish(f, StatusTooLong)
			return
		}
		c.kick(w)
	})
}

// kick starts w stepping unless it is.
func (c *Cluster) kick(w *simWorker) {
	if !w.stepping && !w.kicked {
		w.kicked = true
		// After whatever else arrives at this instant, so they share a step.
		c.at(c.clk.now, func() {
			w.kicked = false
			c.step(w)
		})
	}
}

func (c *Cluster) step(w *simWorker) {
	dt, ok := w.eng.Plan()
	if !ok {
		w.stepping = false
		return
	}
	w.stepping = true
	c.maxKV = max(c.maxKV, w.eng.kv.blocks()-w.eng.kv.free())
	total := 0
	for _, s := range w.eng.planned {
		total += s.step
	}
	for _, s := range w.eng.planned {
		s.User.(*flight).dollars += dt.Seconds() * w.dollarsS * float64(s.step) / float64(total)
	}
	gen := w.gen
	c.at(c.clk.now+dt, func() {
		if w.gen != gen {
			return // the server died during the step (fail)
		}
		w.eng.Commit(c.emit)
		c.step(w)
	})
}

// emit is a token leaving the engine: the coordinator's accounting as
// its run.forward does it (fair-queue charge, burst meter).
func (c *Cluster) emit(s *Seq, finished bool) {
	f := s.User.(*flight)
	if f.warm {
		c.recordPin(f.seq.Hashes, f.seq.PinBlocks*c.dep.Engine.BlockSize, f.w, llm.MinCacheTTL) // as a live warm-up that succeeded
		c.warmed(f)                                                                             // its one token is the end of it
		return
	}
	now := c.clk.now
	if f.tokens == 0 {
		f.first = now
		c.prefilled(f)
		f.gaps = make([]time.Duration, 0, min(f.seq.MaxOutput-1, 1<<12))
	} else {
		f.gaps = append(f.gaps, now-f.last)
	}
	f.last = now
	f.tokens++
	f.ticket.Output(1)
	f.w.burst.Record(c.clk.Now())
	if finished && s == &f.pre {
		c.handOver(f)
		return
	}
	if finished {
		c.finish(f, StatusOK)
	}
}

// prefilled drops f's prefill from its worker's pending count.
func (c *Cluster) prefilled(f *flight) {
	if f.pw != nil {
		f.pw.pending -= f.pend
		f.pw.prefills--
		f.pw = nil
	}
}

// handOver ends a split request's prefill: the prefill worker is done with
// it, its KV blocks cross the link (one transfer at a time into the decode
// worker's NIC), and the decode worker admits it with them.
func (c *Cluster) handOver(f *flight) {
	p, d := f.w, f.dw
	p.inflight--
	p.batcher.Kick()
	link := defaultLink(p.pool, d.pool)
	if c.cfg.KVLink != nil {
		link = *c.cfg.KVLink
	}
	dt := link.TransferTime(c.dep, f.seq.Prompt)
	start := max(c.clk.now, d.nicFree)
	d.nicFree = start + dt
	c.out[f.i].Transfer = d.nicFree - c.clk.now
	c.at(d.nicFree, func() {
		f.w = d
		if d.refusing(c.clk.now) {
			c.finish(f, StatusLost) // its first token is out: the stream ends in an error
			return
		}
		f.seq.Imported = true
		if err := d.eng.Add(&f.seq); err != nil {
			c.finish(f, StatusTooLong)
			return
		}
		c.kick(d)
	})
}

func (c *Cluster) finish(f *flight, st Status) {
	c.prefilled(f)
	w := f.w
	if f.split && w != f.dw {
		f.dw.inflight-- // refused before the hand-over: the decode worker's reservation goes too
		f.dw.batcher.Kick()
	}
	w.inflight--
	w.batcher.Kick()
	f.ticket.Release()
	used := int64(f.seq.Prompt + f.tokens)
	c.admitter.Refund(context.Background(), f.tenant, f.cost-used, admit.Bucket{})
	if st == StatusLost {
		c.breaker.Record(true, 0) // a 503-like server error, as live
	}
	if st == StatusOK {
		c.predictor.Observe(f.tenant, f.seq.MaxOutput, f.tokens)
		// The engine's TTFT, as a live worker's Final reports it: from
		// its start on the worker, not from arrival.
		c.breaker.Record(false, f.first-f.started)
		// The coordinator's completeResponse: the pins, then prefetch.
		c.recordPins(f)
		c.learn(f)
	}
	o := &c.out[f.i]
	o.Status, o.Output, o.Cached, o.Done, o.Cost = st, f.tokens, f.seq.CachedTokens, c.clk.now, f.dollars
	o.HostCached, o.ITLs = f.seq.HostTokens, f.gaps
	if f.split {
		o.Cached, o.HostCached = f.pre.CachedTokens, f.pre.HostTokens
	}
	if f.tokens > 0 {
		o.TTFT = f.first - o.Arrival
		if f.tokens > 1 {
			o.TPOT = (f.last - f.first) / time.Duration(f.tokens-1)
		}
	}
	o.Finished++
	c.ended()
}

// workerIndex is the index of the worker named name, -1 for none.
func (c *Cluster) workerIndex(name string) int {
	if i, ok := c.index[name]; ok {
		return i
	}
	return -1
}

// recordPins is the coordinator's record of a pinned request's
// breakpoints (cache layer's pinned), under the worker it was placed on.
// A trace has no cache_control marks: a request that pins (pinRequest)
// marks, as a chat client does, the end of its shared prefix (its system
// prompt), the end of its Mooncake hash_id blocks (the conversation's
// earlier turns) and its whole prompt; the engine pins all of it.
func (c *Cluster) recordPins(f *flight) {
	s, r := &f.seq, &c.reqs[f.i]
	if s.PinBlocks == 0 {
		return
	}
	w := c.workers[c.out[f.i].Worker]
	for _, n := range []int{r.PrefixLen, min(len(r.Blocks)*512, s.Prompt), s.PinBlocks * c.dep.Engine.BlockSize} {
		c.recordPin(s.Hashes, n, w, s.PinTTL)
	}
}

// recordPin writes a pin of the first tokens of the prompt whose block
// hashes are hashes to the directory, as held by w for ttl.
func (c *Cluster) recordPin(hashes []uint64, tokens int, w *simWorker, ttl time.Duration) {
	if h, ok := affinity.PinnedBlock(hashes, tokens, c.dep.Engine.BlockSize); ok && ttl > 0 {
		c.dir.Record(context.Background(), h, w.info.Name, ttl) // Memory's Record does not fail
	}
}

// mix is splitmix64's finaliser.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// blockHashes are the chained hashes of a request's full blocks, as
// kvcache.BlockHashes makes them from token ids: each covers its block and
// everything before it. The shared prefix's full blocks and Mooncake's
// 512-token hash_ids give shared content; tokens past them (or every
// token, without either) are unique to the request.
func blockHashes(i int, r *Request, bs int) []uint64 {
	n := max(1, r.Input) / bs
	hs := make([]uint64, n)
	per := max(1, 512/bs)
	var h uint64
	for k := range n {
		var content uint64
		if (k+1)*bs <= r.PrefixLen {
			content = mix(uint64(r.PrefixID)<<24 ^ uint64(k) ^ 0x9f1e)
		} else if b := k / per; b < len(r.Blocks) {
			content = mix(uint64(r.Blocks[b])<<16 | uint64(k%per))
		} else {
			content = mix(mix(uint64(i)<<20|uint64(k)) ^ 0x5eed)
		}
		h = mix(h ^ content)
		if h == 0 {
			h = 1
		}
		hs[k] = h
	}
	return hs
}

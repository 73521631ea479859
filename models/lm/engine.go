package lm

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm/chatfmt"
	"github.com/phaseless/phaseless/models/lm/constraint"
	"github.com/phaseless/phaseless/models/lm/grammar"
	"github.com/phaseless/phaseless/models/lm/kvcache"
	"github.com/phaseless/phaseless/models/lm/tokenizer"
	"github.com/phaseless/phaseless/models/toolprior"
)

// EngineConfig tunes an Engine. The zero value means defaults.
type EngineConfig struct {
	// BlockSize is the KV cache block size in tokens (default
	// kvcache.DefaultBlockSize). A scheduler matching prompts against this
	// engine's cache (CachedPrefixBlocks, kvcache.BlockHashes) must hash with
	// the same size.
	BlockSize int
	// KVBudgetBytes bounds the KV cache memory. Default: enough for MaxBatch
	// full-context sequences, capped at 256 MiB (and never below one
	// full-context sequence, which every budget must hold).
	KVBudgetBytes int64
	// MaxBatch is how many sequences run at once (default 16).
	MaxBatch int
	// MaxQueue is how many requests may wait; more are refused as overloaded
	// (default 256).
	MaxQueue int
	// StepTokens is the per-step token budget: one decode token per running
	// sequence, the rest filled with prompt chunks (default 256).
	StepTokens int
	// Threads is how many goroutines the forward pass uses (default GOMAXPROCS).
	Threads int
	// FaultWindow is the window Stats.KVFaultsPerMs is measured over (default 1 s).
	FaultWindow time.Duration
	// Now is the clock (default time.Now); tests inject their own.
	Now func() time.Time

	// PinnedBytes caps the KV memory prompt caching may pin (cache
	// breakpoints, x-cache-ttl); pinned blocks are never evicted while they
	// live. Default: half the KV budget. It is always cut so one
	// full-context sequence fits beside it; negative turns pinning off.
	PinnedBytes int64
	// PinTenantBytes caps one tenant's pinned memory (default: half of
	// PinnedBytes), so one tenant cannot take the pinned share.
	PinTenantBytes int64

	// AgingRate, when set, turns on cache-aware admission order (order.go,
	// as cloud/sim's): after the decodes, prompt work runs earliest
	// (queued at + uncached prompt tokens / AgingRate tokens per second)
	// first, so a prompt whose prefix is cached and whose remainder is
	// short passes a long prefill without starving it. 0 = first come,
	// first served.
	AgingRate float64

	// HostKV, when set, gives the engine a host-memory KV tier of HostKV
	// times its KV blocks (hosttier.go): prefix blocks its cache evicts
	// are kept there and copied back for a prompt that continues its
	// cached prefix with them, instead of being recomputed. 0 = none.
	HostKV float64

	// ByteChoices turns choice decoding off (constraint_choice.go): a
	// grammar's closed sets of alternatives (call or prose, tool names,
	// enum values, copied numbers and spans) are then decided byte by byte
	// by the sampler, as before it. For comparisons.
	ByteChoices bool

	// ToolPrior, when set, is the tool prior (toolprior.go) the engine
	// uses in place of its model's own; NoToolPrior uses none. For
	// comparisons and for choosing a prior's weight.
	ToolPrior   *toolprior.Prior
	NoToolPrior bool
	// ToolPrune is the prior's share (renormalised over the tools a
	// request offers) under which a tool is not scored at the first
	// call's tool point: its alternative would cost a fork of some 27
	// tokens to lose anyway. The grammar still allows it. 0 means
	// DefaultToolPrune; a negative value scores every tool.
	ToolPrune float64

	// PromptCacheDir, when set, keeps the KV blocks of chats' stable
	// prefixes (their leading system turns: a system prompt, the tool
	// definitions) in this directory and loads this model's into the
	// prefix cache when the engine starts (promptdisk.go), so a restart
	// does not prefill them again. "" = off.
	PromptCacheDir string
	// PromptCacheBytes bounds the directory's files, least recently used
	// removed first (default DefaultPromptCacheBytes).
	PromptCacheBytes int64
	// Logger receives the prompt cache's log lines: a file ignored as
	// corrupt or foreign, a failed write (default: none).
	Logger *slog.Logger

	// recomputeChosen runs a chosen alternative's tokens again as a
	// prompt chunk instead of keeping the keys and values its scoring
	// computed (keepScored): the reference the tests compare with.
	recomputeChosen bool
}

// MaxHostKV bounds EngineConfig.HostKV: 64 times the KV budget is already
// more host memory per worker than any server has per GPU.
const MaxHostKV = 64

func (c *EngineConfig) fillDefaults() {
	if c.BlockSize == 0 {
		c.BlockSize = kvcache.DefaultBlockSize
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = 16
	}
	if c.MaxQueue == 0 {
		c.MaxQueue = 256
	}
	if c.StepTokens == 0 {
		c.StepTokens = 256
	}
	if c.Threads == 0 {
		c.Threads = runtime.GOMAXPROCS(0)
	}
	if c.FaultWindow == 0 {
		c.FaultWindow = time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.ToolPrune == 0 {
		c.ToolPrune = DefaultToolPrune
	}
	if c.PromptCacheBytes == 0 {
		c.PromptCacheBytes = DefaultPromptCacheBytes
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate names the first bad field.
func (c EngineConfig) Validate() error {
	switch {
	case c.BlockSize < 0 || c.BlockSize > 1024:
		return fmt.Errorf("engine config: BlockSize %d outside 1..1024", c.BlockSize)
	case c.KVBudgetBytes < 0:
		return fmt.Errorf("engine config: KVBudgetBytes %d is negative", c.KVBudgetBytes)
	case c.MaxBatch < 0:
		return fmt.Errorf("engine config: MaxBatch %d is negative", c.MaxBatch)
	case c.MaxQueue < 0:
		return fmt.Errorf("engine config: MaxQueue %d is negative", c.MaxQueue)
	case c.StepTokens < 0:
		return fmt.Errorf("engine config: StepTokens %d is negative", c.StepTokens)
	case c.Threads < 0:
		return fmt.Errorf("engine config: Threads %d is negative", c.Threads)
	case c.FaultWindow < 0:
		return fmt.Errorf("engine config: FaultWindow %v is negative", c.FaultWindow)
	case c.PromptCacheBytes < 0:
		return fmt.Errorf("engine config: PromptCacheBytes %d is negative", c.PromptCacheBytes)
	case c.PinTenantBytes < 0:
		return fmt.Errorf("engine config: PinTenantBytes %d is negative", c.PinTenantBytes)
	case c.AgingRate < 0 || math.IsNaN(c.AgingRate) || math.IsInf(c.AgingRate, 0):
		return fmt.Errorf("engine config: AgingRate %v is not a non-negative rate", c.AgingRate)
	case math.IsNaN(c.ToolPrune) || c.ToolPrune >= 1:
		return fmt.Errorf("engine config: ToolPrune %v, want below 1 (negative: off)", c.ToolPrune)
	case c.HostKV < 0 || math.IsNaN(c.HostKV) || math.IsInf(c.HostKV, 0) || c.HostKV > MaxHostKV:
		return fmt.Errorf("engine config: HostKV %v outside 0..%d (times the KV budget)", c.HostKV, MaxHostKV)
	}
	if c.ToolPrior != nil {
		if err := c.ToolPrior.Validate(); err != nil {
			return fmt.Errorf("engine config: ToolPrior: %w", err)
		}
	}
	if c.StepTokens > 0 && c.MaxBatch > 0 && c.StepTokens < c.MaxBatch {
		return fmt.Errorf("engine config: StepTokens %d must be at least MaxBatch %d (one decode token each)", c.StepTokens, c.MaxBatch)
	}
	return nil
}

// blockBytes is the KV memory of one block: keys and values of every layer.
func blockBytes(cfg Config, blockSize int) int64 {
	return 2 * int64(cfg.Layers) * int64(blockSize) * int64(cfg.KVHeads*cfg.HeadDim()) * 4
}

// Stats are the engine's counters; cumulative ones count since NewEngine.
type Stats struct {
	Running, Waiting int
	KVBlocksUsed     int // held by sequences
	KVBlocksCached   int // held by nobody, keeping a reusable prefix (evictable)
	KVBlocksFree     int // cached + never-used blocks: what new work can take
	KVBlocksTotal    int
	BlockSize        int
	PrefixHitTokens  uint64 // prompt tokens served from cached blocks
	// KVFaults counts block allocations that had to evict a cached prefix or
	// preempt a running sequence; KVFaultsPerMs is their rate over FaultWindow.
	KVFaults      uint64
	KVFaultsPerMs float64
	Evictions     uint64
	Preemptions   uint64
	CopyOnWrites  uint64
	Steps         uint64
	PrefillTokens uint64 // prompt (and recomputed) tokens run
	DecodeTokens  uint64 // generated tokens run
	// ChoiceTokens are the tokens run to score the alternatives of choice
	// points (constraint_choice.go); of the chosen one's tokens only the
	// last is run again (for its logits), and counts in PrefillTokens.
	ChoiceTokens uint64
	// TokensPerStep is the mean over FaultWindow; LastStepTokens the latest step.
	TokensPerStep  float64
	LastStepTokens int
	Completed      uint64
	// HandoffsOut counts prefills whose KV left as a Handoff (Prefill);
	// HandoffsIn, sequences started from one (Resume).
	HandoffsOut, HandoffsIn uint64

	// Prompt caching: blocks pinned now (in all and per tenant), Acquire
	// hits on pinned blocks, pins that ran out, blocks a cap refused.
	PinnedBlocks        int
	PinnedByTenant      map[string]int
	PinHits             uint64
	PinExpiries         uint64
	PinRefusedBlocks    uint64
	CacheWriteTokens    uint64 // prompt tokens newly pinned
	PinnedBytesPerBlock int64

	// Host is the host-memory KV tier's state (zero without one);
	// PrefixHitTokens includes its HitTokens.
	Host HostTierStats
	// PromptDisk is the prompt cache on disk's (zero without one).
	PromptDisk PromptDiskStats
}

// Engine serves generation requests on one Model with continuous batching.
type Engine struct {
	m      *Model
	cfg    EngineConfig
	alloc  *kvcache.Allocator
	kv     *kvStore
	host   *hostTier   // nil: no host KV tier
	disk   *promptDisk // nil: no prompt cache on disk
	ws     *workspace
	seedMu sync.Mutex // guards seeds
	seeds  *rand.Rand

	mu      sync.Mutex // guards waiting, aborts, closed, stats, window
	waiting []*sequence
	aborts  []*sequence
	closed  bool
	stats   Stats
	window  []stepMark
	wake    chan struct{} // cap 1: work arrived

	running []*sequence // step loop only

	closeOnce sync.Once
	done      chan struct{} // closed when the step loop has exited
	stepBuf   stepBuffers   // step loop only
}

type stepMark struct {
	at     time.Time
	faults uint64
	tokens int
}

var _ llm.Generator = (*Engine)(nil)

// NewEngine starts an engine on m; Close stops it.
func NewEngine(m *Model, cfg EngineConfig) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.fillDefaults()
	perBlock := blockBytes(m.Config, cfg.BlockSize)
	ctxBlocks := (m.Config.ContextLen + cfg.BlockSize - 1) / cfg.BlockSize
	if cfg.KVBudgetBytes == 0 {
		cfg.KVBudgetBytes = min(int64(cfg.MaxBatch)*int64(ctxBlocks)*perBlock, 256<<20)
		cfg.KVBudgetBytes = max(cfg.KVBudgetBytes, int64(ctxBlocks)*perBlock)
	}
	nBlocks := cfg.KVBudgetBytes / perBlock
	if nBlocks < int64(ctxBlocks) {
		return nil, fmt.Errorf("engine config: KVBudgetBytes %d holds %d blocks of %d tokens; one %d-token context needs %d (%d bytes)",
			cfg.KVBudgetBytes, nBlocks, cfg.BlockSize, m.Config.ContextLen, ctxBlocks, int64(ctxBlocks)*perBlock)
	}
	alloc, err := kvcache.NewPinning(int(nBlocks), cfg.pinConfig(int(nBlocks), ctxBlocks, perBlock))
	if err != nil {
		return nil, err
	}
	e := &Engine{
		m: m, cfg: cfg, alloc: alloc,
		kv:    newKVStore(m.Config, int(nBlocks)*cfg.BlockSize),
		ws:    newWorkspace(cfg.Threads),
		seeds: rand.New(rand.NewPCG(uint64(cfg.Now().UnixNano()), 1)),
		wake:  make(chan struct{}, 1),
		done:  make(chan struct{}),
	}
	if cfg.HostKV > 0 {
		n := max(1, int(math.Ceil(cfg.HostKV*float64(nBlocks)))) // a small fraction is still a tier, not none
		if e.host, err = newHostTier(m.Config, n, cfg.BlockSize); err != nil {
			return nil, err
		}
		alloc.SetEvictHook(func(id int32, h uint64) { e.host.store(e.kv, id, h) })
	}
	e.stats.KVBlocksTotal = int(nBlocks)
	e.stats.BlockSize = cfg.BlockSize
	if cfg.PromptCacheDir != "" {
		// A cache that cannot be opened (a read-only or full data
		// directory) turns itself off: the engine serves without it.
		if e.disk, err = openPromptDisk(cfg, m.Fingerprint()); err != nil {
			cfg.Logger.Warn("prompt cache off", "err", err)
		} else {
			e.loadPromptCache()
		}
	}
	go e.loop()
	return e, nil
}

// Model returns the engine's model.
func (e *Engine) Model() *Model { return e.m }

// Config returns the engine's configuration with defaults filled in.
func (e *Engine) Config() EngineConfig { return e.cfg }

// Close stops the step loop, failing requests still in flight as unavailable,
// and waits for it. It is safe to call more than once.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		e.mu.Lock()
		e.closed = true
		e.mu.Unlock()
		e.signal()
	})
	<-e.done
	if e.disk != nil {
		e.disk.close() // after the step loop, which queues its writes
	}
	return nil
}

func (e *Engine) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Stats returns a snapshot of the engine's counters.
func (e *Engine) Stats() Stats {
	held, cached, free := e.alloc.Counts()
	as := e.alloc.Stats()
	pinned, byTenant := e.alloc.PinCounts()
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.stats
	s.Waiting += len(e.waiting)
	s.KVBlocksUsed, s.KVBlocksCached, s.KVBlocksFree = held, cached, cached+free
	s.Evictions = as.Evictions
	s.KVFaults = as.Evictions + s.Preemptions
	s.PinnedBlocks, s.PinnedByTenant = pinned, byTenant
	s.PinHits, s.PinExpiries, s.PinRefusedBlocks = as.PinHits, as.PinExpiries, as.PinRefused
	s.PinnedBytesPerBlock = blockBytes(e.m.Config, e.cfg.BlockSize)
	if e.host != nil {
		s.Host = e.host.stats()
	}
	if e.disk != nil {
		s.PromptDisk = e.disk.stats()
	}
	now := e.cfg.Now()
	cut := now.Add(-e.cfg.FaultWindow)
	var base *stepMark
	var tokens, steps int
	for i := range e.window {
		if e.window[i].at.Before(cut) {
			base = &e.window[i]
			continue
		}
		tokens += e.window[i].tokens
		steps++
	}
	if steps > 0 {
		s.TokensPerStep = float64(tokens) / float64(steps)
		var from uint64
		if base != nil {
			from = base.faults
		}
		last := e.window[len(e.window)-1].faults
		s.KVFaultsPerMs = float64(last-from) / max(1, float64(e.cfg.FaultWindow.Milliseconds()))
	}
	return s
}

// CachedPrefixBlocks reports how many leading blocks of hashes
// (kvcache.BlockHashes with this engine's block size) are in this engine's
// KV cache, or continue it in the host tier, so a scheduler can send a
// request where its prefix already is.
func (e *Engine) CachedPrefixBlocks(hashes []uint64) int {
	gpu, host := e.cachedPrefix(hashes)
	return gpu + host
}

// cachedPrefix counts the leading hashes in the KV cache and, after them,
// those the host tier holds.
func (e *Engine) cachedPrefix(hashes []uint64) (cache, host int) {
	cache = e.alloc.Probe(hashes)
	if e.host != nil && cache < len(hashes) {
		host = e.host.match(hashes[cache:])
	}
	return cache, host
}

// Generate runs one chat request: it renders req.Messages with the model's
// chat template (or chatfmt.Prompt, stopping also at chatfmt.TurnEnd, when it has
// none), generates until an end-of-generation token (EOS, <|eot_id|>,
// <|im_end|>: Tokenizer.IsEOG), a req.Stop sequence or req.MaxTokens, and
// emits each token's text as soon as it is sampled (withholding only bytes of an incomplete UTF-8 character or a possible
// stop-sequence prefix). Cancelling ctx, or emit returning an error, frees the
// sequence and its KV blocks.
func (e *Engine) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	prompt, opt, err := e.chatRequest(req)
	if err != nil {
		return llm.Final{}, err
	}
	return e.GenerateTokens(ctx, prompt, opt, emit)
}

// rawRequest is a raw completion's prompt tokens and options (llm.Request.Raw):
// BOS, when the model wants it, then the prompt text as the tokenizer
// encodes it; no chat template, no turn-end stop, no grammar. An x-cache-ttl
// lifetime (Hints.CacheTTL) pins the whole prompt, as it does a chat's.
func (e *Engine) rawRequest(req *llm.Request) ([]int32, GenOptions, error) {
	if req.MaxTokens <= 0 {
		return nil, GenOptions{}, llm.Errorf(llm.CodeInvalid, "max tokens must be positive, got %d", req.MaxTokens)
	}
	if len(req.Messages) > 0 || req.HasTools() || req.ResponseFormat.Type != "" || len(req.CacheBreakpoints) > 0 {
		return nil, GenOptions{}, llm.Errorf(llm.CodeInvalid, "a raw completion has a prompt only: no messages, tools, response format or cache breakpoints")
	}
	tok := e.m.tok
	prompt := tok.Encode(req.Prompt)
	if tok.AddBOS() {
		prompt = append([]int32{tok.BOS()}, prompt...)
	}
	temp, topP, topK := req.SamplingFor(e.m.sampling)
	opt := GenOptions{
		MaxTokens: req.MaxTokens, Temperature: temp, TopK: topK, TopP: topP,
		Seed: req.Seed, Stop: req.Stop, tenant: req.Tenant,
		// With no prompt text the first generated piece starts the text,
		// and a SentencePiece vocabulary's leading space on it is the
		// dummy prefix its encoder adds, not output (Tokenizer.Decode
		// drops it the same way).
		textStart: req.Prompt == "",
	}
	if ttl := req.Hints.CacheTTL; ttl > 0 {
		opt.pins = []pinPoint{{tokens: len(prompt), ttl: ttl}}
	}
	return prompt, opt, nil
}

// chatRequest is a chat request's prompt tokens and options, as Generate
// runs them.
func (e *Engine) chatRequest(req *llm.Request) ([]int32, GenOptions, error) {
	if req.Raw {
		if req.Continue != "" {
			return nil, GenOptions{}, llm.Errorf(llm.CodeInvalid, "a raw completion is continued by extending its prompt, not with Continue")
		}
		return e.rawRequest(req)
	}
	if req.MaxTokens <= 0 {
		return nil, GenOptions{}, llm.Errorf(llm.CodeInvalid, "max tokens must be positive, got %d", req.MaxTokens)
	}
	r := chatfmt.Render(req, e.m.HasChatTemplate())
	prompt, err := e.m.ChatPromptTokens(r.Messages)
	if err != nil {
		return nil, GenOptions{}, llm.Errorf(llm.CodeInvalid, "%v", err)
	}
	pins := e.m.pinPoints(req, r, prompt)
	if e.disk != nil {
		if n := e.disk.stablePrefix(e.m, r.Messages, prompt); n >= e.cfg.BlockSize {
			pins = append(pins, pinPoint{tokens: n, disk: true})
		}
	}
	if req.Continue != "" {
		if req.HasTools() || req.ResponseFormat.Type == llm.FormatJSONObject || req.ResponseFormat.Type == llm.FormatJSONSchema {
			// The grammar would have to be walked through the text first.
			return nil, GenOptions{}, llm.Errorf(llm.CodeInvalid, "continuing a reply is not supported with tools or a response format")
		}
		// The open assistant turn already holds the text: what is sampled
		// next follows it.
		prompt = append(prompt, e.m.tok.Encode(req.Continue)...)
	}
	opt, err := e.chatOptions(req, pins)
	return prompt, opt, err
}

// ChatOptions are the options Generate runs req with, for a caller that
// has tokenized req's prompt already (ChatPromptTokens of PromptMessages: a
// coordinator hashing its blocks to place it). GenerateTokens, Prefill or
// Resume with that prompt and these options run what Generate, PrefillChat
// or ResumeChat would, without rendering and tokenizing req again. pins has
// one entry per req.CacheBreakpoints: how many leading prompt tokens the
// rendering of the breakpoint's prefix (CachePrefix) shares with the
// prompt, or -1 where the breakpoint renders nothing.
func (e *Engine) ChatOptions(req *llm.Request, pins []int) (GenOptions, error) {
	if req.MaxTokens <= 0 {
		return GenOptions{}, llm.Errorf(llm.CodeInvalid, "max tokens must be positive, got %d", req.MaxTokens)
	}
	if len(pins) != len(req.CacheBreakpoints) {
		return GenOptions{}, llm.Errorf(llm.CodeInternal, "%d pinned prefixes for %d cache breakpoints", len(pins), len(req.CacheBreakpoints))
	}
	var points []pinPoint
	for i, n := range pins {
		if n >= 0 {
			points = append(points, pinPoint{tokens: n, ttl: req.CacheBreakpoints[i].TTL})
		}
	}
	return e.chatOptions(req, points)
}

// chatOptions is the rest of a chat request's options once its pins are
// known.
func (e *Engine) chatOptions(req *llm.Request, pins []pinPoint) (GenOptions, error) {
	stop := req.Stop
	if !e.m.HasChatTemplate() {
		// chatfmt.Prompt's turns end in text; a model's own template ends
		// them with a control token, which IsEOG stops at.
		stop = append([]string{chatfmt.TurnEnd}, req.Stop...)
	}
	g, err := constraint.Compile(req, stop)
	if err != nil {
		return GenOptions{}, err
	}
	temp, topP, topK := req.SamplingFor(e.m.sampling)
	return GenOptions{
		MaxTokens: req.MaxTokens, Temperature: temp, TopK: topK, TopP: topP,
		Seed: req.Seed, Stop: stop, grammar: g, toolCalls: req.HasTools(),
		tenant: req.Tenant, pins: pins,
		toolPrior: e.toolPriorFor(req, g),
		argRule:   e.argRuleFor(req),
	}, nil
}

// GenOptions are the sampling and stopping settings of one generation.
type GenOptions struct {
	MaxTokens   int
	Temperature float64 // 0 = greedy
	TopK        int     // 0 = off
	TopP        float64 // 0 = off
	Seed        uint64  // 0 = random
	Stop        []string
	// IgnoreEOS keeps generating past EOS and the other end-of-generation
	// tokens (benchmarks want fixed lengths).
	IgnoreEOS bool

	// grammar, when set, constrains the output (tool calls, JSON).
	grammar *grammar.Grammar
	// toolCalls turns the output's calls into ToolDelta events.
	toolCalls bool
	// toolPrior is what the tool prior read in the request
	// (toolprior.go); nil when it reads nothing.
	toolPrior *requestPrior
	// argRule scores the copied spans of tools the prior does not know
	// (argspan.go); nil when it does not apply.
	argRule *argRule

	// textStart says the first generated piece starts the text (a raw
	// completion of an empty prompt): tokenizer.StreamDecoder.StartText.
	textStart bool

	// onDone, when set (tests), receives the generated token ids.
	onDone func([]int32)
	// onToken, when set (benchmarks), runs in the step loop for every sampled
	// token, whether or not its text was emitted yet.
	onToken func()
	// tenant and pins are the request's prompt caching: the prefixes to pin
	// and whose pinned-memory cap they count against.
	tenant string
	pins   []pinPoint
}

// GenerateTokens runs a prompt given as token ids (BOS included if wanted).
func (e *Engine) GenerateTokens(ctx context.Context, prompt []int32, opt GenOptions, emit llm.Emit) (llm.Final, error) {
	s, err := e.newSequence(prompt, opt)
	if err != nil {
		return llm.Final{}, err
	}
	return e.run(ctx, s, emit)
}

// newSequence checks a prompt and options and builds their sequence. A
// seed of 0 in opt is replaced by one of the engine's picks.
func (e *Engine) newSequence(prompt []int32, opt GenOptions) (*sequence, error) {
	if len(prompt) == 0 {
		return nil, llm.Errorf(llm.CodeInvalid, "empty prompt")
	}
	if len(prompt) >= e.m.Config.ContextLen {
		return nil, llm.Errorf(llm.CodeContextLength, "prompt of %d tokens does not fit the context of %d", len(prompt), e.m.Config.ContextLen)
	}
	for _, t := range prompt {
		if t < 0 || int(t) >= e.m.Config.Vocab {
			return nil, llm.Errorf(llm.CodeInvalid, "token %d outside the vocabulary", t)
		}
	}
	if opt.MaxTokens <= 0 {
		return nil, llm.Errorf(llm.CodeInvalid, "max tokens must be positive, got %d", opt.MaxTokens)
	}
	seed := opt.Seed
	if seed == 0 {
		e.seedMu.Lock()
		seed = e.seeds.Uint64()
		e.seedMu.Unlock()
	}
	s := &sequence{
		tokens:    append([]int32(nil), prompt...),
		promptLen: len(prompt),
		opt:       opt,
		seed:      seed,
		sampler:   newSampler(opt.Temperature, opt.TopK, opt.TopP, seed),
		decoder:   tokenizer.NewStreamDecoder(e.m.tok),
		stop:      stopMatcher{stops: nonEmpty(opt.Stop)},
		start:     e.cfg.Now(),
		notify:    make(chan struct{}, 1),
		prefixHit: -1,
		pins:      slices.Clone(opt.pins),
	}
	if opt.textStart {
		s.decoder.StartText()
	}
	if opt.grammar != nil {
		s.constraint = constraint.New(e.m.vocabIndex(), e.m.tok, opt.grammar)
	}
	if opt.toolCalls {
		s.tools = &chatfmt.ToolParser{}
	}
	return s, nil
}

// run queues s and streams its tokens through emit until it ends.
func (e *Engine) run(ctx context.Context, s *sequence, emit llm.Emit) (llm.Final, error) {
	if emit == nil {
		emit = func(llm.Token) error { return nil }
	}
	e.mu.Lock()
	switch {
	case e.closed:
		e.mu.Unlock()
		return llm.Final{}, llm.Errorf(llm.CodeUnavailable, "engine closed")
	case len(e.waiting) >= e.cfg.MaxQueue:
		e.mu.Unlock()
		return llm.Final{}, &llm.Error{Code: llm.CodeOverloaded, Message: fmt.Sprintf("engine queue full (%d waiting)", e.cfg.MaxQueue), Retryable: true, RetryAfter: time.Second}
	}
	e.waiting = append(e.waiting, s)
	e.mu.Unlock()
	e.signal()

	var emitErr error
	ctxDone := ctx.Done()
	for {
		select {
		case <-ctxDone:
			ctxDone = nil // the abort is queued; now wait for the loop to free s
			e.abort(s)
		case <-s.notify:
		}
		toks, fin, done := s.take()
		if len(toks) > 0 {
			e.signal() // s may have been paused for backlog
		}
		for _, t := range toks {
			if emitErr != nil || ctx.Err() != nil {
				break // the caller is gone: nothing more reaches it
			}
			if emitErr = emit(t); emitErr != nil {
				e.abort(s)
			}
		}
		if !done {
			continue
		}
		fin.Total = e.cfg.Now().Sub(s.start)
		switch {
		case emitErr != nil:
			fin.FinishReason = "cancelled"
			return fin, fmt.Errorf("emit: %w", emitErr)
		case s.err != nil:
			return fin, s.err
		case ctx.Err() != nil && fin.FinishReason == "cancelled":
			return fin, ctx.Err()
		}
		return fin, nil
	}
}

func nonEmpty(ss []string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// abort asks the step loop to drop s at the next step boundary (the forward
// pass may be reading its blocks right now) and wakes the loop.
func (e *Engine) abort(s *sequence) {
	e.mu.Lock()
	if !s.abortQueued {
		s.abortQueued = true
		e.aborts = append(e.aborts, s)
	}
	e.mu.Unlock()
	e.signal()
}

// sequence is one generation in the engine.
type sequence struct {
	tokens    []int32 // prompt then generated tokens
	promptLen int
	computed  int      // tokens[:computed] have keys/values in the cache
	blocks    []int32  // block table: position p lives in blocks[p/BlockSize]
	hashes    []uint64 // chained hashes of the blocks registered so far
	opt       GenOptions
	seed      uint64 // the sampler's seed
	sampler   *sampler
	decoder   *tokenizer.StreamDecoder
	stop      stopMatcher
	// constraint keeps the output in the request's grammar; tools parses
	// its tool calls. Both nil for free text.
	constraint *constraint.Constraint
	tools      *chatfmt.ToolParser
	start      time.Time
	firstTok   time.Time
	lastTok    time.Time
	prefixHit  int // -1 until first admitted
	// pins are the request's cache breakpoints (promptcache.go);
	// cacheWrite the prompt tokens s newly pinned.
	pins       []pinPoint
	cacheWrite int
	preempted  bool
	ended      bool      // step loop only: s has left the engine
	key        time.Time // step loop only: its place in the cache-aware order (order.go)
	// waitHashes are BlockHashes of tokens[:waitHashed] (step loop only):
	// a waiting sequence's tokens do not change, and the order probes
	// its prefix every step.
	waitHashes []uint64
	waitHashed int
	// export (Prefill) ends s after its prompt: the step loop copies its
	// keys and values into handoff instead of streaming the first token.
	export  bool
	handoff *Handoff
	// imported (Resume) is the handoff s starts from: on admission its
	// keys and values are written into s's blocks, then dropped.
	imported *Handoff

	abortQueued bool // guarded by Engine.mu

	outMu    sync.Mutex // guards out, final, finished, err
	out      []llm.Token
	final    llm.Final
	finished bool
	err      error
	notify   chan struct{}
}

func (s *sequence) generated() int { return len(s.tokens) - s.promptLen }

func (s *sequence) push(t llm.Token) {
	s.outMu.Lock()
	s.out = append(s.out, t)
	s.outMu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

func (s *sequence) finish(f llm.Final, err error) {
	s.outMu.Lock()
	s.final, s.err, s.finished = f, err, true
	s.outMu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// maxBacklog is how many emitted tokens a sequence may have waiting for its
// consumer before the engine pauses it: a slow client holds its KV blocks but
// not an ever-growing buffer, and a cancelled one stops within this bound.
const maxBacklog = 32

// backlogged reports whether s's consumer is maxBacklog tokens behind.
func (s *sequence) backlogged() bool {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	return len(s.out) >= maxBacklog
}

func (s *sequence) take() ([]llm.Token, llm.Final, bool) {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	t := s.out
	s.out = nil
	return t, s.final, s.finished
}

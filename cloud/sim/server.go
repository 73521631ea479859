package sim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/cloud/worker"
	"github.com/phaseless/phaseless/internal/httplimit"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm/chatfmt"
	"github.com/phaseless/phaseless/transport/httpapi"
)

// Server runs one simulated engine in real time: requests join its
// continuous batch, each step lasts what the roofline says, and every
// sampled token is streamed as a placeholder word as soon as its step ends.
// It is an llm.Generator, served over the OpenAI API by Handler, with
// vLLM's Prometheus metrics on /metrics, so the coordinator drives it as it
// drives a real vLLM server (worker.Remote) and load tests of the HTTP and
// QUIC paths need no GPU.
type Server struct {
	model string
	wake  chan struct{}
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once

	mu  sync.Mutex // guards eng
	eng *Engine

	kv kvState // splits (kvserver.go)

	// steps and lateNanos count the engine's steps and how much later
	// than planned their ends were taken up (the timer's lateness and the
	// loop's own delay): a host too loaded to keep real time shows here,
	// and every token then comes that much later than the roofline says.
	steps, lateNanos atomic.Int64
}

var _ llm.Generator = (*Server)(nil)

// simLimits are every listener's timeouts and cap (internal/httplimit
// defaults): a simulated worker is an HTTP server like a real one.
var simLimits httplimit.Config

// NewServer starts the engine loop of a deployment; Close stops it.
func NewServer(d *Deployment) *Server {
	s := &Server{model: d.Model.Name, eng: NewEngine(d), wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	s.kv = kvState{pool: Pool{GPU: d.GPU, Count: d.TP}, sleep: sleepCtx, client: &http.Client{Timeout: 30 * time.Second}, parked: map[string]parkedSim{}}
	go s.loop()
	return s
}

// rtSeq is a live request's side of a sequence: the engine loop sends one
// value per token and closes it after the last.
type rtSeq struct {
	tokens chan struct{}
}

func (s *Server) loop() {
	defer close(s.done)
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		s.mu.Lock()
		dt, ok := s.eng.Plan()
		s.mu.Unlock()
		if !ok {
			select {
			case <-s.wake:
				continue
			case <-s.stop:
				return
			}
		}
		planned := time.Now().Add(dt)
		t.Reset(dt)
		select {
		case <-t.C:
		case <-s.stop:
			return
		}
		s.mu.Lock()
		s.steps.Add(1)
		s.lateNanos.Add(max(0, time.Since(planned).Nanoseconds()))
		s.eng.Commit(func(q *Seq, finished bool) {
			rt := q.User.(*rtSeq)
			rt.tokens <- struct{}{} // buffered for every token: never blocks the loop
			if finished {
				close(rt.tokens)
			}
		})
		s.mu.Unlock()
	}
}

// charsPerToken estimates tokens from text, as a Llama-3-style tokenizer
// cuts English (the simulator has no tokenizer of its own).
const charsPerToken = 4

// textHashes are chained hashes of the prompt's full blocks of
// BlockSize×charsPerToken bytes: equal text prefixes share blocks, so the
// prefix cache works on real prompts.
func textHashes(text string, blockTokens int) []uint64 {
	span := blockTokens * charsPerToken
	hs := make([]uint64, 0, len(text)/span)
	var h uint64
	for off := 0; off+span <= len(text); off += span {
		for i := off; i < off+span; i++ {
			h = (h ^ uint64(text[i])) * 0x100000001b3 // FNV-1a, chained across blocks
		}
		h = mix(h)
		if h == 0 {
			h = 1
		}
		hs = append(hs, h)
	}
	return hs
}

// promptSeq is the sequence of a chat request's prompt: its length and
// block hashes estimated from the text.
func (s *Server) promptSeq(req *llm.Request, maxOutput int) *Seq {
	prompt := chatfmt.Prompt(req.Messages)
	q := &Seq{Prompt: max(1, (len(prompt)+charsPerToken-1)/charsPerToken), MaxOutput: max(1, maxOutput)}
	q.Hashes = textHashes(prompt, s.eng.d.Engine.BlockSize)
	return q
}

// Generate implements llm.Generator. A request naming a KV handoff
// (llm.Request.KVHandoff, parked by POST /v1/kv/handoffs) decodes from it:
// its first token, which the prefill worker sampled, streams at once, and
// the engine admits the prompt's blocks without computing them.
func (s *Server) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	start := time.Now()
	q := s.promptSeq(req, req.MaxTokens)
	fin := llm.Final{PromptTokens: q.Prompt, FinishReason: "length"}
	if req.KVHandoff != "" {
		if err := s.kv.take(req.KVHandoff, s.model, q.Prompt); err != nil {
			return fin, err
		}
		fin.TTFT, fin.CompletionTokens = time.Since(start), 1
		if err := emit(llm.Token{Text: " tok"}); err != nil || q.MaxOutput == 1 {
			fin.Total = time.Since(start)
			return fin, err
		}
		q.Imported = true
	}
	err := s.run(ctx, q, start, func(lat time.Duration) error {
		if fin.CompletionTokens == 0 {
			fin.TTFT = time.Since(start)
		}
		fin.CompletionTokens++
		return emit(llm.Token{Text: " tok", EngineLatency: lat})
	})
	s.mu.Lock()
	fin.PrefixHitTokens = q.CachedTokens
	s.mu.Unlock()
	fin.Total = time.Since(start)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		fin.FinishReason = "cancelled"
	}
	return fin, err
}

// run adds q to the engine's batch and calls token for each token it
// samples (with the time since the previous one, from start), until the
// last, ctx's end or the server's.
func (s *Server) run(ctx context.Context, q *Seq, start time.Time, token func(time.Duration) error) error {
	rt := &rtSeq{tokens: make(chan struct{}, q.MaxOutput)}
	q.User = rt
	s.mu.Lock()
	err := s.eng.Add(q)
	s.mu.Unlock()
	if errors.Is(err, ErrTooLong) {
		return llm.Errorf(llm.CodeInvalid, "prompt (%d tokens) + max_tokens (%d) exceed the model length %d", q.Prompt, q.MaxOutput, s.eng.d.MaxModelLen)
	}
	if err != nil {
		return llm.Errorf(llm.CodeInvalid, "%v", err)
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
	last := start
	for {
		select {
		case _, ok := <-rt.tokens:
			if !ok {
				return nil
			}
			now := time.Now()
			if err := token(now.Sub(last)); err != nil {
				s.abort(q)
				return err
			}
			last = now
		case <-ctx.Done():
			s.abort(q)
			return ctx.Err()
		case <-s.stop:
			s.abort(q)
			return llm.Errorf(llm.CodeUnavailable, "simulated worker shutting down")
		}
	}
}

func (s *Server) abort(q *Seq) {
	s.mu.Lock()
	s.eng.Abort(q)
	s.mu.Unlock()
}

// WriteMetrics writes the engine's state under vLLM's metric names (and the
// capacity under Phaseless' own, which vLLM does not export).
func (s *Server) WriteMetrics(w http.ResponseWriter) {
	s.mu.Lock()
	e := s.eng
	st := e.Stats()
	running, waiting, usage, capacity := e.Running(), e.Waiting(), e.KVUsage(), e.d.Engine.MaxNumSeqs
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	l := fmt.Sprintf(`{model_name=%q}`, s.model)
	for _, m := range []struct {
		name, typ, help string
		v               float64
	}{
		{"vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", float64(running)},
		{"vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", float64(waiting)},
		{"vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", usage},
		{"vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.", float64(st.Preemptions)},
		{"vllm:prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of number of queried tokens.", float64(st.PromptTokens)},
		{"vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.", float64(st.CachedTokens)},
		{"vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", float64(st.PromptTokens)},
		{"vllm:generation_tokens_total", "counter", "Number of generation tokens processed.", float64(st.OutputTokens)},
		{"phaseless_engine_capacity", "gauge", "Sequences the engine runs at once (vLLM --max-num-seqs).", float64(capacity)},
		{"phaseless_sim_steps_total", "counter", "Steps the simulated engine ran.", float64(s.steps.Load())},
		{"phaseless_sim_step_late_seconds_total", "counter", "Seconds the simulated engine's steps ended later than the roofline planned (a host too loaded to keep real time).", float64(s.lateNanos.Load()) / 1e9},
	} {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s%s %g\n", m.name, m.help, m.name, m.typ, m.name, l, m.v)
	}
}

// Handler serves the OpenAI API (a request may name a parked KV handoff),
// the KV handoff endpoints (kvserver.go), /metrics and /health.
func (s *Server) Handler() (http.Handler, error) {
	api, err := httpapi.NewHandler(s, httpapi.Options{AllowKVHandoff: true})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", api)
	mux.HandleFunc("POST "+worker.KVPrefillPath, s.kvPrefill)
	mux.HandleFunc("POST "+worker.KVHandoffsPath, s.park)
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) { s.WriteMetrics(w) })
	mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	return mux, nil
}

// Close stops the engine loop and fails requests in flight. Idempotent.
func (s *Server) Close() error {
	s.once.Do(func() {
		close(s.stop)
		<-s.done
	})
	return nil
}

// URLSpec is a parsed sim://GPU?model=M&n=N[&tp=T][&role=R][&link=L]
// worker URL.
type URLSpec struct {
	GPU     GPU
	Model   Model
	N, TP   int
	Role    sched.Role
	HasRole bool
	// Link, when set, is the link every handoff to these workers crosses;
	// nil: as the Cluster picks it (NVLink or PCIe inside one fleet, 400 Gb
	// RDMA from another).
	Link *Link
}

// IsURL reports whether a --worker value names simulated workers.
func IsURL(s string) bool { return strings.HasPrefix(s, "sim://") }

// ParseURL reads sim://GPU?model=M&n=N[&tp=T][&role=R][&link=L] (n default
// 1, model default llama3.1-8b, tp default the fewest GPUs that fit, link
// one of LinkNames).
func ParseURL(s string) (URLSpec, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "sim" || u.Host == "" {
		return URLSpec{}, fmt.Errorf("%q is not sim://GPU?model=M&n=N", s)
	}
	spec := URLSpec{N: 1}
	if spec.GPU, err = LookupGPU(u.Host); err != nil {
		return URLSpec{}, fmt.Errorf("%q: %w", s, err)
	}
	model := "llama3.1-8b"
	for k, v := range u.Query() {
		val := v[len(v)-1]
		switch k {
		case "model":
			model = val
		case "n", "tp":
			n, err := strconv.Atoi(val)
			if err != nil || n < 1 || n > 1024 {
				return URLSpec{}, fmt.Errorf("%q: %s=%q must be an integer in 1..1024", s, k, val)
			}
			if k == "n" {
				spec.N = n
			} else {
				spec.TP = n
			}
		case "role":
			if spec.Role, err = sched.ParseRole(val); err != nil {
				return URLSpec{}, fmt.Errorf("%q: %w", s, err)
			}
			spec.HasRole = true
		case "link":
			l, err := LookupLink(val)
			if err != nil {
				return URLSpec{}, fmt.Errorf("%q: %w", s, err)
			}
			spec.Link = &l
		default:
			return URLSpec{}, fmt.Errorf("%q: unknown option %q (model, n, tp, role, link)", s, k)
		}
	}
	if spec.Model, err = LookupModel(model); err != nil {
		return URLSpec{}, fmt.Errorf("%q: %w", s, err)
	}
	if _, err := NewDeployment(spec.GPU, spec.Model, spec.TP, EngineConfig{}); err != nil {
		return URLSpec{}, fmt.Errorf("%q: %w", s, err)
	}
	return spec, nil
}

// Fleet is N simulated workers, each a Server on its own loopback HTTP
// listener: to the coordinator they are N OpenAI-compatible engines.
type Fleet struct {
	spec    URLSpec
	servers []*Server
	https   []*http.Server
	urls    []string
	wg      sync.WaitGroup
	once    sync.Once
}

// StartFleet parses a sim:// URL and starts its servers.
func StartFleet(raw string) (*Fleet, error) {
	spec, err := ParseURL(raw)
	if err != nil {
		return nil, err
	}
	d, err := NewDeployment(spec.GPU, spec.Model, spec.TP, EngineConfig{})
	if err != nil {
		return nil, err
	}
	f := &Fleet{spec: spec}
	var id [8]byte
	rand.Read(id[:])
	fleet := hex.EncodeToString(id[:])
	for range spec.N {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("sim worker: %w", err)
		}
		srv := NewServer(d)
		srv.kv.fleet, srv.kv.pool.Count, srv.kv.link = fleet, spec.N*d.TP, spec.Link
		h, err := srv.Handler()
		if err != nil {
			ln.Close()
			srv.Close()
			f.Close()
			return nil, err
		}
		hs := simLimits.Server(h)
		f.servers, f.https = append(f.servers, srv), append(f.https, hs)
		f.urls = append(f.urls, "http://"+ln.Addr().String())
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			hs.Serve(simLimits.Listener(ln)) //nolint:errcheck // ErrServerClosed on Close
		}()
	}
	return f, nil
}

// Spec is the parsed URL.
func (f *Fleet) Spec() URLSpec { return f.spec }

// URLs are the workers' base URLs.
func (f *Fleet) URLs() []string { return f.urls }

// Close stops every server and waits for them. Idempotent.
func (f *Fleet) Close() error {
	f.once.Do(func() {
		for _, s := range f.servers {
			s.Close()
		}
		for _, h := range f.https {
			h.Close()
		}
		f.wg.Wait()
	})
	return nil
}

package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/models/lm/kvcache"
)

// The KV handoff endpoints a Phaseless cloud serves as another
// coordinator's worker, next to its chat completions:
//
//	POST /v1/kv/prefill    JSON KVPrefillRequest. Runs the prefill on one of
//	                       this process's built-in engines. With push_to, the
//	                       encoded handoff is POSTed to push_to's
//	                       /v1/kv/handoffs and the answer is JSON
//	                       KVPrefillAnswer; without, the answer is the
//	                       encoded handoff (HandoffContentType).
//	POST /v1/kv/handoffs   an encoded handoff (lm.DecodeHandoff's format).
//	                       Parks it in the HandoffStore and answers JSON
//	                       KVParkAnswer; a chat completion with
//	                       x-phaseless-kv-handoff: <id> then decodes from it.
//
// Errors are JSON {"error": {"code": llm.Code, "message": ...}} with the
// code's HTTP status.
const (
	KVPrefillPath  = "/v1/kv/prefill"
	KVHandoffsPath = "/v1/kv/handoffs"
	// HandoffContentType is the media type of an encoded handoff.
	HandoffContentType = "application/x-phaseless-kv"
)

// KVMessage is one chat message of a KVPrefillRequest.
type KVMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// KVPrefillRequest (POST /v1/kv/prefill's body) is the chat request whose
// prefill runs, and where the handoff goes.
type KVPrefillRequest struct {
	Messages    []KVMessage `json:"messages"`
	MaxTokens   int         `json:"max_tokens"`
	Temperature float64     `json:"temperature"`
	TopP        float64     `json:"top_p,omitempty"`
	TopK        int         `json:"top_k,omitempty"`
	Seed        uint64      `json:"seed,omitempty"`
	Stop        []string    `json:"stop,omitempty"`
	// Omitted is llm.Request.Omitted: the sampling fields the app left to
	// the model, which the prefill engine fills from its model's.
	Omitted llm.SamplingFields `json:"omitted,omitempty"`
	// PushTo is the decode server's base URL; PushKey its API key, when it
	// wants one.
	PushTo  string `json:"push_to,omitempty"`
	PushKey string `json:"push_key,omitempty"`
}

// KVCarries reports whether a remote prefill (POST /v1/kv/prefill) can
// render req's prompt exactly: the body carries plain turns and sampling
// only, so a request with tools, a response format, tool turns or cache
// breakpoints would be prefilled as another prompt, which its decode
// worker then refuses, after a whole prefill and transfer were spent.
// Such a request is not split onto a remote prefill worker.
func KVCarries(req *llm.Request) bool {
	if len(req.Tools) > 0 || req.ResponseFormat.Type != "" || len(req.CacheBreakpoints) > 0 {
		return false
	}
	for _, m := range req.Messages {
		if len(m.ToolCalls) > 0 || m.ToolCallID != "" || m.ToolError {
			return false
		}
	}
	return true
}

func newKVPrefillRequest(req *llm.Request) KVPrefillRequest {
	r := KVPrefillRequest{MaxTokens: req.MaxTokens, Temperature: req.Temperature, TopP: req.TopP, TopK: req.TopK, Seed: req.Seed, Stop: req.Stop, Omitted: req.Omitted}
	for _, m := range req.Messages {
		r.Messages = append(r.Messages, KVMessage{Role: m.Role, Content: m.Content})
	}
	return r
}

// LLM is the request as the engines take it.
func (r *KVPrefillRequest) LLM() *llm.Request {
	req := &llm.Request{MaxTokens: r.MaxTokens, Temperature: r.Temperature, TopP: r.TopP, TopK: r.TopK, Seed: r.Seed, Stop: r.Stop, Omitted: r.Omitted}
	for _, m := range r.Messages {
		req.Messages = append(req.Messages, llm.Message{Role: m.Role, Content: m.Content})
	}
	return req
}

// KVPrefillAnswer is /v1/kv/prefill's answer when the server pushed the
// handoff itself (push_to).
type KVPrefillAnswer struct {
	Handoff         string `json:"handoff"`
	Bytes           int64  `json:"bytes"`
	PromptTokens    int    `json:"prompt_tokens"`
	PrefixHitTokens int    `json:"prefix_hit_tokens"`
	PrefillMicros   int64  `json:"prefill_us"`
	TransferMicros  int64  `json:"transfer_us"`
}

// KVParkAnswer is /v1/kv/handoffs' answer: the id the handoff is parked
// under.
type KVParkAnswer struct {
	Handoff string `json:"handoff"`
	Bytes   int64  `json:"bytes"`
}

type kvError struct {
	Error struct {
		Code    llm.Code `json:"code"`
		Message string   `json:"message"`
	} `json:"error"`
}

// Headers of a prefill answered with the encoded handoff.
const (
	hdrPromptTokens = "x-phaseless-prompt-tokens"
	hdrPrefixHits   = "x-phaseless-prefix-hit-tokens"
	hdrPrefillUS    = "x-phaseless-prefill-us"
)

// KVServerConfig configures a KVServer.
type KVServerConfig struct {
	// Workers are this process's built-in workers: prefills run on the least
	// busy, and handoffs must be for their model.
	Workers []*Worker
	// Store parks received handoffs; the workers' Builtins resume from it
	// (NewBuiltinWithHandoffs with the same store).
	Store *HandoffStore
	// Authenticate, when set, admits a caller or returns the error to answer
	// (the cloud's API-key gate, as for chat completions).
	Authenticate func(*http.Request) (string, error)
	// MaxBodyBytes bounds an uploaded handoff (default 512 MiB).
	MaxBodyBytes int64
	// Client makes the pushes (default: a client with a 30 s timeout).
	Client *http.Client
}

// KVServer serves the KV handoff endpoints.
type KVServer struct {
	cfg KVServerConfig
	mux *http.ServeMux
}

// NewKVServer checks cfg and builds the handler.
func NewKVServer(cfg KVServerConfig) (*KVServer, error) {
	if cfg.Store == nil || len(cfg.Workers) == 0 {
		return nil, errors.New("worker.KVServerConfig: Store and at least one built-in worker are required")
	}
	for _, w := range cfg.Workers {
		if _, ok := w.Engine().(*Builtin); !ok {
			return nil, fmt.Errorf("worker.KVServerConfig.Workers: %s is not a built-in engine", w.Name())
		}
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 512 << 20
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 30 * time.Second}
	}
	s := &KVServer{cfg: cfg, mux: http.NewServeMux()}
	s.mux.HandleFunc("POST "+KVPrefillPath, s.prefill)
	s.mux.HandleFunc("POST "+KVHandoffsPath, s.park)
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *KVServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Authenticate != nil {
		if _, err := s.cfg.Authenticate(r); err != nil {
			WriteKVError(w, err)
			return
		}
	}
	s.mux.ServeHTTP(w, r)
}

// least is the built-in worker with the fewest generations running.
func (s *KVServer) least() *Worker {
	best := s.cfg.Workers[0]
	for _, w := range s.cfg.Workers[1:] {
		if w.Inflight() < best.Inflight() {
			best = w
		}
	}
	return best
}

func (s *KVServer) prefill(w http.ResponseWriter, r *http.Request) {
	var pr KVPrefillRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 16<<20)).Decode(&pr); err != nil {
		WriteKVError(w, llm.Errorf(llm.CodeInvalid, "prefill request: %v", err))
		return
	}
	req := pr.LLM()
	wk := s.least()
	b := wk.Engine().(*Builtin)
	prompt := b.eng.Model().ChatTokens(req.Messages)
	hashes := kvcache.BlockHashes(prompt, b.eng.Config().BlockSize)
	if pr.PushTo != "" {
		u, err := url.Parse(pr.PushTo)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			WriteKVError(w, llm.Errorf(llm.CodeInvalid, "push_to %q is not an http(s) URL", pr.PushTo))
			return
		}
		dst, err := NewRemote(RemoteConfig{URL: pr.PushTo, APIKey: pr.PushKey})
		if err != nil {
			WriteKVError(w, llm.Errorf(llm.CodeInvalid, "push_to: %v", err))
			return
		}
		dst.kvClient = s.cfg.Client
		h, _, err := wk.prefillTo(r.Context(), req, len(prompt), hashes, dst)
		if err != nil {
			WriteKVError(w, err)
			return
		}
		writeJSON(w, KVPrefillAnswer{Handoff: h.id, Bytes: h.Bytes, PromptTokens: h.PromptTokens, PrefixHitTokens: h.PrefixHitTokens,
			PrefillMicros: h.Prefill.Microseconds(), TransferMicros: h.Transfer.Microseconds()})
		return
	}
	var raw []byte
	var out Handoff
	_, err := wk.slot(r.Context(), len(prompt), hashes, func() error {
		h, o, err := b.prefill(r.Context(), req)
		if err != nil {
			return err
		}
		out = o
		raw, err = h.MarshalBinary()
		return err
	})
	if err != nil {
		WriteKVError(w, err)
		return
	}
	w.Header().Set("Content-Type", HandoffContentType)
	w.Header().Set(hdrPromptTokens, strconv.Itoa(out.PromptTokens))
	w.Header().Set(hdrPrefixHits, strconv.Itoa(out.PrefixHitTokens))
	w.Header().Set(hdrPrefillUS, strconv.FormatInt(out.Prefill.Microseconds(), 10))
	w.Write(raw)
}

func (s *KVServer) park(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(io.LimitReader(r.Body, s.cfg.MaxBodyBytes+1))
	if err != nil {
		WriteKVError(w, llm.Errorf(llm.CodeInvalid, "read handoff: %v", err))
		return
	}
	if int64(len(raw)) > s.cfg.MaxBodyBytes {
		WriteKVError(w, llm.Errorf(llm.CodeInvalid, "handoff over %d bytes", s.cfg.MaxBodyBytes))
		return
	}
	h, err := lm.DecodeHandoff(raw)
	if err != nil {
		WriteKVError(w, llm.Errorf(llm.CodeInvalid, "%v", err))
		return
	}
	if fp := s.cfg.Workers[0].Engine().(*Builtin).eng.Model().Fingerprint(); fp != h.Model {
		WriteKVError(w, llm.Errorf(llm.CodeInvalid, "handoff from model %016x; this worker runs %016x", h.Model, fp))
		return
	}
	id, err := s.cfg.Store.Put(h, int64(len(raw)))
	if err != nil {
		WriteKVError(w, err)
		return
	}
	writeJSON(w, KVParkAnswer{Handoff: id, Bytes: int64(len(raw))})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

var kvStatus = map[llm.Code]int{
	llm.CodeInvalid: http.StatusBadRequest, llm.CodeContextLength: http.StatusBadRequest,
	llm.CodeAuth: http.StatusUnauthorized, llm.CodePermission: http.StatusForbidden,
	llm.CodeBudget: http.StatusTooManyRequests, llm.CodeOverloaded: http.StatusServiceUnavailable,
	llm.CodeUnavailable: http.StatusServiceUnavailable, llm.CodeTimeout: http.StatusGatewayTimeout,
	llm.CodeCancelled: 499,
}

// WriteKVError answers err in the KV endpoints' JSON error format, with its
// code's HTTP status.
func WriteKVError(w http.ResponseWriter, err error) {
	var e kvError
	e.Error.Code, e.Error.Message = llm.CodeOf(err), err.Error()
	status, ok := kvStatus[e.Error.Code]
	if !ok {
		status = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(e)
}

// ReadKVError turns an error answer back into an *llm.Error; a 404 (not a
// Phaseless worker, or an older one) is ErrSplitUnsupported.
func ReadKVError(resp *http.Response) error {
	if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
		return ErrSplitUnsupported
	}
	var e kvError
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(body, &e) != nil || e.Error.Code == "" {
		return llm.Errorf(llm.CodeUnavailable, "kv endpoint answered %d: %.200s", resp.StatusCode, body)
	}
	return &llm.Error{Code: e.Error.Code, Message: e.Error.Message, Retryable: e.Error.Code == llm.CodeOverloaded || e.Error.Code == llm.CodeUnavailable}
}

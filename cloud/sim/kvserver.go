package sim

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/phaseless/phaseless/cloud/worker"
	"github.com/phaseless/phaseless/llm"
)

// A simulated worker takes either half of a split request over the same
// endpoints as a Phaseless cloud (cloud/worker's KVServer), so the live
// coordinator's remote-to-remote split runs on sim:// workers as on real
// ones:
//
//	POST /v1/kv/prefill    worker.KVPrefillRequest with push_to (another
//	                       simulated worker). The prompt joins this engine's
//	                       batch with one output token; once sampled, the
//	                       handoff is POSTed to push_to's /v1/kv/handoffs and
//	                       the answer is worker.KVPrefillAnswer.
//	POST /v1/kv/handoffs   a SimHandoff (SimHandoffContentType). The
//	                       transfer takes the link's time on this worker's
//	                       NIC (one transfer at a time, as the Cluster costs
//	                       it); then the handoff is parked and the answer is
//	                       worker.KVParkAnswer. A chat completion naming it
//	                       (x-phaseless-kv-handoff) decodes from it.
//
// There are no real blocks to move, so what travels is their description:
// the model, the prompt's length and the bytes the blocks would take.

// SimHandoffContentType is the media type of an encoded SimHandoff.
const SimHandoffContentType = "application/x-phaseless-sim-kv"

// SimHandoff describes the KV blocks a simulated prefill hands over.
type SimHandoff struct {
	Version      int    `json:"sim_kv"` // simHandoffVersion
	Model        string `json:"model"`
	PromptTokens int    `json:"prompt_tokens"`
	// Fleet and GPU name the sending worker's fleet and GPU: the receiver
	// picks the link as the Cluster does between two pools (defaultLink).
	Fleet string `json:"fleet"`
	GPU   string `json:"gpu"`
	// Bytes is the prompt's KV size in the model's layout.
	Bytes int64 `json:"kv_bytes"`
}

const simHandoffVersion = 1

// maxSimHandoff bounds an uploaded SimHandoff's encoding.
const maxSimHandoff = 4 << 10

// DecodeSimHandoff parses and checks an encoded SimHandoff.
func DecodeSimHandoff(raw []byte) (SimHandoff, error) {
	var h SimHandoff
	if len(raw) > maxSimHandoff {
		return h, fmt.Errorf("sim handoff: %d bytes, at most %d", len(raw), maxSimHandoff)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return SimHandoff{}, fmt.Errorf("sim handoff: %w", err)
	}
	if dec.More() {
		return SimHandoff{}, errors.New("sim handoff: trailing data")
	}
	switch {
	case h.Version != simHandoffVersion:
		return SimHandoff{}, fmt.Errorf("sim handoff: version %d, want %d", h.Version, simHandoffVersion)
	case h.Model == "" || h.PromptTokens < 1 || h.Bytes < 0:
		return SimHandoff{}, fmt.Errorf("sim handoff: model %q, %d prompt tokens, %d bytes", h.Model, h.PromptTokens, h.Bytes)
	}
	return h, nil
}

// kvState is a Server's side of splits: its place in the cluster (for the
// link a handoff crosses), its NIC's queue and the parked handoffs.
type kvState struct {
	fleet string // the Fleet this server belongs to ("" alone)
	pool  Pool   // its fleet's GPUs, for defaultLink
	link  *Link  // every handoff's link, when the URL set one
	// sleep waits out a transfer (tests record it instead).
	sleep  func(context.Context, time.Duration) error
	client *http.Client

	mu      sync.Mutex // guards nicFree, parked
	nicFree time.Time
	parked  map[string]parkedSim
}

type parkedSim struct {
	h       SimHandoff
	expires time.Time
}

// parkTTL is how long a handoff waits for its decode request (which
// follows the prefill's answer at once), as worker.HandoffStore's default.
const parkTTL = 30 * time.Second

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// linkFrom is the link a handoff from h's sender crosses to this server.
func (k *kvState) linkFrom(h *SimHandoff) Link {
	if k.link != nil {
		return *k.link
	}
	if k.fleet != "" && h.Fleet == k.fleet {
		return defaultLink(&k.pool, &k.pool)
	}
	// Another fleet is another pool: another machine.
	return defaultLink(&k.pool, &Pool{})
}

// take removes the handoff parked under id, checking that it is for this
// model and prompt.
func (k *kvState) take(id, model string, prompt int) error {
	k.mu.Lock()
	p, ok := k.parked[id]
	delete(k.parked, id)
	k.mu.Unlock()
	switch {
	case !ok || !time.Now().Before(p.expires):
		return llm.Errorf(llm.CodeInvalid, "kv handoff %q is unknown or expired", id)
	case p.h.Model != model:
		return llm.Errorf(llm.CodeInvalid, "kv handoff from model %s; this worker runs %s", p.h.Model, model)
	case p.h.PromptTokens != prompt:
		return llm.Errorf(llm.CodeInvalid, "kv handoff holds %d prompt tokens; the request has %d", p.h.PromptTokens, prompt)
	}
	return nil
}

// park receives a handoff: the blocks cross the link on this worker's NIC,
// queued behind the transfers already under way.
func (s *Server) park(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(io.LimitReader(r.Body, maxSimHandoff+1))
	if err != nil {
		worker.WriteKVError(w, llm.Errorf(llm.CodeInvalid, "read handoff: %v", err))
		return
	}
	h, err := DecodeSimHandoff(raw)
	if err != nil {
		worker.WriteKVError(w, llm.Errorf(llm.CodeInvalid, "%v (a simulated worker takes handoffs from simulated workers only)", err))
		return
	}
	if h.Model != s.model {
		worker.WriteKVError(w, llm.Errorf(llm.CodeInvalid, "handoff from model %s; this worker runs %s", h.Model, s.model))
		return
	}
	if h.PromptTokens > s.eng.d.MaxModelLen {
		worker.WriteKVError(w, llm.Errorf(llm.CodeInvalid, "handoff of %d prompt tokens; this worker's model takes at most %d", h.PromptTokens, s.eng.d.MaxModelLen))
		return
	}
	k := &s.kv
	dt := k.linkFrom(&h).TransferTime(s.eng.d, h.PromptTokens)
	k.mu.Lock()
	now := time.Now()
	k.nicFree = now.Add(max(0, k.nicFree.Sub(now)) + dt)
	wait, ends := k.nicFree.Sub(now), k.nicFree
	k.mu.Unlock()
	if err := k.sleep(r.Context(), wait); err != nil {
		// A transfer given up gives its time on the NIC back while it is
		// still the last one queued (those behind it keep their places).
		k.mu.Lock()
		if k.nicFree.Equal(ends) {
			k.nicFree = ends.Add(-dt)
		}
		k.mu.Unlock()
		worker.WriteKVError(w, llm.Errorf(llm.CodeCancelled, "transfer: %v", err))
		return
	}
	var b [16]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	k.mu.Lock()
	now = time.Now()
	for key, p := range k.parked {
		if !now.Before(p.expires) {
			delete(k.parked, key)
		}
	}
	k.parked[id] = parkedSim{h: h, expires: now.Add(parkTTL)}
	k.mu.Unlock()
	writeJSON(w, worker.KVParkAnswer{Handoff: id, Bytes: h.Bytes})
}

// kvPrefill runs a request's prefill in this engine's batch and pushes the
// handoff to the decode worker push_to names.
func (s *Server) kvPrefill(w http.ResponseWriter, r *http.Request) {
	var pr worker.KVPrefillRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 16<<20)).Decode(&pr); err != nil {
		worker.WriteKVError(w, llm.Errorf(llm.CodeInvalid, "prefill request: %v", err))
		return
	}
	u, err := url.Parse(pr.PushTo)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// Without push_to the caller wants the blocks themselves, which a
		// simulated worker does not have.
		worker.WriteKVError(w, llm.Errorf(llm.CodeInvalid, "push_to %q is not an http(s) URL (a simulated worker hands its KV to another simulated worker only)", pr.PushTo))
		return
	}
	req := pr.LLM()
	start := time.Now()
	q := s.promptSeq(req, 1)
	if q.Prompt+max(1, req.MaxTokens) > s.eng.d.MaxModelLen {
		worker.WriteKVError(w, llm.Errorf(llm.CodeInvalid, "prompt (%d tokens) + max_tokens (%d) exceed the model length %d", q.Prompt, req.MaxTokens, s.eng.d.MaxModelLen))
		return
	}
	if err := s.run(r.Context(), q, start, func(time.Duration) error { return nil }); err != nil {
		worker.WriteKVError(w, err)
		return
	}
	prefilled := time.Now()
	s.mu.Lock()
	hits := q.CachedTokens
	s.mu.Unlock()
	h := SimHandoff{Version: simHandoffVersion, Model: s.model, PromptTokens: q.Prompt, Fleet: s.kv.fleet, GPU: s.eng.d.GPU.Name,
		Bytes: int64(float64(q.Prompt) * s.eng.d.Model.KVBytesPerToken())}
	id, err := s.push(r.Context(), strings.TrimSuffix(pr.PushTo, "/")+worker.KVHandoffsPath, pr.PushKey, h)
	if err != nil {
		worker.WriteKVError(w, err)
		return
	}
	writeJSON(w, worker.KVPrefillAnswer{Handoff: id, Bytes: h.Bytes, PromptTokens: q.Prompt, PrefixHitTokens: hits,
		PrefillMicros: prefilled.Sub(start).Microseconds(), TransferMicros: time.Since(prefilled).Microseconds()})
}

// push POSTs h to a decode worker's handoff endpoint and returns the id it
// was parked under.
func (s *Server) push(ctx context.Context, to, key string, h SimHandoff) (string, error) {
	body, err := json.Marshal(h)
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, to, bytes.NewReader(body))
	if err != nil {
		return "", llm.Errorf(llm.CodeInvalid, "push_to: %v", err)
	}
	req.Header.Set("Content-Type", SimHandoffContentType)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := s.kv.client.Do(req)
	if err != nil {
		return "", llm.Errorf(llm.CodeUnavailable, "push to %s: %v", req.URL.Host, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", worker.ReadKVError(resp)
	}
	var a worker.KVParkAnswer
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&a); err != nil || a.Handoff == "" {
		return "", llm.Errorf(llm.CodeUnavailable, "push to %s: bad park answer: %v", req.URL.Host, err)
	}
	return a.Handoff, nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm"
)

// kvDo POSTs body to one of the server's KV endpoints and returns the
// response, or the error it answered with.
func (r *Remote) kvDo(ctx context.Context, path, contentType string, body []byte) (*http.Response, error) {
	if !r.SplitSupported() {
		return nil, ErrSplitUnsupported
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.endpoint(path), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", contentType)
	if r.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+r.cfg.APIKey)
	}
	c := r.kvClient
	if c == nil {
		c = r.stream.HTTP()
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, llm.Errorf(llm.CodeUnavailable, "remote %s: %v", r.base.Host, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		err := ReadKVError(resp)
		if err == ErrSplitUnsupported {
			r.noKV.Store(true)
		}
		return nil, err
	}
	return resp, nil
}

// SplitSupported reports whether the server may take a half of a split:
// false once it answered 404 on /v1/kv/, so later splits do not ask again.
func (r *Remote) SplitSupported() bool { return !r.noKV.Load() }

// park uploads an encoded handoff to this (decode) server and returns the
// id it is parked under.
func (r *Remote) park(ctx context.Context, raw []byte) (string, error) {
	resp, err := r.kvDo(ctx, KVHandoffsPath, HandoffContentType, raw)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var a KVParkAnswer
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&a); err != nil || a.Handoff == "" {
		return "", llm.Errorf(llm.CodeUnavailable, "remote %s: bad park answer: %v", r.base.Host, err)
	}
	return a.Handoff, nil
}

// PrefillTo implements Splitter. To a remote dst the server pushes the
// blocks itself; to a built-in dst it answers with them.
func (r *Remote) PrefillTo(ctx context.Context, req *llm.Request, dst Engine) (Handoff, error) {
	if !KVCarries(req) {
		return Handoff{}, stageErr(StagePrefill, ErrSplitUnsupported)
	}
	pr := newKVPrefillRequest(req)
	switch d := dst.(type) {
	case *Remote:
		pr.PushTo, pr.PushKey = d.base.String(), d.cfg.APIKey
	case *Builtin:
	default:
		return Handoff{}, stageErr(StageTransfer, ErrSplitUnsupported)
	}
	body, err := json.Marshal(pr)
	if err != nil {
		return Handoff{}, stageErr(StagePrefill, err)
	}
	start := time.Now()
	resp, err := r.kvDo(ctx, KVPrefillPath, "application/json", body)
	if err != nil {
		// The server cannot tell us which half failed beyond its message;
		// the prefill is the part it ran.
		return Handoff{}, stageErr(StagePrefill, err)
	}
	defer resp.Body.Close()
	if d, ok := dst.(*Builtin); ok {
		raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<30))
		if err != nil {
			return Handoff{}, stageErr(StageTransfer, llm.Errorf(llm.CodeUnavailable, "remote %s: %v", r.base.Host, err))
		}
		h, err := lm.DecodeHandoff(raw)
		if err != nil {
			return Handoff{}, stageErr(StageTransfer, llm.Errorf(llm.CodeUnavailable, "remote %s: %v", r.base.Host, err))
		}
		if fp := d.eng.Model().Fingerprint(); fp != h.Model {
			return Handoff{}, stageErr(StageTransfer, llm.Errorf(llm.CodeInvalid, "decode engine runs model %016x, the prefill ran %016x", fp, h.Model))
		}
		out := Handoff{local: h, Bytes: int64(len(raw))}
		out.PromptTokens, _ = strconv.Atoi(resp.Header.Get(hdrPromptTokens))
		out.PrefixHitTokens, _ = strconv.Atoi(resp.Header.Get(hdrPrefixHits))
		us, _ := strconv.ParseInt(resp.Header.Get(hdrPrefillUS), 10, 64)
		out.Prefill = time.Duration(us) * time.Microsecond
		out.Transfer = max(0, time.Since(start)-out.Prefill)
		return out, nil
	}
	var a KVPrefillAnswer
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&a); err != nil || a.Handoff == "" {
		return Handoff{}, stageErr(StageTransfer, llm.Errorf(llm.CodeUnavailable, "remote %s: bad prefill answer: %v", r.base.Host, err))
	}
	return Handoff{id: a.Handoff, Bytes: a.Bytes, PromptTokens: a.PromptTokens, PrefixHitTokens: a.PrefixHitTokens,
		Prefill: time.Duration(a.PrefillMicros) * time.Microsecond, Transfer: time.Duration(a.TransferMicros) * time.Microsecond}, nil
}

// Resume implements Splitter: a chat completion naming the parked handoff.
func (r *Remote) Resume(ctx context.Context, req *llm.Request, h Handoff, emit llm.Emit) (llm.Final, error) {
	if h.id == "" {
		return llm.Final{}, stageErr(StageResume, fmt.Errorf("the kv handoff was not parked at %s", r.base.Host))
	}
	cp := *req
	cp.KVHandoff = h.id
	fin, err := r.stream.Generate(ctx, &cp, emit)
	if err != nil {
		return fin, stageErr(StageResume, err)
	}
	return fin, nil
}

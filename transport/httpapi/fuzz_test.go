package httpapi

import (
	"net/http"
	"testing"
)

// checkDecoded holds for every request a decoder accepts, whatever the bytes.
func checkDecoded(t *testing.T, lim limits, msgs, maxTokens int, temp float64) {
	t.Helper()
	if msgs == 0 {
		t.Fatal("accepted a request without messages")
	}
	if maxTokens < 1 || maxTokens > lim.maxTokens {
		t.Fatalf("accepted max tokens %d outside 1..%d", maxTokens, lim.maxTokens)
	}
	if temp < 0 || temp > 2 {
		t.Fatalf("accepted temperature %g", temp)
	}
}

func FuzzDecodeChat(f *testing.F) {
	for _, s := range []string{
		chatBody,
		`{"messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`,
		`{"messages":[{"role":"developer","content":[{"type":"text","text":"x"}]}],"max_completion_tokens":4096,"temperature":"high","stop":"\n","seed":7}`,
		`{"messages":[{"role":"user","content":null}],"max_tokens":0}`,
		`{"messages":[{"role":"user","content":"hi"}],"temperature":1e309}`,
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":9223372036854775808}`,
		`[]`, `null`, `{"messages":{}}`,
	} {
		f.Add([]byte(s))
	}
	lim := limits{maxTokens: DefaultMaxOutputTokens, defaultTokens: DefaultOutputTokens}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, _, e := decodeChat(body, lim)
		if e != nil {
			if req != nil || e.status != http.StatusBadRequest && e.status != http.StatusNotFound || e.message == "" {
				t.Fatalf("bad rejection: %+v", e)
			}
			return
		}
		checkDecoded(t, lim, len(req.Messages), req.MaxTokens, req.Temperature)
	})
}

func FuzzDecodeMessages(f *testing.F) {
	for _, s := range []string{
		msgBody,
		`{"model":"auto","system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_tokens":1,"stream":true,"top_k":3,"stop_sequences":["x"]}`,
		`{"model":"auto","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"auto","messages":[{"role":"user","content":"hi"}],"max_tokens":-1,"temperature":"low"}`,
		`{"model":"","messages":[],"max_tokens":null}`,
		`{`, `""`,
	} {
		f.Add([]byte(s))
	}
	lim := limits{maxTokens: DefaultMaxOutputTokens, defaultTokens: DefaultOutputTokens}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, _, e := decodeMessages(body, lim)
		if e != nil {
			if req != nil || e.status != http.StatusBadRequest && e.status != http.StatusNotFound || e.message == "" {
				t.Fatalf("bad rejection: %+v", e)
			}
			return
		}
		checkDecoded(t, lim, len(req.Messages), req.MaxTokens, req.Temperature)
	})
}

func FuzzParseHints(f *testing.F) {
	f.Add("auto", "high", "0.5", "600", "intent")
	f.Add("CLOUD", "none", "0.9", "3600s", "hybrid")
	f.Add("x", "", "NaN", "-1", "")
	f.Fuzz(func(t *testing.T, route, prefetch, batch, ttl, mode string) {
		hdr := http.Header{}
		hdr.Set("x-phaseless-route", route)
		hdr.Set("x-prefetch-hint", prefetch)
		hdr.Set("x-batch-threshold", batch)
		hdr.Set("x-cache-ttl", ttl)
		hdr.Set("x-semantic-mode", mode)
		h, e := parseHints(hdr, false)
		if e != nil {
			return
		}
		if h.BatchThreshold != 0 && (h.BatchThreshold < 0.1 || h.BatchThreshold > 0.9) {
			t.Fatalf("batch threshold %g accepted", h.BatchThreshold)
		}
		if h.CacheTTL != 0 && (h.CacheTTL.Seconds() < 300 || h.CacheTTL.Seconds() > 3600) {
			t.Fatalf("cache ttl %v accepted", h.CacheTTL)
		}
	})
}

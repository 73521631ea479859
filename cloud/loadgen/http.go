package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/phaseless/phaseless/cloud/replay"
)

// HTTPConfig is the API a load run talks to.
type HTTPConfig struct {
	// URL is the base URL of a cloud or agent (http://127.0.0.1:8080).
	URL string
	// API is "openai" (/v1/chat/completions, the default) or "anthropic"
	// (/v1/messages).
	API string
	// APIKey, when set, is sent as the API expects it.
	APIKey string
	// Model is the requested model. Default "auto".
	Model string
	// MaxTokens per request. Default 16.
	MaxTokens int
	// Header is added to every request (x-phaseless-route: cloud, ...).
	Header http.Header
	// Prompt returns request seq of stream's user message. Default: a short
	// question naming both, so no two requests share a whole prompt.
	Prompt func(stream, seq int) string
	// Client sends the requests. Default: a client that keeps an idle
	// connection per stream (one connection per open stream is what
	// HTTP/1.1 streaming needs; dialing anew per request would measure the
	// dialer).
	Client *http.Client
}

func (c *HTTPConfig) fill(streams int) {
	if c.API == "" {
		c.API = "openai"
	}
	if c.Model == "" {
		c.Model = "auto"
	}
	if c.MaxTokens == 0 {
		c.MaxTokens = 16
	}
	if c.Prompt == nil {
		c.Prompt = func(stream, seq int) string {
			return fmt.Sprintf("Stream %d, request %d: what is the tyre pressure of car %d?", stream, seq, stream*7+seq)
		}
	}
	if c.Client == nil {
		c.Client = &http.Client{Transport: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			MaxIdleConnsPerHost: streams,
			MaxIdleConns:        streams,
		}}
	}
}

// Validate names the first bad field.
func (c *HTTPConfig) Validate() error {
	switch {
	case !strings.HasPrefix(c.URL, "http://") && !strings.HasPrefix(c.URL, "https://"):
		return fmt.Errorf("loadgen.HTTPConfig.URL: %q is not an http(s) URL", c.URL)
	case c.API != "openai" && c.API != "anthropic":
		return fmt.Errorf("loadgen.HTTPConfig.API: %q is not openai or anthropic", c.API)
	case c.MaxTokens < 1:
		return fmt.Errorf("loadgen.HTTPConfig.MaxTokens: %d must be ≥ 1", c.MaxTokens)
	}
	return nil
}

// HTTP returns a Send that streams chat requests to cfg.URL. streams is
// the run's stream count (it sizes the connection pool).
func HTTP(cfg HTTPConfig, streams int) (Send, error) {
	cfg.fill(streams)
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	base := strings.TrimRight(cfg.URL, "/")
	return func(ctx context.Context, stream, seq int) Sample {
		return cfg.send(ctx, base, stream, seq)
	}, nil
}

func (c *HTTPConfig) send(ctx context.Context, base string, stream, seq int) Sample {
	msg, _ := json.Marshal(c.Prompt(stream, seq))
	body := fmt.Sprintf(`{"model":%q,"max_tokens":%d,"stream":true,"messages":[{"role":"user","content":%s}]}`, c.Model, c.MaxTokens, msg)
	path := "/v1/chat/completions"
	if c.API == "anthropic" {
		path = "/v1/messages"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, strings.NewReader(body))
	if err != nil {
		return Sample{Outcome: Failed, Err: err.Error()}
	}
	for k, v := range c.Header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	if c.APIKey != "" {
		if c.API == "anthropic" {
			req.Header.Set("x-api-key", c.APIKey)
		} else {
			req.Header.Set("Authorization", "Bearer "+c.APIKey)
		}
	}
	if c.API == "anthropic" {
		req.Header.Set("anthropic-version", "2023-06-01")
	}
	start := time.Now()
	resp, err := c.Client.Do(req)
	if err != nil {
		return Sample{Outcome: Failed, Err: err.Error()}
	}
	defer resp.Body.Close()
	s := Sample{Status: resp.StatusCode}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		msg, shaped := errorShape(c.API, b)
		s.Outcome, s.Err = Failed, fmt.Sprintf("status %d: %s", resp.StatusCode, msg)
		if shaped && (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) {
			s.Outcome = Shed
		} else if !shaped {
			s.Err = fmt.Sprintf("status %d, not the %s error shape: %.200q", resp.StatusCode, c.API, b)
		}
		return s
	}
	s.EngineTTFT = EngineTTFT(resp.Header.Get("Server-Timing"))
	if err := readStream(c.API, resp.Body, func() { s.TTFT = time.Since(start) }); err != nil {
		s.Outcome, s.Err = Failed, err.Error()
		return s
	}
	if s.TTFT == 0 {
		s.Outcome, s.Err = Failed, "stream ended without a token"
	}
	return s
}

// errorShape reports whether b is an error in api's own JSON shape and
// returns its message.
func errorShape(api string, b []byte) (string, bool) {
	var e struct {
		Type  string `json:"type"`
		Error *struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &e) != nil || e.Error == nil || e.Error.Message == "" || e.Error.Type == "" {
		return "", false
	}
	if api == "anthropic" && e.Type != "error" {
		return "", false
	}
	return e.Error.Message, true
}

// readStream reads an SSE body to its end, calling first at the first
// text delta. It fails on an error event or a body that ends before the
// API's end marker.
func readStream(api string, body io.Reader, first func()) error {
	br := bufio.NewReaderSize(body, 16<<10)
	got := false
	event := ""
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if err == io.EOF {
				return fmt.Errorf("stream ended without its end marker")
			}
			return err
		}
		line = bytes.TrimRight(line, "\r\n")
		if v, ok := bytes.CutPrefix(line, []byte("event: ")); ok {
			event = string(v)
			continue
		}
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		if api == "openai" {
			if string(data) == "[DONE]" {
				return nil
			}
			if got && !bytes.Contains(data, []byte(`"error"`)) {
				// After the first token only the end and errors matter:
				// decoding every chunk made the client, on the same
				// machine, a large part of what it measured.
				continue
			}
			var c replay.ChatChunk
			if err := json.Unmarshal(data, &c); err != nil {
				return fmt.Errorf("bad chunk %.100q: %v", data, err)
			}
			if c.Error != nil {
				return fmt.Errorf("error event: %s", c.Error.Message)
			}
			if !got && len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
				got = true
				first()
			}
			continue
		}
		switch event {
		case "error":
			return fmt.Errorf("error event: %.200s", data)
		case "message_stop":
			return nil
		case "content_block_delta":
			if !got {
				got = true
				first()
			}
		}
	}
}

// EngineTTFT reads the "engine" entry of a Server-Timing header (W3C
// Server Timing: `engine;dur=12.5`, milliseconds), 0 when absent.
func EngineTTFT(h string) time.Duration {
	for entry := range strings.SplitSeq(h, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(entry), ";")
		if strings.TrimSpace(name) != "engine" {
			continue
		}
		for p := range strings.SplitSeq(params, ";") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(p), "dur="); ok {
				if f, err := strconv.ParseFloat(v, 64); err == nil && f > 0 && f < 1e9 {
					return time.Duration(f * 1e6)
				}
			}
		}
	}
	return 0
}

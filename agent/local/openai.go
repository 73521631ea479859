package local

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/transport/httpapi"
)

// OpenAI is an engine reached over an OpenAI-compatible chat completions
// API on the device (llama.cpp's llama-server, vLLM, a vendor NPU runtime).
// It always streams, so tokens pass through as the server produces them;
// the streaming itself is httpapi.Client, the same client the cloud uses
// for its remote workers.
type OpenAI struct {
	client *httpapi.Client
}

var _ llm.Generator = (*OpenAI)(nil)

// NewOpenAI returns an engine for the server at base, e.g.
// http://127.0.0.1:8081 or http://127.0.0.1:8081/v1. model is sent as the
// request's model ("" sends the request's own). client nil means a client
// without an overall timeout (streams may be long; ctx bounds them).
func NewOpenAI(base, model string, client *http.Client) (*OpenAI, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("local: %q is not an http(s) URL", base)
	}
	cfg := httpapi.ClientConfig{
		URL:  base,
		Name: "local server",
		// Proxy stays nil: a device-local server is never behind the
		// environment's proxy.
		FirstTokenTimeout: 5 * time.Minute, // prompt processing on a slow board
		HTTPClient:        client,
	}
	if model != "" {
		cfg.Model = func(string) string { return model }
	}
	c, err := httpapi.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	return &OpenAI{client: c}, nil
}

// Generate implements llm.Generator. A reply to continue (req.Continue)
// goes to the server as a last assistant message, which llama.cpp's
// llama-server continues as a prefill.
func (o *OpenAI) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	if req.Continue != "" && !req.Raw { // the client refuses a raw completion anyway
		r := *req
		r.Messages = append(slices.Clip(req.Messages), llm.Message{Role: "assistant", Content: req.Continue})
		r.Continue = ""
		req = &r
	}
	return o.client.Generate(ctx, req, emit)
}

// ErrNoServer is returned by Ping when the local server does not answer.
var ErrNoServer = errors.New("local: OpenAI-compatible server not reachable")

// Ping checks that the server answers GET /v1/models, for /readyz.
func (o *OpenAI) Ping(ctx context.Context) error {
	u := o.client.V1("/models")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := o.client.HTTP().Do(req)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoServer, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: GET %s: %s", ErrNoServer, u, resp.Status)
	}
	return nil
}

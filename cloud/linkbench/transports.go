package linkbench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/phaseless/phaseless/cloud/replay"
	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/transport/linkemu"
	"github.com/phaseless/phaseless/transport/pki"
	"github.com/phaseless/phaseless/transport/quic"
)

// prompt is request i's user message: the same on both transports.
func prompt(i int) string {
	return fmt.Sprintf("Request %d: what is the tyre pressure of car %d?", i, i*7+1)
}

// quicTransport is the agent's uplink: transport/quic's client, configured
// as agent.New configures it, through a UDP relay to the cloud's QUIC
// listener.
type quicTransport struct {
	tls    *tls.Config
	target string
}

func (quicTransport) name() string { return "QUIC" }

func (q quicTransport) listen(cfg linkemu.Config) (relay, string, error) {
	cfg.Target = q.target
	r, err := linkemu.ListenUDP(cfg)
	if err != nil {
		return nil, "", err
	}
	return r, r.Addr().String(), nil
}

func (q quicTransport) connect(ctx context.Context, addr string, maxTokens int) (func(context.Context, int, func()) error, io.Closer, error) {
	// The agent's defaults (agent.New) but for Background: the run wants
	// the connection before it starts measuring. A stream cut by a
	// blackout resumes for up to the agent's resume deadline.
	c, err := quic.Dial(ctx, addr, quic.ClientConfig{TLS: q.tls.Clone(), ResumeDeadline: quic.DefaultResumeDeadline,
		Backoff: quic.Backoff{Initial: 250 * time.Millisecond}})
	if err != nil {
		return nil, nil, err
	}
	stream := func(ctx context.Context, i int, tok func()) error {
		req := &llm.Request{Model: "auto", MaxTokens: maxTokens, Messages: []llm.Message{{Role: "user", Content: prompt(i)}}}
		_, err := c.Generate(ctx, req, func(t llm.Token) error {
			if t.Text != "" {
				tok()
			}
			return nil
		})
		return err
	}
	return stream, c, nil
}

// sseTransport is the baseline: OpenAI chat completions streamed as SSE
// over HTTP/2 on TCP+TLS (the same device certificate), through a TCP
// relay to a TLS front of the cloud's HTTP API.
type sseTransport struct {
	tls            *tls.Config
	target, apiKey string
}

func (sseTransport) name() string { return "SSE" }

func (s sseTransport) listen(cfg linkemu.Config) (relay, string, error) {
	cfg.Target = s.target
	r, err := linkemu.ListenTCP(cfg)
	if err != nil {
		return nil, "", err
	}
	return r, r.Addr().String(), nil
}

func (s sseTransport) connect(_ context.Context, addr string, maxTokens int) (func(context.Context, int, func()) error, io.Closer, error) {
	tr := &http.Transport{
		TLSClientConfig: s.tls.Clone(), ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}
	c := &http.Client{Transport: tr}
	stream := func(ctx context.Context, i int, tok func()) error {
		msg, _ := json.Marshal(prompt(i))
		body := fmt.Sprintf(`{"model":"auto","max_tokens":%d,"stream":true,"messages":[{"role":"user","content":%s}]}`, maxTokens, msg)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://localhost/v1/chat/completions", strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		if s.apiKey != "" {
			req.Header.Set("Authorization", "Bearer "+s.apiKey)
		}
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.ProtoMajor != 2 {
			return fmt.Errorf("got %s, want HTTP/2", resp.Proto)
		}
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
			return fmt.Errorf("status %d: %s", resp.StatusCode, b)
		}
		return readSSE(resp.Body, tok)
	}
	return stream, closerFunc(func() error { tr.CloseIdleConnections(); return nil }), nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// readSSE reads an OpenAI chat-completions stream to [DONE], calling tok at
// each event that carries text.
func readSSE(body io.Reader, tok func()) error {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: "))
		if !ok {
			continue
		}
		if string(data) == "[DONE]" {
			return nil
		}
		var c replay.ChatChunk
		if err := json.Unmarshal(data, &c); err != nil {
			return fmt.Errorf("bad event %.100q: %v", data, err)
		}
		if c.Error != nil {
			return fmt.Errorf("error event: %s", c.Error.Message)
		}
		if len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
			tok()
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return errors.New("stream ended without [DONE]")
}

// sseFront serves the cloud's HTTP API over TLS with HTTP/2 (the cloud's
// own listener is plain HTTP, meant to sit behind a load balancer that
// terminates TLS — which is what this is, on loopback before the link).
type sseFront struct {
	srv  *http.Server
	ln   net.Listener
	done chan error
}

func startSSEFront(pkiDir, upstream string) (*sseFront, error) {
	u, err := url.Parse(upstream)
	if err != nil {
		return nil, err
	}
	tc, err := pki.ServerTLS(pkiDir)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	proxy := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(u) },
		FlushInterval: -1, // every event at once, as the cloud writes it
	}
	f := &sseFront{srv: &http.Server{Handler: proxy, TLSConfig: tc, ReadHeaderTimeout: 10 * time.Second}, ln: ln, done: make(chan error, 1)}
	go func() { f.done <- f.srv.ServeTLS(ln, "", "") }()
	return f, nil
}

func (f *sseFront) Addr() string { return f.ln.Addr().String() }

func (f *sseFront) Close() error {
	err := f.srv.Close()
	<-f.done
	return err
}

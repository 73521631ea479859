package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/transport/linkemu"
	"github.com/phaseless/phaseless/transport/pki"
	"github.com/phaseless/phaseless/transport/quic"
)

// relayTo runs a transport/linkemu UDP relay in front of target with a
// clean link: the tests black it out (BlackOut, Restore) or move its path
// (ChangePath) themselves.
func relayTo(t *testing.T, target string) *linkemu.UDPRelay {
	t.Helper()
	r, err := linkemu.ListenUDP(linkemu.Config{Target: target})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// pacedEngine slows an engine to one token per `every`, so a blackout
// lands in the middle of an answer and the cloud keeps generating through
// it, as a GPU decoding a long answer would.
type pacedEngine struct {
	inner llm.Generator
	every time.Duration
	ended chan error // how each run ended
}

func (p *pacedEngine) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	fin, err := p.inner.Generate(ctx, req, func(tok llm.Token) error {
		select {
		case <-time.After(p.every):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		return emit(tok)
	})
	select {
	case p.ended <- err:
	default:
	}
	return fin, err
}

// startPacedCloud runs a phaseless/1 server with the built-in engine slowed
// to a token per `every`; mod adjusts its config.
func startPacedCloud(t *testing.T, pkiDir string, every time.Duration, mod func(*quic.ServerConfig)) (*quic.Server, *pacedEngine) {
	t.Helper()
	tc, err := pki.ServerTLS(pkiDir)
	if err != nil {
		t.Fatal(err)
	}
	eng := builtinEngine(t)
	p := &pacedEngine{inner: eng, every: every, ended: make(chan error, 8)}
	sc := quic.ServerConfig{Addr: "127.0.0.1:0", TLS: tc, Handler: p}
	if mod != nil {
		mod(&sc)
	}
	srv, err := quic.NewServer(sc)
	if err != nil {
		eng.Close()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(context.Background()) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; err != nil && !errors.Is(err, quic.ErrServerClosed) {
			t.Errorf("cloud Serve: %v", err)
		}
		eng.Close()
	})
	return srv, p
}

// streamed is what an app read from one OpenAI stream.
type streamed struct {
	text      string // the content deltas, joined
	chunks    int
	done      bool   // it ended with [DONE]
	continued string // the stats field of the token where the engine changed
	route     string // x-phaseless-route
}

// readStream reads an OpenAI stream, calling at(n) after the n-th content
// chunk.
func readStream(t *testing.T, url, body string, at func(n int)) streamed {
	t.Helper()
	resp := post(t, url+"/v1/chat/completions", body, "x-phaseless-route", "cloud")
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	s := streamed{route: resp.Header.Get("x-phaseless-route")}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if stats, ok := strings.CutPrefix(line, "phaseless: "); ok && strings.Contains(stats, `"continued"`) {
			s.continued = stats
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			s.done = true
			continue
		}
		var c struct {
			Choices []struct{ Delta struct{ Content string } }
		}
		if json.Unmarshal([]byte(data), &c) != nil || len(c.Choices) == 0 || c.Choices[0].Delta.Content == "" {
			continue
		}
		s.text += c.Choices[0].Delta.Content
		s.chunks++
		if at != nil {
			at(s.chunks)
		}
	}
	return s
}

// resumeAgent is an agent whose uplink goes through a relay to a paced
// cloud; the stall timeout is the client's default (1.2 s).
func resumeAgent(t *testing.T, deadline, every time.Duration, mod func(*quic.ServerConfig)) (*Agent, string, *linkemu.UDPRelay, *quic.Server, *pacedEngine) {
	t.Helper()
	pkiDir := t.TempDir()
	if err := pki.EnsureDev(pkiDir, "car-1"); err != nil {
		t.Fatal(err)
	}
	srv, eng := startPacedCloud(t, pkiDir, every, mod)
	relay := relayTo(t, srv.Addr().String())
	cfg := testConfig(t)
	cfg.Cloud, cfg.DeviceID, cfg.PKIDir = relay.Addr().String(), "car-1", pkiDir
	cfg.ResumeDeadline = deadline
	cfg.CloudFirstToken = time.Minute
	a, url := startAgent(t, cfg)
	waitUntil(t, "the agent to connect", func() bool { return a.cloud.Link().Connected })
	return a, url, relay, srv, eng
}

const resumeChat = `{"messages":[{"role":"user","content":"Tell me about tunnels, bridges and the roads between them."}],"max_tokens":160,"temperature":0.9,"seed":7,"stream":true}`

// TestBlackoutResumes is issue 31's 5 s tunnel: the link goes dark for 5 s
// in the middle of a cloud answer. The agent resumes the stream from the
// last token it delivered: the app's stream never breaks, and its text is
// exactly the text of the same request (fixed seed) with no blackout.
func TestBlackoutResumes(t *testing.T) {
	if raceEnabled {
		t.Skip("a 5 s blackout through the built-in engine: make test runs it without -race (RACE_FULL)")
	}
	a, url, relay, srv, _ := resumeAgent(t, 20*time.Second, 15*time.Millisecond, nil)
	clean := readStream(t, url, resumeChat, nil)
	if !clean.done || clean.chunks < 40 {
		t.Fatalf("uninterrupted answer: %d chunks, done %v", clean.chunks, clean.done)
	}
	var darkAt time.Time
	got := readStream(t, url, resumeChat, func(n int) {
		if n == 10 {
			relay.BlackOut()
			darkAt = time.Now()
			time.AfterFunc(5*time.Second, relay.Restore)
		}
	})
	t.Logf("answer of %d chunks finished %v after the blackout began; %d resumes", got.chunks, time.Since(darkAt), a.cloud.Link().Resumes)
	if !got.done || got.text != clean.text || got.continued != "" || !strings.HasPrefix(got.route, "cloud") {
		t.Fatalf("after the blackout: done %v, continued %q, route %q\ngot  %q\nwant %q", got.done, got.continued, got.route, got.text, clean.text)
	}
	if st := srv.Stats(); st.Resumed == 0 || st.Generations != 2 {
		t.Fatalf("cloud stats %+v: want one run per request, resumed", st)
	}
	waitUntil(t, "the cloud's buffer to be freed", func() bool { return srv.Stats().BufferedBytes == 0 })
}

// TestLongBlackoutContinuesLocally is issue 31's 90 s tunnel with the
// deadlines shortened by their flags (agent --resume-deadline 2s, cloud
// --resume-window 3s): the link stays dark past the agent's deadline, so
// the device's engine finishes the answer from the text delivered, the
// stream says so once in its stats field, and the cloud, which never hears
// from the device again, stops at the end of its window and frees its
// buffer.
func TestLongBlackoutContinuesLocally(t *testing.T) {
	if raceEnabled {
		t.Skip("waits out a resume deadline and a window: make test runs it without -race (RACE_FULL)")
	}
	// 200 ms a token: the cloud's answer (62 tokens with this seed) would
	// outlast the deadline, the server noticing the silence and the window.
	a, url, relay, srv, eng := resumeAgent(t, 2*time.Second, 200*time.Millisecond, func(sc *quic.ServerConfig) {
		sc.ResumeWindow = 3 * time.Second
		sc.KeepAlivePeriod, sc.MaxIdleTimeout = 500*time.Millisecond, 2*time.Second
	})
	var darkAt time.Time
	got := readStream(t, url, resumeChat, func(n int) {
		if n == 10 {
			relay.BlackOut() // for the rest of the test
			darkAt = time.Now()
		}
	})
	t.Logf("answer of %d chunks finished %v after the blackout began", got.chunks, time.Since(darkAt))
	if !got.done || !strings.Contains(got.continued, `"continued":{"route":"local","reason":"cloud_lost"}`) || !strings.HasPrefix(got.route, "cloud") {
		t.Fatalf("done %v continued %q route %q", got.done, got.continued, got.route)
	}
	recs := pendingRecords(t, a, 1)
	if len(recs) != 1 || recs[0].Outcome != "ok" || recs[0].ContinuedOn != "local" || recs[0].ContinueReason != llm.ContinueCloudLost {
		t.Fatalf("telemetry %+v", recs)
	}
	select {
	case err := <-eng.ended:
		if err == nil || !strings.Contains(err.Error(), "resume window") {
			t.Fatalf("the cloud's run ended with %v, want the window's end", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the cloud's run outlived its window")
	}
	waitUntil(t, "the cloud's buffer to be freed", func() bool { return srv.Stats().BufferedBytes == 0 })
}

package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/transport/httpapi"
	"github.com/phaseless/phaseless/transport/pki"
)

// slowWorker is an OpenAI-compatible engine behind the cloud: it streams a
// token every 20 ms until the request ends, or, for prompts containing
// "hold", sends nothing at all. reached is closed when a request arrives.
type slowWorker struct {
	once    sync.Once
	reached chan struct{}
}

func (w *slowWorker) Generate(ctx context.Context, req *llm.Request, emit llm.Emit) (llm.Final, error) {
	w.once.Do(func() { close(w.reached) })
	hold := strings.Contains(req.Messages[len(req.Messages)-1].Content, "hold")
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for i := 0; i < req.MaxTokens; i++ {
		select {
		case <-ctx.Done():
			return llm.Final{}, context.Cause(ctx)
		case <-tick.C:
		}
		if hold {
			i--
			continue
		}
		if err := emit(llm.Token{Text: "w "}); err != nil {
			return llm.Final{}, err
		}
	}
	return llm.Final{CompletionTokens: req.MaxTokens, FinishReason: "length"}, nil
}

// buildCloudOnce builds phaseless-cloud once for the package's tests;
// TestMain removes it.
var buildCloudOnce = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "phaseless-cloud-bin-")
	if err != nil {
		return "", err
	}
	builtCloudDir.Store(&dir)
	bin := filepath.Join(dir, "phaseless-cloud")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/phaseless/phaseless/cloud/cmd/phaseless-cloud").CombinedOutput()
	if err != nil {
		return "", &exec.ExitError{Stderr: out}
	}
	return bin, nil
})

var builtCloudDir atomic.Pointer[string]

func removeBuiltCloud() {
	if d := builtCloudDir.Load(); d != nil {
		os.RemoveAll(*d)
	}
}

// buildCloud returns the phaseless-cloud binary, built on first use.
func buildCloud(t *testing.T) string {
	t.Helper()
	bin, err := buildCloudOnce()
	if err != nil {
		t.Fatalf("build phaseless-cloud: %v %s", err, err.(*exec.ExitError).Stderr)
	}
	return bin
}

// startCloudProcess runs the real phaseless-cloud binary bin with the
// OpenAI-compatible server at workerURL as its only engine.
func startCloudProcess(t *testing.T, bin, pkiDir, quicAddr, workerURL string) *exec.Cmd {
	t.Helper()
	return runCloud(t, bin, "--dev", "--data-dir", t.TempDir(), "--pki-dir", pkiDir,
		"--http", "127.0.0.1:0", "--quic", quicAddr, "--mqtt", "", "--mqtt-tls", "",
		"--builtin-workers", "0", "--worker", workerURL, "--log-level", "warn")
}

// runCloud starts bin with args until the test ends, its log in the test's.
func runCloud(t *testing.T, bin string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stderr = &testLogWriter{t: t}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd
}

type testLogWriter struct {
	mu sync.Mutex
	t  *testing.T
}

func (w *testLogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t.Logf("cloud: %s", strings.TrimSpace(string(p)))
	return len(p), nil
}

// TestCloudKilledMidStream kills the real cloud process with SIGKILL while
// it streams an answer through the agent (no CONNECTION_CLOSE ever reaches
// the agent, as when a machine dies). With --resume-deadline 2s the agent's
// engine must finish the answer about 2 s after the cloud's last word (the
// stall detector notices at 1.2 s, the resume attempts give up at the
// deadline), marked continued in the stream; a request that had no token
// yet must be answered locally with x-fallback-reason; neither may wait for
// QUIC's 60 s idle timeout. The times are logged; the bound asserted (10 s)
// only separates "detected" from "waited for the idle timeout", it is not
// a latency test.
func TestCloudKilledMidStream(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs phaseless-cloud")
	}
	const bound = 10 * time.Second
	bin := buildCloud(t)
	pkiDir := t.TempDir()
	if err := pki.EnsureDev(pkiDir, "car-1"); err != nil {
		t.Fatal(err)
	}
	worker := &slowWorker{reached: make(chan struct{})}
	h, err := httpapi.NewHandler(worker, httpapi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	wln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", h)
	wsrv := &http.Server{Handler: mux}
	go wsrv.Serve(wln)
	t.Cleanup(func() { wsrv.Close() })

	for _, tc := range []struct {
		name   string
		hold   bool // the worker sends no token: the agent must answer locally
		prompt string
	}{
		{"mid-stream", false, "stream please"},
		{"before the first token", true, "hold on"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			worker.once, worker.reached = sync.Once{}, make(chan struct{})
			quicAddr := freeUDPAddr(t)
			cfg := testConfig(t)
			cfg.Cloud, cfg.DeviceID, cfg.PKIDir = quicAddr, "car-1", pkiDir
			cfg.CloudFirstToken = time.Minute // only the stall detector may end the wait
			cfg.ResumeDeadline = 2 * time.Second
			a, url := startAgent(t, cfg)
			cloud := startCloudProcess(t, bin, pkiDir, quicAddr, "http://"+wln.Addr().String())
			waitUntil(t, "the agent to connect", func() bool { return a.cloud.Link().Connected })
			// A stream long enough to be killed in the middle; a short local
			// answer, timed to its first chunk (the response headers), so the
			// time logged is the detection plus a first local token.
			maxTokens := map[bool]int{false: 2000, true: 8}
			body, _ := json.Marshal(map[string]any{"messages": []map[string]string{{"role": "user", "content": tc.prompt}}, "max_tokens": maxTokens[tc.hold], "stream": true})
			killedAt := make(chan time.Time, 1) // the kill may run on another goroutine
			kill := func() {
				killedAt <- time.Now()
				if err := cloud.Process.Signal(os.Kill); err != nil {
					t.Error(err)
				}
			}
			sinceKill := func() time.Duration {
				select {
				case k := <-killedAt:
					killedAt <- k
					return time.Since(k)
				default:
					return -1 // never killed
				}
			}
			if tc.hold {
				go func() { <-worker.reached; kill() }()
			}
			resp := post(t, url+"/v1/chat/completions", string(body), "x-phaseless-route", "cloud")
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if tc.hold {
				took := sinceKill()
				reason := resp.Header.Get("x-fallback-reason")
				t.Logf("local answer started %v after the kill; x-fallback-reason %q", took, reason)
				if resp.Header.Get("x-phaseless-route") != "local" || !strings.Contains(reason, "stalled") || took < 0 || took > bound {
					t.Fatalf("route %q reason %q after %v", resp.Header.Get("x-phaseless-route"), reason, took)
				}
				if evs := readSSE(t, resp.Body); len(evs) < 2 || evs[len(evs)-1].data != "[DONE]" {
					t.Fatalf("local answer %+v, want chunks and [DONE]", evs)
				}
				return
			}
			sc := bufio.NewScanner(resp.Body)
			chunks, last := 0, ""
			var continued time.Duration = -1
			for sc.Scan() {
				if stats, ok := strings.CutPrefix(sc.Text(), "phaseless: "); ok && strings.Contains(stats, `"continued":{"route":"local","reason":"cloud_lost"}`) {
					continued = sinceKill()
				}
				line, ok := strings.CutPrefix(sc.Text(), "data: ")
				if !ok {
					continue
				}
				if last = line; strings.Contains(line, `"choices"`) {
					if chunks++; chunks == 3 {
						kill()
					}
				}
			}
			t.Logf("the device's engine took over %v after the kill; the stream ended %v after it, after %d chunks", continued, sinceKill(), chunks)
			if chunks < 4 || last != "[DONE]" || continued < 0 || continued > bound {
				t.Fatalf("stream of %d chunks ended with %q, continued %v after the kill: want the answer finished locally", chunks, last, continued)
			}
		})
	}
}

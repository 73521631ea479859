package docscheck

import (
	"go/scanner"
	"go/token"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/phaseless/phaseless/client"
	"github.com/phaseless/phaseless/cloud/admit/redistest"
	"github.com/phaseless/phaseless/cloud/sim"
	"github.com/phaseless/phaseless/internal/metrics"
	"github.com/phaseless/phaseless/internal/metrics/metricstest"
	"github.com/phaseless/phaseless/transport/pki"
)

const root = "../.."

// TestDocsMatchCode: every flag, subcommand, metric family, x- header and
// endpoint README.md and docs/*.md name exists in the code, and every flag
// of every binary is documented (issue 36). The facts come from the code
// itself: the binaries' flag sets and --help, the /metrics pages and routes
// of a real cloud and agent on loopback, the header names in the Go source.
func TestDocsMatchCode(t *testing.T) {
	if raceEnabled {
		t.Skip("starts a cloud, a replica and an agent: tens of seconds under -race; make test runs it without (RACE_FULL)")
	}
	docs, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	f := Facts{Binaries: binaries(t)}
	f.Headers, f.Tests = sourceNames(t)
	f.Metrics, f.Endpoint = liveServers(t)
	for _, p := range Check(docs, f) {
		t.Error(p)
	}
}

// freeAddr is a loopback address nobody listens on (yet).
func freeAddr(t *testing.T, network string) string {
	t.Helper()
	if network == "udp" {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.LocalAddr().String()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// liveServers starts a cloud (embedded broker, a built-in worker with the
// host KV tier, its diagnostics listener) and an agent linked to it over
// QUIC and MQTT, sends one request through the agent to the cloud, and
// returns the metric families of all their /metrics pages and a probe that
// says whether any of their listeners serves a path.
func liveServers(t *testing.T) (map[string]string, func(string) bool) {
	dir := t.TempDir()
	pkiDir := filepath.Join(dir, "pki")
	if err := pki.EnsureDev(pkiDir, "docs-car"); err != nil {
		t.Fatal(err)
	}
	mqttTLS := freeAddr(t, "tcp")
	c := startCloud(t, "--dev", "--http", "127.0.0.1:0", "--quic", freeAddr(t, "udp"), "--mqtt", "127.0.0.1:0",
		"--mqtt-tls", mqttTLS, "--admin-listen", "127.0.0.1:0", "--pki-dir", pkiDir,
		"--data-dir", filepath.Join(dir, "cloud"), "--builtin-workers", "1", "--host-kv", "1")
	a := startAgent(t, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--device-id", "docs-car",
		"--cloud", c.QUICAddr(), "--pki-dir", pkiDir, "--mqtt", "tls://"+mqttTLS, "--data-dir", filepath.Join(dir, "agent"))
	// A second cloud replica on the first one's broker (--mqtt-url) with
	// --redis: the families of the external bus and the Redis store.
	c2 := startCloud(t, "--dev", "--http", "127.0.0.1:0", "--quic", "", "--mqtt", "", "--mqtt-tls", "",
		"--mqtt-url", "mqtt://"+c.MQTTAddr(), "--redis", redistest.Start(t),
		"--pki-dir", pkiDir, "--data-dir", filepath.Join(dir, "cloud2"), "--builtin-workers", "1")
	// A simulated GPU worker, as --worker sim://… starts it.
	simFleet, err := sim.StartFleet("sim://h100?n=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { simFleet.Close() })
	bases := []string{"http://" + c.HTTPAddr(), "http://" + c.AdminAddr(), "http://" + a.Addr().String(), "http://" + a.AdminAddr(),
		"http://" + c2.HTTPAddr(), simFleet.URLs()[0]}

	// One request pinned to the cloud, once the link is up, so the
	// families made on first use are on the pages too.
	deadline := time.Now().Add(60 * time.Second)
	for {
		req, _ := http.NewRequest("POST", bases[2]+"/v1/chat/completions", strings.NewReader(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("x-phaseless-route", "cloud")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && resp.Header.Get("x-fallback-reason") == "" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent never reached the cloud: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	do := func(method, url string) (int, string) {
		req, _ := http.NewRequest(method, url, strings.NewReader(""))
		if method == "POST" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
		return resp.StatusCode, string(b)
	}
	get := func(url string) (int, string) { return do("GET", url) }
	// The TYPE lines, not the parsed families: Prometheus's parser drops a
	// labelled family that has no samples yet, and it is still exposed.
	fams := map[string]string{}
	for _, b := range bases {
		code, page := get(b + "/metrics")
		if code != 200 {
			t.Fatalf("%s/metrics: %d", b, code)
		}
		metricstest.Parse(t, page)
		for _, m := range typeLineRE.FindAllStringSubmatch(page, -1) {
			fams[m[1]] = m[2]
		}
	}
	// The families an app exports with the Go client (docs/client.md).
	reg := metrics.NewRegistry()
	client.NewCollectors(reg)
	var page strings.Builder
	reg.WriteText(&page)
	for _, m := range typeLineRE.FindAllStringSubmatch(page.String(), -1) {
		fams[m[1]] = m[2]
	}

	// A path is served when some listener answers a GET or an empty POST
	// to it otherwise than it answers a path nobody serves (net/http's 404,
	// or the API's own 404 in its error shape).
	const nowhere = "/v1/docscheck-nowhere"
	answer := func(method, base, p string) string {
		code, body := do(method, base+p)
		return strconv.Itoa(code) + " " + strings.ReplaceAll(body, p, "PATH")
	}
	served := func(p string) bool {
		for _, b := range bases {
			for _, method := range []string{"GET", "POST"} {
				if answer(method, b, p) != answer(method, b, nowhere) {
					return true
				}
			}
		}
		return false
	}
	return fams, served
}

var typeLineRE = regexp.MustCompile(`(?m)^# TYPE (\S+) (\S+)$`)

var sourceHeaderRE = regexp.MustCompile(`(?i)(?:^|[^a-z0-9/-])(x-[a-z0-9]+(?:-[a-z0-9]+)*)`) // not application/x-…

var testFuncRE = regexp.MustCompile(`(?m)^func ((?:Test|Fuzz|Benchmark)[A-Za-z0-9_]*)\(`)

// sourceNames are the x- names in the string literals of the module's
// non-test Go files, and the test functions of its test files.
func sourceNames(t *testing.T) (headers, tests map[string]bool) {
	t.Helper()
	out, tests := map[string]bool{}, map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == "testdata" || n == "node_modules" || strings.HasPrefix(n, ".") && p != root {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.HasSuffix(p, "_test.go") {
			for _, m := range testFuncRE.FindAllSubmatch(src, -1) {
				tests[string(m[1])] = true
			}
			return nil
		}
		var s scanner.Scanner
		fset := token.NewFileSet()
		s.Init(fset.AddFile(p, -1, len(src)), src, nil, 0)
		for {
			_, tok, lit := s.Scan()
			if tok == token.EOF {
				return nil
			}
			if tok == token.STRING {
				for _, m := range sourceHeaderRE.FindAllStringSubmatch(lit, -1) {
					out[strings.ToLower(m[1])] = true
				}
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !out["x-phaseless-route"] || !tests["TestDocsMatchCode"] {
		t.Fatal("the source scan found no x-phaseless-route or no TestDocsMatchCode")
	}
	return out, tests
}

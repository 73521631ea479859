package ui_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/phaseless/phaseless/agent"
	"github.com/phaseless/phaseless/cloud"
	"github.com/phaseless/phaseless/cloud/fleetapi"
	"github.com/phaseless/phaseless/firmware"
	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/models/predictor"
	"github.com/phaseless/phaseless/transport/pki"
)

// screenshotDir, when set (PHASELESS_UI_SCREENSHOTS=docs), receives a PNG of
// each page the browser test visits; docs/ui-*.png were made this way.
var screenshotDir = os.Getenv("PHASELESS_UI_SCREENSHOTS")

// chromiumPath finds Debian's chromium; the test skips without it, except
// under CI=true, where .ci/run installs it.
func chromiumPath(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed (apt-get install chromium)")
	}
	t.Skip("chromium is not installed")
	return ""
}

// fleetOfAgents starts a --dev cloud with its embedded broker and n agents
// connected to it over MQTT, each with the shipped edge model; the cloud and
// the agents trust the OTA key it returns.
func fleetOfAgents(t *testing.T, n int) (*cloud.Cloud, []string, ed25519.PrivateKey) {
	t.Helper()
	pub, otaKey, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	pubPath := filepath.Join(t.TempDir(), "ota-pub.pem")
	if err := os.WriteFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: firmware.PublicKeyPEMType, Bytes: pub}), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := cloud.Config{OTAPub: pubPath}
	fs := flag.NewFlagSet("cloud", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	cfg.OTAPub = pubPath
	// Every listener on a random loopback port: the agents reach the fleet
	// over MQTT/TLS and the cloud's engines over QUIC, with certificates
	// from the cloud's dev PKI.
	cfg.HTTP, cfg.QUIC, cfg.MQTT, cfg.MQTTTLS, cfg.DataDir, cfg.Dev, cfg.BuiltinWorkers = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", t.TempDir(), true, 2
	c, err := cloud.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	wait, err := c.Serving(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var wg sync.WaitGroup // the agents
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		if err := wait(); err != nil {
			t.Errorf("cloud: %v", err)
		}
	})
	var urls []string
	for i := range n {
		acfg := agent.Config{}
		afs := flag.NewFlagSet("agent", flag.ContinueOnError)
		acfg.RegisterFlags(afs)
		acfg.Listen, acfg.DataDir, acfg.DeviceID = "127.0.0.1:0", t.TempDir(), fmt.Sprintf("car-%d", i+1)
		if err := pki.EnsureDev(c.PKIDir(), acfg.DeviceID); err != nil {
			t.Fatal(err)
		}
		acfg.PKIDir, acfg.Cloud, acfg.MQTT = c.PKIDir(), c.QUICAddr(), "mqtts://"+c.MQTTTLSAddr()
		acfg.OTAPub, acfg.OTAOrigins = pubPath, cli.StringList{"http://" + c.HTTPAddr()}
		acfg.Board = []string{"rk3588", "imx8"}[i%2]
		a, err := agent.New(acfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("agent: %v", err)
			}
		}()
		urls = append(urls, "http://"+a.Addr().String())
	}
	return c, urls, otaKey
}

// chat sends one request; route, when set, pins it (x-phaseless-route).
// It returns where the request ran (the answer's x-phaseless-route).
func chat(ctx context.Context, url, text, route string) (string, error) {
	body := fmt.Sprintf(`{"messages":[{"role":"user","content":%q}],"max_tokens":8}`, text)
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if route != "" {
		req.Header.Set("x-phaseless-route", route)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("status %d", resp.StatusCode)
	}
	return resp.Header.Get("x-phaseless-route"), nil
}

// TestDashboardInChromium drives the dashboard in a real headless Chromium
// against a running cloud with two agents: every page loads without a
// console error or exception, the device list shows and filters the
// agents, a command sent from a device page reaches the agent and its
// result comes back, and the live pools page changes its values while
// requests run, without a reload.
func TestDashboardInChromium(t *testing.T) {
	bin := chromiumPath(t)
	c, agents, otaKey := fleetOfAgents(t, 2)
	base := "http://" + c.HTTPAddr()

	// A staged rollout installs router 1.1 on car-2 (the imx8 board): its
	// fleet views must then show it.
	var bundle bytes.Buffer
	if err := firmware.WriteKind(&bundle, otaKey, firmware.KindPredictor, "1.1", "imx8", map[string][]byte{"router.onnx": predictor.Shipped()}, []string{"router.onnx"}); err != nil {
		t.Fatal(err)
	}
	api, err := fleetapi.NewClient(base, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	art, err := api.UploadArtifact(context.Background(), &bundle)
	if err != nil {
		t.Fatal(err)
	}
	// The rollout selects from the devices whose status is in: both.
	waitFor(t, hang(t, time.Minute), "both agents' status", func(ctx context.Context) (bool, error) {
		devs, err := api.Devices(ctx)
		return len(devs) == 2 && devs[0].State() == "online" && devs[1].State() == "online", err
	})
	if _, err := api.CreateRollout(context.Background(), fleetapi.RolloutSpec{Artifact: art.ID, Stages: []float64{1}, Select: map[string]string{"board": "imx8"}}); err != nil {
		t.Fatal(err)
	}

	// Requests on each agent (telemetry and route mix: car-1 has two
	// answered by the cloud, which records them as cloud/<pool>/<worker>)
	// and on the cloud's API (the live latency charts), until the test ends.
	// A request pinned to the cloud before car-1's QUIC link is up runs on
	// the device instead, so the local count is what the answers said.
	locals := map[string]int{}
	for i, a := range agents {
		routes := []string{"local"}
		if i == 0 {
			routes = append(routes, "cloud", "cloud")
		}
		for len(routes) > 0 {
			ran, err := chat(context.Background(), a, "turn on the AC", routes[0])
			if err != nil {
				t.Fatalf("%s, %s: %v", a, routes[0], err)
			}
			if strings.HasPrefix(ran, "cloud/") || routes[0] == "local" {
				routes = routes[1:]
			} else {
				time.Sleep(100 * time.Millisecond) // the link is still coming up
			}
			if !strings.HasPrefix(ran, "cloud") {
				locals[a]++
			}
			if locals[a] > 100 {
				t.Fatalf("%s: no request reached the cloud in 100 tries", a)
			}
		}
	}
	car1Local := locals[agents[0]]
	car1Mix := fmt.Sprintf("%.1f%% local · 2 cloud", 100*float64(car1Local)/float64(car1Local+2))
	load, stopLoad := context.WithCancel(context.Background())
	var loadWG sync.WaitGroup
	loadWG.Add(1)
	go func() {
		defer loadWG.Done()
		for i := 0; load.Err() == nil; i++ {
			_, _ = chat(load, base, fmt.Sprintf("what is the capital of Japan %d", i%5), "")
			select { // pace the load: the machine also runs the browser
			case <-load.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	defer func() { stopLoad(); loadWG.Wait() }()

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1360, 900),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	bctx, cancelB := chromedp.NewContext(actx)
	defer cancelB()
	// The first Run starts the browser and must not carry a timeout.
	if err := chromedp.Do(bctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatal(err)
	}
	bctx, cancelT := context.WithTimeout(bctx, 3*time.Minute) // hang guard only
	defer cancelT()

	// Every console error or warning, uncaught exception and browser log
	// error (a 404, a CSP refusal) fails the test at the end.
	cctx, stopConsole := context.WithCancel(bctx)
	messages := chromedp.Console(cctx)
	var problems []string
	consoleDone := make(chan struct{})
	go func() {
		defer close(consoleDone)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleWarning || m.IsException() {
				problems = append(problems, m.String()+" "+m.URL)
			}
		}
	}()
	shot := func(name string) {
		t.Helper()
		if screenshotDir == "" {
			return
		}
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(screenshotDir, "ui-"+name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	eval := func(ctx context.Context, expr string) (string, error) {
		return chromedp.Run(ctx, chromedp.Evaluate[string](expr, chromedp.EvalAwaitPromise))
	}
	must := func(v string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	do := func(actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, actions...); err != nil {
			t.Fatal(err)
		}
	}

	// Devices: both agents are listed (their status arrives over MQTT) with
	// their route mix once their telemetry is in; the filter hides the other.
	waitFor(t, bctx, "both agents listed with a route mix", func(ctx context.Context) (bool, error) {
		if err := chromedp.Do(ctx, chromedp.Navigate(base+"/ui/")); err != nil {
			return false, err
		}
		text, err := eval(ctx, `[...document.querySelectorAll("#devices tbody tr[data-search]")].map(r => r.innerText).join("\n")`)
		return strings.Contains(text, car1Mix) && strings.Contains(text, "100.0% local · 0 cloud") && strings.Count(text, "online") == 2 &&
			strings.Contains(text, "predictor 1.1"), err
	})
	if v := must(eval(bctx, `[...document.querySelectorAll("#devices tbody tr[data-search]")].filter(r => r.innerText.includes("predictor 1.1")).map(r => r.dataset.search).join(",")`)); !strings.HasPrefix(v, "car-2 ") {
		t.Errorf("router 1.1 is shown on %q, want car-2 only", v)
	}
	shot("devices")
	do(chromedp.SendKeys(chromedp.ID("device-filter"), "car-2"))
	if v := must(eval(bctx, `[...document.querySelectorAll("#devices tbody tr[data-search]")].filter(r => !r.hidden).map(r => r.dataset.search).join(",")`)); !strings.HasPrefix(v, "car-2") || strings.Contains(v, "car-1") {
		t.Errorf("filter car-2 leaves %q visible", v)
	}
	do(chromedp.Navigate(base + "/ui/?state=offline"))
	if v := must(eval(bctx, `String(document.querySelectorAll("#devices tbody tr[data-search]").length)`)); v != "0" {
		t.Errorf("state=offline lists %s devices, want 0", v)
	}

	// A command from the device page: the agent has no such predictor file,
	// so its answer is a failure with the agent's own error message.
	sendCommand := func(device, name, args string) string {
		t.Helper()
		do(chromedp.Navigate(base+"/ui/devices/"+device),
			chromedp.SetValue(chromedp.CSS(`#command-form input[name=name]`), name),
			chromedp.SetValue(chromedp.CSS(`#command-form textarea[name=args]`), args),
			chromedp.Submit(chromedp.CSS(`#command-form`)),
			chromedp.WaitVisible(chromedp.ID("sent")))
		return strings.TrimPrefix(must(chromedp.Run(bctx, chromedp.Text(chromedp.ID("sent")))), "sent command ")
	}
	id := sendCommand("car-1", "reload-predictor", "path=/nonexistent/predictor.onnx")
	waitFor(t, bctx, "the agent's result in the commands table", func(ctx context.Context) (bool, error) {
		if err := chromedp.Do(ctx, chromedp.Reload()); err != nil {
			return false, err
		}
		row, err := eval(ctx, fmt.Sprintf(`(document.querySelector('#commands tr[data-id=%q]') || {innerText: ""}).innerText`, id))
		return strings.Contains(row, "failed") && strings.Contains(row, "nonexistent"), err
	})
	shot("device")
	if v := must(chromedp.Run(bctx, chromedp.Text(chromedp.CSS("main")))); !strings.Contains(v, fmt.Sprintf("%d local · 2 cloud · 0 errors", car1Local)) {
		t.Errorf("car-1's page does not count its cloud requests:\n%s", v)
	}
	if v := must(eval(bctx, `document.querySelectorAll("#history tbody tr").length + "/" + document.querySelectorAll("#requests tbody tr").length`)); strings.HasPrefix(v, "0/") || strings.HasSuffix(v, "/0") {
		t.Errorf("device page: status history rows / request rows = %s", v)
	}

	do(chromedp.Navigate(base + "/ui/devices/car-2"))
	if v := must(chromedp.Run(bctx, chromedp.Text(chromedp.ID("artifacts")))); v != "predictor 1.1" {
		t.Errorf("car-2's page lists artifacts %q, want predictor 1.1", v)
	}

	// Rollouts: an update the agent refuses (its URL is not the cloud's)
	// shows as a rollout whose one device failed.
	sendCommand("car-2", "update", "url=https://updates.example/agent-1.2.plota")
	waitFor(t, bctx, "the update as a rollout with its failure", func(ctx context.Context) (bool, error) {
		if err := chromedp.Do(ctx, chromedp.Navigate(base+"/ui/rollouts")); err != nil {
			return false, err
		}
		text, err := eval(ctx, `document.querySelector("main").innerText`)
		return strings.Contains(text, "agent-1.2.plota") && strings.Contains(text, "car-2") && strings.Contains(text, "100.0%"), err
	})
	shot("rollouts")

	// Pools: the live values change while the load runs, with no reload
	// (the page's navigation entry stays the same).
	do(chromedp.Navigate(base+"/ui/pools"), chromedp.WaitVisible(chromedp.ID("workers")))
	marker := must(eval(bctx, `window.phaselessMarker = String(Math.random())`))
	var first string
	waitFor(t, bctx, "a first live value", func(ctx context.Context) (bool, error) {
		v, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("tokens-total")))
		first = v
		return v != "–" && v != "", err
	})
	waitFor(t, bctx, "the live values to change", func(ctx context.Context) (bool, error) {
		v, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("tokens-total")))
		if err != nil || v == first {
			return false, err
		}
		ttft, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("ttft-now")))
		return strings.HasSuffix(ttft, " ms") && !strings.HasPrefix(ttft, "–"), err
	})
	if v := must(eval(bctx, `window.phaselessMarker`)); v != marker {
		t.Error("the pools page reloaded instead of updating in place")
	}
	if v := must(eval(bctx, `fetch("/ui/api/live").then(r => r.json()).then(v => v.pools.map(p => p.name).join(","))`)); v != "prefill-heavy,decode-heavy,stream,conservative" {
		t.Errorf("live pools %q", v)
	}
	shot("pools")

	stopConsole()
	<-consoleDone
	for _, p := range problems {
		t.Errorf("browser reported: %s", p)
	}
}

// hang is a context that ends after d, a guard against a hung test only.
func hang(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitFor retries check until it holds; the browser context's deadline is
// the only bound, so the test never passes or fails on a wall-clock budget
// of its own.
func waitFor(t *testing.T, ctx context.Context, what string, check func(context.Context) (bool, error)) {
	t.Helper()
	var lastErr error
	for ctx.Err() == nil {
		ok, err := check(ctx)
		if ok && err == nil {
			return
		}
		lastErr = err
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	t.Fatalf("waiting for %s: %v (last error %v)", what, ctx.Err(), lastErr)
}

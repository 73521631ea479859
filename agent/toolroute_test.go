package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/phaseless/phaseless/models/cartools"
	"github.com/phaseless/phaseless/models/cloudmodel"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/transport/pki"
	"github.com/phaseless/phaseless/transport/quic"
)

// TestToolRequestsStayOnTheDevice: held-out car requests with the car's
// tools, through a running agent whose cloud is up and serves the cloud's
// built-in model (which calls no tools), routed by the shipped predictor
// with route auto, get the same calls as pinned to the device: every one
// stays local, and the response and its telemetry record say why. The
// same requests without tools show that the score alone would have sent
// some to the cloud (issue 28 found 7 of 40 there, answered in prose).
func TestToolRequestsStayOnTheDevice(t *testing.T) {
	if raceEnabled {
		t.Skip("50 requests through the edge model three ways: make test runs it without -race (RACE_FULL)")
	}
	pkiDir := t.TempDir()
	if err := pki.EnsureDev(pkiDir, "car-1"); err != nil {
		t.Fatal(err)
	}
	cloudAddr := freeUDPAddr(t)
	tc, err := pki.ServerTLS(pkiDir)
	if err != nil {
		t.Fatal(err)
	}
	cm, err := cloudmodel.Open()
	if err != nil {
		t.Fatal(err)
	}
	ce, err := lm.NewEngine(cm, lm.EngineConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer ce.Close()
	srv, err := quic.NewServer(quic.ServerConfig{Addr: cloudAddr, TLS: tc, Handler: ce})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(context.Background()) }()
	defer func() {
		srv.Close()
		if err := <-served; err != nil {
			t.Errorf("cloud Serve: %v", err)
		}
	}()

	cfg := testConfig(t)
	cfg.Predictor = "" // the shipped router model, as on a car
	cfg.Cloud, cfg.DeviceID, cfg.PKIDir = cloudAddr, "car-1", pkiDir
	a, url := startAgent(t, cfg)
	waitUntil(t, "the agent to connect", func() bool { return a.cloud.Link().Connected })

	type toolCase struct {
		Request string `json:"request"`
		Tool    string `json:"tool"`
	}
	f, err := os.Open("../models/edgemodel/testdata/toolcalls3.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cases []toolCase
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var c toolCase
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		if c.Tool != "" {
			cases = append(cases, c)
		}
	}
	var tools []map[string]any
	for _, tl := range cartools.Tools() {
		tools = append(tools, map[string]any{"type": "function", "function": map[string]any{"name": tl.Name, "description": tl.Description, "parameters": tl.Parameters}})
	}
	type outcome struct{ route, reason, tool string }
	ask := func(request string, withTools bool, pin string) outcome {
		body := map[string]any{"messages": []map[string]string{{"role": "user", "content": request}}, "max_tokens": 1, "temperature": 0}
		if withTools {
			body["tools"], body["max_tokens"] = tools, 160
		}
		raw, _ := json.Marshal(body)
		var hdr []string
		if pin != "" {
			hdr = []string{"x-phaseless-route", pin}
		}
		resp := post(t, url+"/v1/chat/completions", string(raw), hdr...)
		defer resp.Body.Close()
		var cr struct {
			Choices []struct {
				Message struct {
					ToolCalls []struct {
						Function struct{ Name string } `json:"function"`
					} `json:"tool_calls"`
				} `json:"message"`
			} `json:"choices"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&cr); err != nil || resp.StatusCode != 200 || len(cr.Choices) != 1 {
			t.Fatalf("%q: %d %v", request, resp.StatusCode, err)
		}
		o := outcome{route: resp.Header.Get("x-phaseless-route"), reason: resp.Header.Get("x-phaseless-route-reason")}
		if calls := cr.Choices[0].Message.ToolCalls; len(calls) > 0 {
			o.tool = calls[0].Function.Name
		}
		return o
	}
	auto, local, plain := make([]outcome, len(cases)), make([]outcome, len(cases)), make([]outcome, len(cases))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i, c := range cases {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			auto[i], local[i], plain[i] = ask(c.Request, true, ""), ask(c.Request, true, "local"), ask(c.Request, false, "")
		}()
	}
	wg.Wait()
	var rightAuto, rightLocal, scoreCloud int
	for i, c := range cases {
		if auto[i].route != "local" || auto[i].reason != "tools: the local model serves them" {
			t.Errorf("%q with tools, route auto: ran %q (%q)", c.Request, auto[i].route, auto[i].reason)
		}
		if auto[i].tool == c.Tool {
			rightAuto++
		}
		if local[i].tool == c.Tool {
			rightLocal++
		}
		if strings.HasPrefix(plain[i].route, "cloud") {
			scoreCloud++
		}
	}
	t.Logf("%d held-out car requests with tools: right tool %d with route auto, %d pinned local; without tools the score sends %d to the cloud",
		len(cases), rightAuto, rightLocal, scoreCloud)
	if rightAuto != rightLocal {
		t.Errorf("route auto got %d right tools, pinned local %d", rightAuto, rightLocal)
	}
	tooled := 0
	for _, r := range pendingRecords(t, a, 3*len(cases)) {
		if r.Reason == "tools: the local model serves them" && r.Decision == "local" && r.Path == "local" {
			tooled++
		}
	}
	if tooled != len(cases) {
		t.Errorf("%d telemetry records give the tools as the reason, want %d", tooled, len(cases))
	}
}

package agent

import (
	"fmt"
	"io"
	"sync"
	"testing"

	"github.com/phaseless/phaseless/models/predictor"
	"github.com/phaseless/phaseless/transport/pki"
)

// TestONNXRouterConcurrent runs the shipped ONNX router (onnx-go) behind the
// real HTTP API with a real QUIC cloud, 24 clients at once, while the model
// is hot-swapped back and forth as a reload-predictor command does: make
// test runs it under the race detector, which the predictor's own package
// is not. Every request must be answered, both routes must be taken, and
// telemetry must hold one record per request with the path it ran on.
func TestONNXRouterConcurrent(t *testing.T) {
	pkiDir := t.TempDir()
	if err := pki.EnsureDev(pkiDir, "car-1"); err != nil {
		t.Fatal(err)
	}
	addr := freeUDPAddr(t)
	cloud := startCloud(t, pkiDir, addr, &gatedEngine{held: make(chan struct{})})
	t.Cleanup(func() { cloud.stop(t) })
	cfg := testConfig(t)
	cfg.Predictor = "" // the shipped ONNX model
	cfg.RouteThreshold = 0
	cfg.Cloud, cfg.DeviceID, cfg.PKIDir = addr, "car-1", pkiDir
	a, url := startAgent(t, cfg)
	if a.pred == nil {
		t.Fatal("the agent does not run the ONNX predictor")
	}
	waitUntil(t, "the uplink", func() bool { return a.cloud.Link().Connected })

	second, err := predictor.Read(predictor.Shipped())
	if err != nil {
		t.Fatal(err)
	}
	first := a.pred.Current()
	prompts := []string{
		"turn on the seat heating", "set the temperature to 21 degrees", "navigate home",
		"Which of the following best explains why the Treaty of Westphalia is considered the origin of the modern state system?",
		"What is the capital of Australia?", "tell me about the history of the Byzantine empire",
	}
	const n = 24
	stop := make(chan struct{})
	var swaps sync.WaitGroup
	swaps.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			next := first
			if i%2 == 0 {
				next = second
			}
			if err := a.pred.SwapTo(next); err != nil {
				t.Error(err)
				return
			}
		}
	})
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			body := fmt.Sprintf(`{"messages":[{"role":"user","content":%q}],"max_tokens":2}`, prompts[i%len(prompts)])
			resp, err := postJSON(url+"/v1/chat/completions", body)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || resp.Header.Get("x-phaseless-route") == "" {
				errs <- fmt.Errorf("request %d: %d route %q: %s", i, resp.StatusCode, resp.Header.Get("x-phaseless-route"), b)
			}
		})
	}
	wg.Wait()
	close(stop)
	swaps.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	recs := pendingRecords(t, a, n)
	if len(recs) != n {
		t.Fatalf("%d telemetry records, want %d", len(recs), n)
	}
	paths := map[string]int{}
	for _, r := range recs {
		paths[r.Path]++
	}
	if paths["local"] == 0 || paths["cloud"] == 0 || paths["local"]+paths["cloud"] != n {
		t.Fatalf("paths %v: the router should send car commands local and knowledge questions to the cloud", paths)
	}
	t.Logf("paths %v", paths)
}

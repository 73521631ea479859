// Command demo runs Phaseless end to end on one machine with the embedded
// defaults: a cloud coordinator with its embedded MQTT broker and built-in
// engine, three agents with their shipped edge model and router, and a real
// workload mix (CLINC150 in-car commands and out-of-scope requests, RouteLLM
// MMLU questions from models/data/routing, and world-fact questions in
// wordings the cloud model was not trained on). Midway it stops the cloud to show the agents falling
// back to their own engine while telemetry piles up in bbolt, then brings it
// back and shows the backlog arriving in the fleet store.
//
// `make demo` builds the binaries and runs this. It starts the real binaries
// from bin/ as child processes and talks to them only through their public
// interfaces (HTTP, phaselessctl), so what it shows is what an operator gets.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/phaseless/phaseless/models/lmtrain/corpus"
	"github.com/phaseless/phaseless/models/predictor/train"
	"github.com/phaseless/phaseless/transport/linkemu"
	"github.com/phaseless/phaseless/transport/pki"
)

var devices = []string{"demo-car-1", "demo-car-2", "demo-car-3"}

func main() {
	binDir := flag.String("bin", "bin", "directory with the built binaries")
	dataDir := flag.String("data", "models/data/routing", "routing data for the workload (RouteLLM MMLU, CLINC150)")
	perPhase := flag.Int("requests", 12, "requests per phase")
	keep := flag.Bool("keep", false, "keep the work directory (logs, bbolt files) after the demo")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := run(ctx, *binDir, *dataDir, *perPhase, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

// demo holds the processes and addresses of one run.
type demo struct {
	bin, work string
	cloudArgs []string
	cloud     *proc
	cloudHTTP string
	agents    map[string]string // device → local API address
	procs     []*proc
	results   []result
	// sent counts the requests an agent took (HTTP 200): each leaves one
	// telemetry record, which the fleet store must end up holding once.
	sent int
	// cloudMetrics are the first cloud process's counters, read before the
	// outage.
	cloudMetrics []string
}

// cloudMetricNames are what the summary shows of the coordinator.
var cloudMetricNames = []string{"phaseless_sched_decision_seconds_count", `phaseless_cloud_sla_requests_total{result="met"}`, `phaseless_cloud_sla_requests_total{result="missed"}`, "phaseless_cloud_prefix_hit_tokens_total", "phaseless_cloud_prompt_tokens_total", "phaseless_cloud_output_tokens_total"}

func (d *demo) scrapeCloud(ctx context.Context) []string {
	var out []string
	for _, m := range cloudMetricNames {
		if v, ok := scrape(ctx, "http://"+d.cloudHTTP+"/metrics", m); ok {
			out = append(out, fmt.Sprintf("%s = %g", m, v))
		}
	}
	return out
}

func run(ctx context.Context, binDir, dataDir string, perPhase int, keep bool) error {
	work, err := os.MkdirTemp("", "phaseless-demo")
	if err != nil {
		return err
	}
	if keep {
		fmt.Println("work directory (kept):", work)
	} else {
		defer os.RemoveAll(work)
	}
	wl, err := loadWorkload(dataDir)
	if err != nil {
		return err
	}
	d := &demo{bin: binDir, work: work, agents: map[string]string{}}
	defer d.stopAll()

	step("1. PKI: a fleet CA, the cloud's certificate and one certificate per car")
	pkiDir := filepath.Join(work, "pki")
	if err := pki.EnsureDev(pkiDir, devices...); err != nil {
		return err
	}
	fmt.Println("   ", pkiDir, "(phaselessctl pki init / pki device do the same)")

	step("2. Cloud: QUIC ingress, scheduler, four built-in engines (shipped cloud model; one per pool, --dev), embedded MQTT broker (TLS, device certificates)")
	d.cloudHTTP = freeAddr("tcp")
	quicAddr, mqttAddr, mqttTLS := freeAddr("udp"), freeAddr("tcp"), freeAddr("tcp")
	d.cloudArgs = []string{"--dev", "--http", d.cloudHTTP, "--quic", quicAddr, "--mqtt", mqttAddr, "--mqtt-tls", mqttTLS,
		"--data-dir", filepath.Join(work, "cloud"), "--pki-dir", pkiDir, "--log-level", "warn"}
	if err := d.startCloud(ctx); err != nil {
		return err
	}

	step("3. Agents: local API, router (shipped predictor), shipped edge model, QUIC uplink, bbolt telemetry, MQTT fleet client")
	// The first car's uplink runs through an emulated link (transport/linkemu,
	// clean until step 5d blacks it out).
	relay, err := linkemu.ListenUDP(linkemu.Config{Target: quicAddr})
	if err != nil {
		return err
	}
	defer relay.Close()
	for i, id := range devices {
		addr := freeAddr("tcp")
		cloud := quicAddr
		if i == 0 {
			cloud = relay.Addr().String()
		}
		// The last car routes by the source articles' rule instead of the
		// shipped predictor, so the two routers can be compared on the same
		// workload.
		router := "shipped predictor"
		args := []string{"--listen", addr, "--device-id", id, "--cloud", cloud, "--pki-dir", pkiDir,
			"--mqtt", "tls://" + mqttTLS, "--data-dir", filepath.Join(work, id), "--log-level", "warn",
			"--cloud-first-token-timeout", "5s"}
		if i == len(devices)-1 {
			router = "entropy rule (> 4.2 bits/byte → cloud)"
			args = append(args, "--predictor", "entropy")
		}
		p, err := start(ctx, filepath.Join(work, id+".log"), filepath.Join(binDir, "phaseless-agent"), args...)
		if err != nil {
			return err
		}
		d.procs = append(d.procs, p)
		d.agents[id] = addr
		if err := waitReady(ctx, "http://"+addr+"/readyz"); err != nil {
			return err
		}
		fmt.Print(wrap(fmt.Sprintf("%s on http://%s, router: %s (logs %s)", id, addr, router, p.logPath), "    ", "      ", width))
	}
	if err := d.waitCloudLinks(ctx); err != nil {
		return err
	}

	step("4. Workload, cloud online: in-car commands (CLINC150 and spoken), general and fact questions, MMLU questions and out-of-scope requests; the agents decide")
	d.phase(ctx, "online", wl.mix(perPhase))

	step("5. Both APIs: an Anthropic Messages request, and a pinned route (x-phaseless-route: cloud)")
	d.anthropic(ctx, "demo-car-1", "What is the tire pressure for my car?")
	d.phase(ctx, "pinned", []prompt{{text: "Turn the fan to level 2", kind: "command", route: "cloud"}})

	step("5b. Cloud pools: four built-in workers, one per pool; a request split between two (prefill on one, KV handed to the other, decode there)")
	d.splitDemo(ctx)

	step("5c. Tool calls: the edge model calls the car's tools (climate, windows, timers, media, ...) and the car executes them")
	d.car(ctx, "demo-car-1")

	step("5d. Tunnel: a cloud answer streams to " + devices[0] + " while its link blacks out for 4 s and comes back")
	d.tunnel(ctx, devices[0], relay, 4*time.Second)

	step("6. Cloud outage: the cloud stops; agents answer locally and buffer telemetry in bbolt")
	d.cloudMetrics = d.scrapeCloud(ctx) // the restarted cloud starts its counters anew
	d.cloud.stop()
	outage := wl.mix(perPhase / 2)
	// One request pinned to the cloud shows the fallback: the agent answers
	// locally and says why in x-fallback-reason.
	outage = append(outage, prompt{text: "Explain how a heat pump works", kind: "pinned", route: "cloud"})
	d.phase(ctx, "outage", outage)

	step("7. Cloud back: the agents reconnect, and the offline backlog flows to the fleet store")
	if err := d.startCloud(ctx); err != nil {
		return err
	}
	if err := d.waitCloudLinks(ctx); err != nil {
		return err
	}
	d.phase(ctx, "recovered", wl.mix(perPhase/2))

	step("8. Fleet: what the operator sees with phaselessctl")
	if err := d.waitTelemetry(ctx); err != nil {
		fmt.Print(wrap(err.Error(), "    ", "    ", width))
	}
	for _, args := range [][]string{{"fleet", "devices"}, {"fleet", "telemetry", "count"}} {
		fmt.Printf("    $ phaselessctl %s\n", strings.Join(args, " "))
		out, err := d.ctl(ctx, args...)
		fmt.Print(indent(out, "      "))
		if err != nil {
			return fmt.Errorf("phaselessctl %s: %w", strings.Join(args, " "), err)
		}
	}

	step("9. Summary")
	d.summary()
	return nil
}

// prompt is one request of the workload.
type prompt struct {
	text  string
	kind  string // command | spoken-car | general | question | mmlu | out-of-scope
	route string // optional x-phaseless-route
}

type workload struct {
	commands, questions, mmlu, oos []string
	// general and spoken are the fresh set's open-domain questions and
	// car commands, shown apart in the summary: issue 19's goals are
	// stated on them (general questions to the cloud, car commands local).
	general, spoken []string
	rng             *rand.Rand
}

// carIntents are the CLINC150 intents an in-vehicle assistant should answer
// on the device (the edge model is trained on these domains).
var carIntents = map[string]bool{
	"gas": true, "gas_type": true, "tire_pressure": true, "oil_change_when": true, "oil_change_how": true,
	"directions": true, "traffic": true, "distance": true, "current_location": true, "weather": true,
	"time": true, "timer": true, "alarm": true, "play_music": true, "next_song": true, "change_volume": true,
	"mpg": true, "jump_start": true, "tire_change": true, "uber": true, "share_location": true,
}

func loadWorkload(dir string) (*workload, error) {
	d, err := train.LoadRouting(dir)
	if err != nil {
		return nil, fmt.Errorf("workload: %w", err)
	}
	w := &workload{rng: rand.New(rand.NewPCG(1, 2))}
	for _, u := range d.CLINC {
		switch {
		case u.Split != "test":
		case u.Intent == "oos":
			w.oos = append(w.oos, u.Text)
		case carIntents[u.Intent]:
			w.commands = append(w.commands, u.Text)
		}
	}
	for _, p := range d.MMLU {
		// The shipped byte-level models have a 256-token context; longer
		// exam questions would be refused by both engines.
		if train.HeldOut(p.Subject) && len(p.Prompt) < 180 {
			w.mmlu = append(w.mmlu, p.Prompt)
		}
	}
	// Fact questions in the wordings the cloud model's corpus held out
	// (the facts themselves it was trained on; docs/models.md).
	for _, e := range corpus.Facts(1, 1).Test {
		w.questions = append(w.questions, e.Prompt)
	}
	// The fresh set: general questions and car commands as people say them
	// ("who wrote Hamlet", "skip this song"), which the router never saw.
	for _, e := range d.Fresh {
		if e.Source == train.SourceFreshOpen {
			w.general = append(w.general, e.Text)
		} else {
			w.spoken = append(w.spoken, e.Text)
		}
	}
	if len(w.commands) == 0 || len(w.oos) == 0 || len(w.mmlu) == 0 || len(w.general) == 0 || len(w.spoken) == 0 {
		return nil, errors.New("workload: routing data has no test commands, out-of-scope, held-out MMLU prompts or fresh set")
	}
	return w, nil
}

// mix draws n prompts: two in five in-car commands (CLINC150's and, every
// other one, the fresh set's spoken ones), one in five general questions
// (the fresh set's and, every other one, fact questions), and one in ten
// each of exam questions and out-of-scope requests, the way a head unit's
// traffic skews towards commands.
func (w *workload) mix(n int) []prompt {
	out := make([]prompt, 0, n)
	pick := func(from []string, kind string) {
		out = append(out, prompt{text: from[w.rng.IntN(len(from))], kind: kind})
	}
	for i := range n {
		switch i % 5 {
		case 0:
			pick(w.commands, "command")
		case 2:
			pick(w.spoken, "spoken-car")
		case 1:
			if i/5%2 == 0 {
				pick(w.general, "general")
			} else {
				pick(w.questions, "question")
			}
		case 3:
			if i/5%2 == 0 {
				pick(w.mmlu, "mmlu")
			} else {
				pick(w.oos, "out-of-scope")
			}
		case 4:
			if i/5%2 == 0 {
				pick(w.general, "general")
			} else {
				pick(w.oos, "out-of-scope")
			}
		}
	}
	return out
}

// result is what one request gave.
type result struct {
	phase, device, kind string
	route, fallback     string
	ttft, total         time.Duration
	tokens              int
	err                 error
	// answered: the agent took the request (HTTP 200), so it has a
	// telemetry record even if the stream failed later.
	answered bool
}

// phase sends prompts round-robin over the agents, four at a time, and prints
// one line per request as it completes.
func (d *demo) phase(ctx context.Context, name string, prompts []prompt) {
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, 4)
		tab = requestTable()
	)
	fmt.Print(tab.header())
	for i, p := range prompts {
		dev := devices[i%len(devices)]
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			r, answer := d.chat(ctx, dev, p)
			r.phase = name
			mu.Lock()
			defer mu.Unlock()
			d.results = append(d.results, r)
			if r.answered {
				d.sent++
			}
			fmt.Print(tab.row([]string{dev, p.kind, r.route, r.fallback, ms(r.ttft), ms(r.total)}, short(p.text, 40)+" → "+answer))
			if r.err != nil { // a diagnosis, read whole
				fmt.Print(wrap("ERROR "+r.err.Error(), "      ", "        ", width))
			}
		}()
	}
	wg.Wait()
	fmt.Print(tab.flushLegend())
}

// requestTable is the per-request table of a phase: 82 columns (the longest
// built-in route, cloud/prefill-heavy/builtin-1, is 29); a longer route or any fallback reason goes to the legend.
func requestTable() *table {
	return newTable("    ",
		column{name: "device", width: 10}, column{name: "kind", width: 12},
		column{name: "route", width: 29, key: "r"}, column{name: "fallback", width: 8, key: "f"},
		column{name: "TTFT", width: 7, right: true}, column{name: "total", width: 7, right: true})
}

// chat sends one streaming OpenAI chat completion and measures it as a client
// sees it.
func (d *demo) chat(ctx context.Context, device string, p prompt) (result, string) {
	r := result{device: device, kind: p.kind}
	body, _ := json.Marshal(map[string]any{
		"model": "auto", "stream": true, "max_tokens": 48, "temperature": 0.2,
		"messages": []map[string]string{{"role": "user", "content": p.text}},
	})
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+d.agents[device]+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if p.route != "" {
		req.Header.Set("x-phaseless-route", p.route)
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.err = err
		return r, ""
	}
	defer resp.Body.Close()
	r.route, r.fallback = resp.Header.Get("x-phaseless-route"), resp.Header.Get("x-fallback-reason")
	r.answered = resp.StatusCode == http.StatusOK
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		r.err = fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
		return r, ""
	}
	var answer strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || line == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
			Error *struct{ Message string } `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &chunk); err != nil {
			continue
		}
		if chunk.Error != nil {
			r.err = errors.New(chunk.Error.Message)
			break
		}
		for _, c := range chunk.Choices {
			if c.Delta.Content != "" {
				if r.tokens == 0 {
					r.ttft = time.Since(start)
				}
				r.tokens++
				answer.WriteString(c.Delta.Content)
			}
		}
	}
	r.total = time.Since(start)
	if r.err == nil {
		r.err = sc.Err()
	}
	return r, strings.Join(strings.Fields(answer.String()), " ")
}

// anthropic sends one non-streaming Anthropic Messages request.
func (d *demo) anthropic(ctx context.Context, device, text string) {
	body, _ := json.Marshal(map[string]any{
		"model": "auto", "max_tokens": 48, "temperature": 0.2, // as the chat requests: tiny models ramble at 1
		"messages": []map[string]string{{"role": "user", "content": text}},
	})
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+d.agents[device]+"/v1/messages", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("anthropic-version", "2023-06-01")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Println("    anthropic:", err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		d.sent++
	}
	var msg struct {
		Content []struct{ Text string } `json:"content"`
		Usage   struct {
			Input  int `json:"input_tokens"`
			Output int `json:"output_tokens"`
		} `json:"usage"`
	}
	raw, _ := io.ReadAll(resp.Body)
	json.Unmarshal(raw, &msg)
	text = ""
	for _, c := range msg.Content {
		text += c.Text
	}
	fmt.Print(wrap(fmt.Sprintf("POST /v1/messages → HTTP %d, route %s, %d→%d tokens in %s:", resp.StatusCode,
		resp.Header.Get("x-phaseless-route"), msg.Usage.Input, msg.Usage.Output, ms(time.Since(start))), "    ", "      ", width))
	fmt.Println("      " + short(text, width-6))
}

func (d *demo) startCloud(ctx context.Context) error {
	p, err := start(ctx, filepath.Join(d.work, "cloud.log"), filepath.Join(d.bin, "phaseless-cloud"), d.cloudArgs...)
	if err != nil {
		return err
	}
	d.cloud = p
	d.procs = append(d.procs, p)
	if err := waitReady(ctx, "http://"+d.cloudHTTP+"/readyz"); err != nil {
		return err
	}
	fmt.Print(wrap(fmt.Sprintf("cloud on http://%s (logs %s)", d.cloudHTTP, p.logPath), "    ", "      ", width))
	return nil
}

// waitCloudLinks waits until every agent reports a live QUIC link, read from
// its /metrics, so the first phase measures routing rather than connecting.
func (d *demo) waitCloudLinks(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for _, id := range devices {
		for {
			if v, ok := scrape(ctx, "http://"+d.agents[id]+"/metrics", "phaseless_agent_cloud_connected"); ok && v == 1 {
				break
			}
			if time.Now().After(deadline) {
				fmt.Print(wrap(id+" has no cloud link yet; its requests will fall back to local", "    ", "      ", width))
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// waitTelemetry waits until the fleet store holds one record for every
// request an agent took (the chat phases, the Anthropic request and the car's
// tool calls), and says so only when the two counts are equal.
func (d *demo) waitTelemetry(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := d.ctl(ctx, "fleet", "telemetry", "count")
		n := firstInt(out)
		if err == nil && n == d.sent {
			fmt.Printf("    all %d requests the agents took have their record in the fleet store (%d stored)\n", d.sent, n)
			return nil
		}
		if err == nil && n > d.sent {
			return fmt.Errorf("the fleet store holds %d records for the %d requests the agents took", n, d.sent)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after 30 s the fleet store holds %d records for the %d requests the agents took (the rest are still buffered on the devices)", n, d.sent)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func (d *demo) ctl(ctx context.Context, args ...string) (string, error) {
	args = append(args, "--cloud", "http://"+d.cloudHTTP)
	out, err := exec.CommandContext(ctx, filepath.Join(d.bin, "phaselessctl"), args...).CombinedOutput()
	return string(out), err
}

func (d *demo) summary() {
	type agg struct {
		n, fallbacks, errs, tokens int
		ttft                       []time.Duration
	}
	by := map[string]*agg{}
	var keys []string
	for _, r := range d.results {
		route := r.route
		if i := strings.Index(route, "/"); i > 0 {
			route = route[:i]
		}
		k := r.phase + " " + route
		a := by[k]
		if a == nil {
			a = &agg{}
			by[k] = a
			keys = append(keys, k)
		}
		a.n++
		a.tokens += r.tokens
		if r.fallback != "" {
			a.fallbacks++
		}
		if r.err != nil {
			a.errs++
		}
		if r.ttft > 0 {
			a.ttft = append(a.ttft, r.ttft)
		}
	}
	fmt.Printf("    %-18s %8s %9s %7s %8s %10s\n", "phase / route", "requests", "fallbacks", "errors", "tokens", "TTFT p50")
	for _, k := range keys {
		a := by[k]
		slices.Sort(a.ttft)
		p50 := time.Duration(0)
		if len(a.ttft) > 0 {
			p50 = a.ttft[len(a.ttft)/2]
		}
		fmt.Printf("    %-18s %8d %9d %7d %8d %10s\n", k, a.n, a.fallbacks, a.errs, a.tokens, ms(p50))
	}
	// Where each car sent each kind of prompt while it had a choice (the
	// cloud was up and the request was not pinned).
	kinds := []string{"command", "spoken-car", "general", "question", "mmlu", "out-of-scope"}
	var row strings.Builder
	fmt.Fprintf(&row, "    %-13s", "sent to cloud")
	for _, kind := range kinds {
		fmt.Fprintf(&row, " %-12s", kind)
	}
	fmt.Println("\n" + strings.TrimRight(row.String(), " "))
	for _, dev := range devices {
		row.Reset()
		fmt.Fprintf(&row, "    %-13s", dev)
		for _, kind := range kinds {
			n, cloud := 0, 0
			for _, r := range d.results {
				if r.device == dev && r.kind == kind && r.phase != "outage" && r.phase != "pinned" && r.err == nil {
					n++
					if strings.HasPrefix(r.route, "cloud") {
						cloud++
					}
				}
			}
			fmt.Fprintf(&row, " %-12s", fmt.Sprintf("%d of %d", cloud, n))
		}
		fmt.Println(strings.TrimRight(row.String(), " "))
	}
	fmt.Println("\n    cloud coordinator before the outage:")
	for _, l := range d.cloudMetrics {
		fmt.Print(wrap(l, "      ", "        ", width))
	}
	fmt.Println("\n    Every request above ran on a real engine, chosen per request by measured signals;")
	fmt.Println("    logs and bbolt files are under the work directory (run with -keep to look at them).")
}

// proc is a child process whose output goes to a log file.
type proc struct {
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	once    sync.Once
}

func start(ctx context.Context, logPath, bin string, args ...string) (*proc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &proc{cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() { cmd.Wait(); logf.Close(); close(p.done) }()
	return p, nil
}

// stop asks the process to shut down gracefully, as an operator would.
func (p *proc) stop() {
	p.once.Do(func() {
		p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
	})
}

func (d *demo) stopAll() {
	for i := len(d.procs) - 1; i >= 0; i-- {
		d.procs[i].stop()
	}
}

func freeAddr(network string) string {
	if network == "udp" {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			panic(err)
		}
		defer c.Close()
		return c.LocalAddr().String()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func waitReady(ctx context.Context, url string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after 60 s", url)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w", url, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// scrape reads one unlabelled sample from a Prometheus text endpoint.
func scrape(ctx context.Context, url, name string) (float64, bool) {
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil
		}
	}
	return 0, false
}

func step(s string) { fmt.Print("\n" + wrap("== "+s, "", "   ", width)) }

func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0fms", float64(d)/float64(time.Millisecond))
}

func short(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func indent(s, pre string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString(pre + l + "\n")
	}
	return b.String()
}

func firstInt(s string) int {
	for _, f := range strings.Fields(s) {
		if n, err := strconv.Atoi(f); err == nil {
			return n
		}
	}
	return -1
}

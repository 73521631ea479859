// Package replay plays a real LLM serving trace (Azure LLM inference, Mooncake)
// against a running coordinator, with synthetic prompts of the trace's lengths,
// and reports latency, throughput and goodput per scheduling policy; phaselessctl
// replay is its command line.
package replay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/phaseless/phaseless/internal/metrics"
)

// traceRequest is one request of a trace, format-independent.
type traceRequest struct {
	At     time.Duration // arrival, relative to the first request
	Input  int           // prompt tokens
	Output int           // generated tokens
	Blocks []int         // mooncake hash_ids: equal ids = shared 512-token prefix blocks
	// PrefixLen leading prompt tokens are shared by every request with the
	// same PrefixID (a system prompt); 0 = none. Written and read as the
	// Mooncake format's optional prefix_id and prefix_length.
	PrefixID, PrefixLen int
}

// maxTraceTokens bounds a length read from a trace, so a hostile file cannot
// make the tool build gigabyte prompts.
const maxTraceTokens = 1 << 20

// parseAzureTrace reads the Azure LLM inference trace CSV
// (TIMESTAMP,ContextTokens,GeneratedTokens).
func parseAzureTrace(r io.Reader, limit int) ([]traceRequest, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = 3
	cr.ReuseRecord = true
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("azure trace: header: %w", err)
	}
	if strings.TrimSpace(strings.TrimPrefix(head[0], "\ufeff")) != "TIMESTAMP" || head[1] != "ContextTokens" || head[2] != "GeneratedTokens" {
		return nil, fmt.Errorf("azure trace: header %q, want TIMESTAMP,ContextTokens,GeneratedTokens", head)
	}
	var out []traceRequest
	var t0 time.Time
	for limit <= 0 || len(out) < limit {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("azure trace: %w", err)
		}
		line, _ := cr.FieldPos(0)
		ts, err := time.Parse("2006-01-02 15:04:05.9999999", rec[0])
		if err != nil {
			return nil, fmt.Errorf("azure trace line %d: timestamp %q: %w", line, rec[0], err)
		}
		in, err1 := strconv.Atoi(rec[1])
		outTok, err2 := strconv.Atoi(rec[2])
		if err1 != nil || err2 != nil || in < 0 || outTok < 0 || in > maxTraceTokens || outTok > maxTraceTokens {
			return nil, fmt.Errorf("azure trace line %d: token counts %q, %q", line, rec[1], rec[2])
		}
		if len(out) == 0 {
			t0 = ts
		}
		at := ts.Sub(t0)
		if at < 0 || (len(out) > 0 && at < out[len(out)-1].At) {
			return nil, fmt.Errorf("azure trace line %d: timestamp goes backwards", line)
		}
		out = append(out, traceRequest{At: at, Input: in, Output: outTok})
	}
	if len(out) == 0 {
		return nil, errors.New("azure trace: no requests")
	}
	return out, nil
}

// parseMooncakeTrace reads the Mooncake JSON-lines trace.
func parseMooncakeTrace(r io.Reader, limit int) ([]traceRequest, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	var out []traceRequest
	var t0 int64
	line := 0
	for sc.Scan() && (limit <= 0 || len(out) < limit) {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var rec struct {
			Timestamp *int64 `json:"timestamp"`
			Input     *int   `json:"input_length"`
			Output    *int   `json:"output_length"`
			HashIDs   []int  `json:"hash_ids"`
			PrefixID  int    `json:"prefix_id"`
			PrefixLen int    `json:"prefix_length"`
		}
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("mooncake trace line %d: %w", line, err)
		}
		if rec.Timestamp == nil || rec.Input == nil || rec.Output == nil {
			return nil, fmt.Errorf("mooncake trace line %d: timestamp, input_length and output_length are required", line)
		}
		if *rec.Input < 0 || *rec.Output < 0 || *rec.Input > maxTraceTokens || *rec.Output > maxTraceTokens || *rec.Timestamp < 0 || *rec.Timestamp > math.MaxInt64/int64(time.Millisecond) {
			return nil, fmt.Errorf("mooncake trace line %d: values out of range", line)
		}
		if rec.PrefixLen < 0 || rec.PrefixLen > 0 && rec.PrefixLen >= *rec.Input || rec.PrefixID < 0 || rec.PrefixID > math.MaxInt32 {
			return nil, fmt.Errorf("mooncake trace line %d: prefix_id %d, prefix_length %d of %d tokens", line, rec.PrefixID, rec.PrefixLen, *rec.Input)
		}
		if len(rec.HashIDs) > *rec.Input/512+1 {
			return nil, fmt.Errorf("mooncake trace line %d: %d hash_ids for %d tokens", line, len(rec.HashIDs), *rec.Input)
		}
		if len(out) == 0 {
			t0 = *rec.Timestamp
		}
		at := time.Duration(*rec.Timestamp-t0) * time.Millisecond
		if at < 0 || (len(out) > 0 && at < out[len(out)-1].At) {
			return nil, fmt.Errorf("mooncake trace line %d: timestamp goes backwards", line)
		}
		out = append(out, traceRequest{At: at, Input: *rec.Input, Output: *rec.Output, Blocks: rec.HashIDs, PrefixID: rec.PrefixID, PrefixLen: rec.PrefixLen})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("mooncake trace: %w", err)
	}
	if len(out) == 0 {
		return nil, errors.New("mooncake trace: no requests")
	}
	return out, nil
}

// replayWords is the vocabulary of synthetic prompts: common English words,
// so the prompts' entropy (about 4.1 bits/char) resembles real text rather
// than random bytes, which the scheduler would read as dense input.
var replayWords = strings.Fields(`the of and to in is you that it he was for on are as with his they at be this
have from or one had by word but not what all were we when your can said there use an each which she do how
their if will up other about out many then them these so some her would make like him into time has look two
more write go see number no way could people my than first water been call who oil its now find long down day
did get come made may part car road drive engine route traffic music call map fuel battery seat window light
speed lane brake tyre charge navigate weather temperature message phone play stop next home work parking`)

// promptMaker builds synthetic prompts of a trace's lengths. Mooncake's
// hash_ids become shared text blocks (equal ids → equal text), so prefix
// sharing in the trace is prefix sharing at the engines.
type promptMaker struct {
	salt          uint64 // differs per policy run, so one run's cache does not help the next
	scale         float64
	maxInput      int
	charsPerToken int
}

func (p promptMaker) tokens(n int) int {
	return max(1, min(p.maxInput, int(math.Round(float64(n)*p.scale))))
}

// text appends about n tokens of words drawn from a generator seeded by key.
func (p promptMaker) text(b *strings.Builder, key uint64, n int) {
	rng := rand.New(rand.NewPCG(p.salt, key))
	want := b.Len() + n*p.charsPerToken
	for b.Len() < want {
		w := replayWords[rng.IntN(len(replayWords))]
		if b.Len()+len(w)+1 > want {
			w = w[:max(0, want-b.Len()-1)]
		}
		b.WriteString(w)
		b.WriteByte(' ')
	}
}

func (p promptMaker) prompt(i int, r traceRequest) string {
	n := p.tokens(r.Input)
	var b strings.Builder
	b.Grow(n*p.charsPerToken + 16)
	if r.PrefixLen > 0 {
		// The shared prefix's words (keys ≡ 3 mod 4, apart from the
		// blocks' even keys and the requests' own), then the request's.
		pre := min(n-1, p.tokens(r.PrefixLen))
		p.text(&b, uint64(r.PrefixID)<<2|3, pre)
		p.text(&b, uint64(i)<<20|1, n-pre)
		return b.String()
	}
	if len(r.Blocks) == 0 {
		p.text(&b, uint64(i)<<20|1, n)
		return b.String()
	}
	block := max(1, p.tokens(512))
	for k, id := range r.Blocks {
		left := n - b.Len()/p.charsPerToken
		if left <= 0 {
			break
		}
		size := min(block, left)
		if k == len(r.Blocks)-1 {
			size = left // scaled blocks round; the last one takes the rest
		}
		p.text(&b, uint64(id)<<1, size)
	}
	return b.String()
}

// replayResult is one request's outcome.
type replayResult struct {
	ttft   time.Duration
	itls   []time.Duration
	tokens int
	status int
	err    string
}

type replayOptions struct {
	target, apiKey    string
	speedup           float64
	sloTTFT, sloITL   time.Duration
	outScale          float64
	maxOutput         int
	timeout           time.Duration
	maker             promptMaker
	client            *http.Client
	stderr            io.Writer
	sendPolicyHeaders bool
}

// replayRun sends every request at its (sped-up) arrival time and waits for all.
func replayRun(ctx context.Context, o replayOptions, policy string, reqs []traceRequest) ([]replayResult, time.Duration) {
	res := make([]replayResult, len(reqs))
	var wg sync.WaitGroup
	start := time.Now()
	for i, r := range reqs {
		due := start.Add(time.Duration(float64(r.At) / o.speedup))
		if d := time.Until(due); d > 0 {
			select {
			case <-ctx.Done():
				return res[:i], time.Since(start)
			case <-time.After(d):
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			maxTok := max(1, min(o.maxOutput, int(math.Round(float64(r.Output)*o.outScale))))
			res[i] = replayOne(ctx, o, policy, o.maker.prompt(i, r), maxTok)
		}()
	}
	wg.Wait()
	return res, time.Since(start)
}

func replayOne(ctx context.Context, o replayOptions, policy, prompt string, maxTokens int) replayResult {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	body, _ := json.Marshal(map[string]any{
		"model": "auto", "stream": true, "max_tokens": maxTokens, "temperature": 0,
		"messages": []map[string]string{{"role": "user", "content": prompt}},
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.target+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return replayResult{err: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	if o.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+o.apiKey)
	}
	if o.sendPolicyHeaders && policy != "" {
		req.Header.Set("x-phaseless-policy", policy)
	}
	start := time.Now()
	resp, err := o.client.Do(req)
	if err != nil {
		return replayResult{err: err.Error()}
	}
	defer resp.Body.Close()
	out := replayResult{status: resp.StatusCode}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		out.err = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
		return out
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	last := start
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ev ChatChunk
		if json.Unmarshal([]byte(data), &ev) != nil {
			continue
		}
		if ev.Error != nil {
			out.err = "stream error: " + ev.Error.Message
			return out
		}
		for _, c := range ev.Choices {
			if c.Delta.Content == "" {
				continue
			}
			now := time.Now()
			if out.tokens == 0 {
				out.ttft = now.Sub(start)
			} else {
				out.itls = append(out.itls, now.Sub(last))
			}
			last = now
			out.tokens++
		}
	}
	if err := sc.Err(); err != nil {
		out.err = err.Error()
	}
	return out
}

// replaySummary is one policy's row of the table.
type replaySummary struct {
	policy               string
	requests, ok, failed int
	ttft, itl            [3]time.Duration // p50, p95, p99
	tokensPerS, reqPerS  float64
	goodput, sloMet      float64 // requests/s meeting the SLO; share meeting it
	prefixHit            float64 // from the target's /metrics; NaN when unknown
	firstErr             string
}

func replayPercentiles(d []time.Duration) [3]time.Duration {
	if len(d) == 0 {
		return [3]time.Duration{}
	}
	slices.Sort(d)
	at := func(q float64) time.Duration { return d[min(len(d)-1, int(math.Ceil(q*float64(len(d))))-1)] }
	return [3]time.Duration{at(0.50), at(0.95), at(0.99)}
}

func replaySummarize(policy string, res []replayResult, wall time.Duration, o replayOptions) replaySummary {
	s := replaySummary{policy: policy, requests: len(res), prefixHit: math.NaN()}
	var ttfts, itls []time.Duration
	tokens, met := 0, 0
	for _, r := range res {
		if r.err != "" || r.tokens == 0 {
			s.failed++
			if s.firstErr == "" {
				s.firstErr = r.err
			}
			continue
		}
		s.ok++
		tokens += r.tokens
		ttfts = append(ttfts, r.ttft)
		itls = append(itls, r.itls...)
		var sum time.Duration
		for _, g := range r.itls {
			sum += g
		}
		meanITL := time.Duration(0)
		if len(r.itls) > 0 {
			meanITL = sum / time.Duration(len(r.itls))
		}
		if r.ttft <= o.sloTTFT && meanITL <= o.sloITL {
			met++
		}
	}
	s.ttft, s.itl = replayPercentiles(ttfts), replayPercentiles(itls)
	if secs := wall.Seconds(); secs > 0 {
		s.tokensPerS = float64(tokens) / secs
		s.reqPerS = float64(s.ok) / secs
		s.goodput = float64(met) / secs
	}
	if len(res) > 0 {
		s.sloMet = float64(met) / float64(len(res))
	}
	return s
}

// replayScrape reads two counters from the target's /metrics; ok is false
// when the target exposes no Phaseless metrics.
func replayScrape(ctx context.Context, o replayOptions) (hits, prompt float64, ok bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.target+"/metrics", nil)
	if err != nil {
		return 0, 0, false
	}
	resp, err := o.client.Do(req)
	if err != nil {
		return 0, 0, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, false
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return 0, 0, false
	}
	const hitsName, promptName = "phaseless_cloud_prefix_hit_tokens_total", "phaseless_cloud_prompt_tokens_total"
	m := metrics.Sums(body, map[string]bool{hitsName: true, promptName: true})
	hits, okH := m[hitsName]
	prompt, okP := m[promptName]
	return hits, prompt, okH && okP
}

func replayMS(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64)
}

func printReplay(w io.Writer, rows []replaySummary, o replayOptions) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\treqs\tok\tTTFT p50\tp95\tp99 ms\tITL p50\tp95\tp99 ms\ttok/s\treq/s\tgoodput req/s\tSLO met\tprefix hit\t")
	for _, r := range rows {
		hit := "-"
		if !math.IsNaN(r.prefixHit) {
			hit = fmt.Sprintf("%.0f%%", 100*r.prefixHit)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t%.2f\t%.2f\t%.0f%%\t%s\t\n", r.policy, r.requests, r.ok,
			replayMS(r.ttft[0]), replayMS(r.ttft[1]), replayMS(r.ttft[2]), replayMS(r.itl[0]), replayMS(r.itl[1]), replayMS(r.itl[2]),
			r.tokensPerS, r.reqPerS, r.goodput, 100*r.sloMet, hit)
	}
	tw.Flush()
	fmt.Fprintf(w, "SLO: TTFT ≤ %v and mean ITL ≤ %v. goodput = requests meeting it per second of the run.\n", o.sloTTFT, o.sloITL)
	for _, r := range rows {
		if r.firstErr != "" {
			fmt.Fprintf(w, "%s: %d failed; first: %s\n", r.policy, r.failed, r.firstErr)
		}
	}
}

// TraceRequest is one request of a trace, format-independent: arrival,
// prompt and output tokens, and Mooncake's shared-prefix block ids.
type TraceRequest = traceRequest

// WriteTrace writes reqs in the Mooncake format ReadTrace reads
// (timestamps in whole milliseconds), with prefix_id and prefix_length on
// requests that have a shared prefix: phaselessctl sim --write-trace.
func WriteTrace(w io.Writer, reqs []TraceRequest) error {
	type rec struct {
		Timestamp int64 `json:"timestamp"`
		Input     int   `json:"input_length"`
		Output    int   `json:"output_length"`
		HashIDs   []int `json:"hash_ids,omitempty"`
		PrefixID  int   `json:"prefix_id,omitempty"`
		PrefixLen int   `json:"prefix_length,omitempty"`
	}
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for _, r := range reqs {
		if err := enc.Encode(rec{r.At.Milliseconds(), r.Input, r.Output, r.Blocks, r.PrefixID, r.PrefixLen}); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// ReadTrace reads the first limit requests (0 = all) of a trace file in
// format azure or mooncake. The replay and the GPU simulator (phaselessctl
// sim) read traces with it.
func ReadTrace(path, format string, limit int) ([]TraceRequest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	switch format {
	case "azure":
		return parseAzureTrace(f, limit)
	case "mooncake":
		return parseMooncakeTrace(f, limit)
	}
	return nil, fmt.Errorf("trace format %q is not azure or mooncake", format)
}

// Config is one replay: the trace, how it is scaled, the target and the SLO
// that goodput counts against. phaselessctl replay maps its flags onto it.
type Config struct {
	Target        string        // coordinator base URL
	APIKey        string        // sent as a bearer token when set
	Trace         string        // trace file
	Format        string        // azure or mooncake
	Speedup       float64       // divide inter-arrival times by this; > 0
	Limit         int           // first N requests; 0 = all
	Policies      []string      // scheduler, round-robin, least-loaded; one run each
	Scale         float64       // prompt-length multiplier; > 0
	OutputScale   float64       // output-length multiplier; > 0
	MaxInput      int           // cap on prompt tokens after scaling; ≥ 1
	MaxOutput     int           // cap on max_tokens after scaling; ≥ 1
	CharsPerToken int           // prompt characters per token; ≥ 1
	SLOTTFT       time.Duration // goodput SLO: time to first token
	SLOITL        time.Duration // goodput SLO: mean time between tokens
	Timeout       time.Duration // per request
	Rounds        int           // repeat the comparison, rotating the policy order; ≥ 1
	Stdout        io.Writer     // the summary table
	Stderr        io.Writer     // progress and per-request failures
}

// Run replays cfg.Trace against cfg.Target once per policy and round and
// prints the summary table. It fails when a policy had no successful request.
func Run(ctx context.Context, cfg Config) error {
	reqs, err := ReadTrace(cfg.Trace, cfg.Format, cfg.Limit)
	if err != nil {
		return err
	}
	policies := cfg.Policies
	o := replayOptions{
		target: strings.TrimRight(cfg.Target, "/"), apiKey: cfg.APIKey, speedup: cfg.Speedup,
		sloTTFT: cfg.SLOTTFT, sloITL: cfg.SLOITL, outScale: cfg.OutputScale, maxOutput: cfg.MaxOutput, timeout: cfg.Timeout,
		maker:             promptMaker{scale: cfg.Scale, maxInput: cfg.MaxInput, charsPerToken: cfg.CharsPerToken},
		client:            &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512, Proxy: http.ProxyFromEnvironment}},
		stderr:            cfg.Stderr,
		sendPolicyHeaders: true,
	}
	span := reqs[len(reqs)-1].At
	fmt.Fprintf(cfg.Stdout, "replaying %d %s requests (%.0f s of trace at ×%g: %.1f s each run) against %s\n",
		len(reqs), cfg.Format, span.Seconds(), cfg.Speedup, span.Seconds()/cfg.Speedup, o.target)
	results := make([][]replayResult, len(policies))
	walls := make([]time.Duration, len(policies))
	hits, prompts := make([]float64, len(policies)), make([]float64, len(policies))
	metricsOK := true
	run := 0
	for round := 0; round < cfg.Rounds; round++ {
		for k := range policies {
			i := (k + round) % len(policies) // rotate the order each round
			run++
			o.maker.salt = uint64(run) // fresh text: no run reuses another's cached prefixes
			h0, p0, ok0 := replayScrape(ctx, o)
			res, wall := replayRun(ctx, o, policies[i], reqs)
			if err := ctx.Err(); err != nil {
				return err
			}
			h1, p1, ok1 := replayScrape(ctx, o)
			metricsOK = metricsOK && ok0 && ok1
			hits[i] += h1 - h0
			prompts[i] += p1 - p0
			results[i] = append(results[i], res...)
			walls[i] += wall
			fmt.Fprintf(cfg.Stderr, "round %d %s: %d requests in %.1f s\n", round+1, policies[i], len(res), wall.Seconds())
		}
	}
	var rows []replaySummary
	for i, p := range policies {
		row := replaySummarize(p, results[i], walls[i], o)
		if metricsOK && prompts[i] > 0 {
			row.prefixHit = hits[i] / prompts[i]
		}
		rows = append(rows, row)
	}
	printReplay(cfg.Stdout, rows, o)
	for _, r := range rows {
		if r.ok == 0 {
			return fmt.Errorf("policy %s: every request failed (%s)", r.policy, r.firstErr)
		}
	}
	return nil
}

// ChatChunk is what a load client reads of an OpenAI chat-completion stream
// event: the delta text, or the error an event carries instead.
type ChatChunk struct {
	Choices []struct {
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

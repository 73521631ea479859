package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// The cloud's pools and a prefill/decode split, shown on the cloud's own HTTP
// API (--dev honours x-phaseless-policy).

func init() {
	for _, pool := range []string{"decode-heavy", "prefill-heavy", "stream", "conservative"} {
		cloudMetricNames = append(cloudMetricNames, fmt.Sprintf(`phaseless_pool_requests_total{pool=%q}`, pool))
	}
	cloudMetricNames = append(cloudMetricNames, `phaseless_pd_handoffs_total{result="ok"}`,
		`phaseless_pd_handoff_bytes_total{prefill_pool="prefill-heavy",decode_pool="decode-heavy"}`,
		`phaseless_pd_handoff_prompt_tokens_total{prefill_pool="prefill-heavy",decode_pool="decode-heavy"}`)
}

// splitDemo runs one prompt on one worker and then split between the
// prefill-heavy and decode-heavy workers, at temperature 0, and shows that
// the answers are the same.
func (d *demo) splitDemo(ctx context.Context) {
	prompt := "Explain why the sky is blue, in one paragraph, for a driver who asked the car."
	var answers []string
	for _, policy := range []string{"scheduler", "disaggregated"} {
		route, decode, answer, took, err := d.cloudChat(ctx, prompt, policy)
		if err != nil {
			fmt.Printf("    %-13s ERROR %v\n", policy, err)
			return
		}
		if decode == "" {
			decode = "(same worker)"
		}
		fmt.Print(wrap(fmt.Sprintf("%-13s route %s, decode %s, %s", policy, route, decode, ms(took)), "    ", "      ", width))
		fmt.Println("      " + short(answer, width-6))
		answers = append(answers, answer)
	}
	fmt.Printf("    same tokens split and colocated (temperature 0): %v\n", answers[0] == answers[1])
}

// cloudChat sends one chat completion to the cloud with a policy (not
// streamed: the headers say where it ran either way).
func (d *demo) cloudChat(ctx context.Context, text, policy string) (route, decode, answer string, took time.Duration, err error) {
	body, _ := json.Marshal(map[string]any{
		"model": "auto", "max_tokens": 32, "temperature": 0,
		"messages": []map[string]string{{"role": "user", "content": text}},
	})
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+d.cloudHTTP+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-phaseless-policy", policy)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", "", "", 0, err
	}
	defer resp.Body.Close()
	var out struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK || len(out.Choices) == 0 {
		return "", "", "", 0, fmt.Errorf("HTTP %d: %v", resp.StatusCode, err)
	}
	return resp.Header.Get("x-phaseless-route"), resp.Header.Get("x-phaseless-decode"), out.Choices[0].Message.Content, time.Since(start), nil
}

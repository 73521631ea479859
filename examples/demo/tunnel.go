package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/phaseless/phaseless/transport/linkemu"
)

// tunnel streams a cloud answer to device, whose uplink runs through relay
// (a transport/linkemu link), blacks the link out for `dark` after the
// third chunk, as a tunnel does, and reports how the stream went: every
// chunk arrives once and it ends with [DONE], resumed from the cloud when
// the link is back within the agent's --resume-deadline, or finished by the
// device's engine (the "continued" stats field) when it is not.
func (d *demo) tunnel(ctx context.Context, device string, relay *linkemu.UDPRelay, dark time.Duration) {
	body, _ := json.Marshal(map[string]any{
		"model": "auto", "stream": true, "max_tokens": 200, "temperature": 0.2,
		"messages": []map[string]string{{"role": "user", "content": "Describe the drive through a long mountain tunnel, step by step."}},
	})
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+d.agents[device]+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-phaseless-route", "cloud")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Println("    tunnel:", err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		d.sent++
	}
	chunks, done, continued := 0, false, ""
	var last time.Time
	var gap time.Duration
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if stats, ok := strings.CutPrefix(sc.Text(), "phaseless: "); ok && strings.Contains(stats, `"continued"`) {
			continued = stats
		}
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		switch {
		case !ok:
			continue
		case data == "[DONE]":
			done = true
			continue
		case !strings.Contains(data, `"content"`):
			continue
		}
		now := time.Now()
		if chunks > 0 {
			gap = max(gap, now.Sub(last))
		}
		last = now
		if chunks++; chunks == 3 {
			relay.BlackOut()
			time.AfterFunc(dark, relay.Restore)
		}
	}
	how := "the agent resumed it from the cloud at the token where it stopped"
	if continued != "" {
		how = "finished on the device's engine: " + continued
	}
	fmt.Print(wrap(fmt.Sprintf("POST /v1/chat/completions (stream, route %s) → HTTP %d, link dark for %s after chunk 3: %d chunks in %s, longest gap %s, ended with [DONE]: %v; %s",
		resp.Header.Get("x-phaseless-route"), resp.StatusCode, dark, chunks, ms(time.Since(start)), ms(gap), done, how), "    ", "      ", width))
}

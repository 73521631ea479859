package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/phaseless/phaseless/models/cartools"
)

// carRequests are what a driver says to the head unit: commands the edge
// model answers with tool calls the car executes, and small talk it
// answers in prose. They are the demo's own wordings, in none of the
// evaluation sets (models/edgemodel/testdata) nor the training templates
// (TestCarRequestsAreFresh).
var carRequests = []string{
	"warm the car up to 24 degrees please",
	"i need a 12 minute timer",
	"open the passenger window halfway",
	"blower on 2",
	"put some jazz on",
	"tell me about yourself",
}

// car sends each request to the device's agent with the car tool set
// (OpenAI tools, tool_choice auto, on the local engine), executes the calls
// that come back on a simulated car and prints its state as it changes.
func (d *demo) car(ctx context.Context, device string) {
	car := cartools.NewCar()
	fmt.Print(wrap(fmt.Sprint("car: ", car), "    ", "      ", width))
	tools := make([]map[string]any, 0)
	for _, t := range cartools.Tools() {
		tools = append(tools, map[string]any{"type": "function", "function": map[string]any{
			"name": t.Name, "description": t.Description, "parameters": t.Parameters, "strict": true}})
	}
	for _, text := range carRequests {
		body, _ := json.Marshal(map[string]any{
			"model": "auto", "max_tokens": 160, "temperature": 0,
			"messages": []map[string]string{{"role": "user", "content": text}},
			"tools":    tools,
		})
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+d.agents[device]+"/v1/chat/completions", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("x-phaseless-route", "local")
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println("    car:", err)
			return
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			d.sent++
		}
		var out struct {
			Choices []struct {
				Message struct {
					Content   *string `json:"content"`
					ToolCalls []struct {
						Function struct{ Name, Arguments string } `json:"function"`
					} `json:"tool_calls"`
				} `json:"message"`
			} `json:"choices"`
		}
		if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &out) != nil || len(out.Choices) == 0 {
			fmt.Print(wrap(fmt.Sprintf("%q → HTTP %d %s", text, resp.StatusCode, strings.TrimSpace(string(raw))), "    ", "      ", width))
			continue
		}
		msg := out.Choices[0].Message
		if len(msg.ToolCalls) == 0 && msg.Content != nil {
			fmt.Print(wrap(fmt.Sprintf("%q → says %q (%s)", text, strings.TrimSpace(*msg.Content), ms(time.Since(start))), "    ", "      ", width))
		}
		for _, c := range msg.ToolCalls {
			result, err := car.Call(c.Function.Name, c.Function.Arguments)
			if err != nil {
				result = "error: " + err.Error()
			}
			fmt.Print(wrap(fmt.Sprintf("%q → %s%s ⇒ %s (%s)", text, c.Function.Name, c.Function.Arguments, result, ms(time.Since(start))), "    ", "      ", width))
		}
		if len(msg.ToolCalls) > 0 {
			fmt.Print(wrap(fmt.Sprint("car: ", car), "      ", "        ", width))
		}
	}
}

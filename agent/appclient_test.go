package agent

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	appclient "github.com/phaseless/phaseless/client"
)

// TestAppClientAgainstAgent: the app client package, in both request
// shapes, against a real agent with its built-in engine: the text arrives
// whole-character by whole-character, usage and the route come back, and
// the server's stats field reaches Stats.
func TestAppClientAgainstAgent(t *testing.T) {
	_, url := startAgent(t, testConfig(t))
	for _, api := range []appclient.API{appclient.OpenAI, appclient.Anthropic} {
		c, err := appclient.New(appclient.Config{URL: url, API: api})
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		resp, err := c.Stream(context.Background(), &appclient.Request{
			Messages: []appclient.Message{{Role: "user", Content: "turn on the seat heater"}}, MaxTokens: 6, Route: "local",
		}, func(s string) error {
			if !utf8.ValidString(s) {
				t.Errorf("%s: piece %q is not whole characters", api, s)
			}
			b.WriteString(s)
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", api, err)
		}
		if resp.Text != b.String() || resp.Text == "" || resp.Route != "local" || resp.Usage.CompletionTokens < 1 || resp.Usage.PromptTokens < 1 {
			t.Errorf("%s: %+v", api, resp)
		}
		if !resp.Stats.HasPrefixCache || resp.Stats.Chunks < 1 || resp.Stats.Total <= 0 || resp.Stats.ServerGenMean <= 0 {
			t.Errorf("%s: stats %+v", api, resp.Stats)
		}
	}
}

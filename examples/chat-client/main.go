// Command chat-client is the smallest app built on client: it
// asks a Phaseless agent (or cloud) one question, prints the answer as it
// streams, and then what the client measured — time to first token,
// inter-token latency, tokens per second, the route the answer took, the
// server's prefix-cache efficiency — plus every retry, budget report and
// fallback as the hooks saw them.
//
//	go run ./examples/chat-client --url http://127.0.0.1:7070 "set the fan to 2"
//	go run ./examples/chat-client --api anthropic --fallback http://cloud:8080 --metrics "why is the sky blue?"
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/phaseless/phaseless/client"
	"github.com/phaseless/phaseless/internal/metrics"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "chat-client:", err)
		os.Exit(1)
	}
}

// run is main with its arguments and outputs, for the test.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("chat-client", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "http://127.0.0.1:7070", "Phaseless base URL (agent or cloud)")
	fallback := fs.String("fallback", "", "base URL to try when --url is down (e.g. the cloud)")
	api := fs.String("api", "openai", "request shape: openai or anthropic")
	key := fs.String("api-key", os.Getenv("PHASELESS_API_KEY"), "API key (the cloud needs one outside --dev)")
	model := fs.String("model", "auto", "model: auto, or one listed at /v1/models")
	route := fs.String("route", "", "x-phaseless-route on the agent: auto, local or cloud")
	maxTokens := fs.Int("max-tokens", 128, "most tokens to generate")
	system := fs.String("system", "", "system prompt")
	showMetrics := fs.Bool("metrics", false, "print the client's Prometheus families at the end")
	if err := fs.Parse(args); err != nil {
		return err
	}
	prompt := strings.Join(fs.Args(), " ")
	if prompt == "" {
		return fmt.Errorf("no question given (usage: chat-client [flags] QUESTION)")
	}
	reg := metrics.NewRegistry()
	c, err := client.New(client.Config{
		URL: *url, FallbackURL: *fallback, API: client.API(*api), APIKey: *key, Metrics: client.NewCollectors(reg),
		OnRetry: func(r client.Retry) {
			fmt.Fprintf(stderr, "[retry %d after %v: %v]\n", r.Attempt, r.Wait, r.Err)
		},
		OnBudget: func(b client.Budget) { fmt.Fprintf(stderr, "[budget: %d tokens left]\n", b.Remaining) },
		OnFallback: func(f client.Fallback) {
			if f.ByClient {
				fmt.Fprintf(stderr, "[fallback %s → %s: %s]\n", f.From, f.To, f.Reason)
			} else {
				fmt.Fprintf(stderr, "[server fallback to %s: %s]\n", f.To, f.Reason)
			}
		},
	})
	if err != nil {
		return err
	}
	resp, err := c.Stream(ctx, &client.Request{
		Model: *model, System: *system, Messages: []client.Message{{Role: "user", Content: prompt}},
		MaxTokens: *maxTokens, Route: *route,
	}, func(text string) error {
		_, err := io.WriteString(stdout, text)
		return err
	})
	if err != nil {
		return err
	}
	s := resp.Stats
	fmt.Fprintf(stdout, "\n-- route %s, %d prompt tokens (%d cached), %d completion tokens, finish %s\n",
		resp.Route, resp.Usage.PromptTokens, resp.Usage.CachedTokens, resp.Usage.CompletionTokens, resp.FinishReason)
	fmt.Fprintf(stdout, "-- ttft %v, itl mean %v max %v, %.1f tokens/s, total %v, attempts %d\n",
		s.TTFT, s.ITLMean, s.ITLMax, s.TokensPerSecond, s.Total, resp.Attempts)
	if s.HasPrefixCache {
		fmt.Fprintf(stdout, "-- server: %v per token, prefix-cache efficiency %.2f\n", s.ServerGenMean, s.PrefixCacheEfficiency)
	}
	if *showMetrics {
		reg.WriteText(stdout)
	}
	return nil
}

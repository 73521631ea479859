package ctl

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/phaseless/phaseless/cloud/loadgen"
	"github.com/phaseless/phaseless/internal/cli"
)

func init() {
	register(&cli.Command{
		Name:    "load",
		Summary: "drive N concurrent streams at a running cloud or agent and print the added TTFT percentiles",
		Run:     loadCmd,
	})
}

// headerFlag collects repeated "Name: value" flags.
type headerFlag http.Header

func (h headerFlag) String() string { return "" }

func (h headerFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, ":")
	if !ok || strings.TrimSpace(k) == "" {
		return fmt.Errorf("%q is not Name: value", v)
	}
	http.Header(h).Add(strings.TrimSpace(k), strings.TrimSpace(val))
	return nil
}

func loadCmd(ctx context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	url := fs.String("url", "http://127.0.0.1:8080", "base URL of the cloud or agent HTTP API")
	api := fs.String("api", "openai", "openai or anthropic")
	key := fs.String("api-key", "", "API key (also PHASELESS_API_KEY)")
	model := fs.String("model", "auto", "requested model")
	streams := fs.Int("streams", 100, "streams open at once")
	requests := fs.Int("requests", 3, "requests each stream sends, back to back")
	maxTokens := fs.Int("max-tokens", 16, "max_tokens of each request")
	ramp := fs.Duration("ramp", time.Second, "the streams' starts are spread evenly over this")
	timeout := fs.Duration("timeout", 60*time.Second, "a request that has not ended by then counts as failed")
	hdr := headerFlag{}
	fs.Var(hdr, "header", "extra request header, Name: value (repeatable; e.g. x-phaseless-route: cloud)")
	failOnError := fs.Bool("fail-on-error", true, "exit non-zero when a request neither finished nor was refused with 429/503")
	if done, err := pkiFlags(fs, cio, args, "load --url http://HOST:PORT [--streams N --requests N --max-tokens N --ramp D --api openai|anthropic]"); done || err != nil {
		return err
	}
	if *ramp <= 0 {
		return &cli.FieldError{Field: "ramp", Err: fmt.Errorf("%v must be positive", *ramp)}
	}
	send, err := loadgen.HTTP(loadgen.HTTPConfig{URL: *url, API: *api, APIKey: *key, Model: *model, MaxTokens: *maxTokens, Header: http.Header(hdr)}, *streams)
	if err != nil {
		return &cli.FieldError{Field: "url/api/max-tokens", Err: err}
	}
	res, err := loadgen.Run(ctx, loadgen.Config{Streams: *streams, Requests: *requests, Ramp: *ramp, Timeout: *timeout}, send)
	if err != nil {
		return &cli.FieldError{Field: "streams/requests/timeout", Err: err}
	}
	res.WriteText(cio.Stdout)
	if n := res.Count(loadgen.Failed); *failOnError && n > 0 {
		return fmt.Errorf("load: %d of %d requests failed (neither answered nor refused with 429/503)", n, len(res.Samples))
	}
	return nil
}

package ctl

import (
	"context"
	"errors"
	"flag"
	"strings"
	"time"

	"github.com/phaseless/phaseless/cloud/linkbench"
	"github.com/phaseless/phaseless/internal/cli"
	"github.com/phaseless/phaseless/transport/linkemu"
)

// profileFlag collects repeated --profile specs.
type profileFlag []linkemu.Profile

func (p *profileFlag) String() string { return "" }

func (p *profileFlag) Set(v string) error {
	prof, err := linkemu.ParseProfile(v)
	if err != nil {
		return err
	}
	*p = append(*p, prof)
	return nil
}

// benchLink runs linkbench: a cloud on loopback, both transports through
// each profile, a markdown table on stdout.
func benchLink(ctx context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("bench link", flag.ContinueOnError)
	var profiles profileFlag
	fs.Var(&profiles, "profile", "link profile, repeatable: "+strings.Join(linkemu.ProfileNames(), ", ")+", optionally with overrides (lte-good,loss=5%,delay=80ms; docs/transport.md); default all four")
	requests := fs.Int("requests", 100, "requests per profile and transport")
	concurrency := fs.Int("concurrency", 4, "requests in flight at once on each transport's one connection")
	maxTokens := fs.Int("max-tokens", 64, "max_tokens of each request")
	seed := fs.Uint64("seed", 1, "emulator seed: the same seed drops, delays and reorders the same packets")
	timeout := fs.Duration("timeout", 2*time.Minute, "a request not ended by then counts as not completed")
	quicAddr := fs.String("quic", "127.0.0.1:4433", "the cloud's QUIC address (phaseless-cloud --quic)")
	url := fs.String("url", "http://127.0.0.1:8080", "base URL of the cloud's HTTP API (phaseless-cloud --http)")
	pkiDir := fs.String("pki-dir", "", "the cloud's PKI directory (--pki-dir, or DATA-DIR/pki with --dev); a certificate for --device-id is issued there when missing")
	device := fs.String("device-id", "linkbench-0001", "device identity both transports present")
	key := fs.String("api-key", "", "API key for the SSE requests (also PHASELESS_API_KEY)")
	if done, err := pkiFlags(fs, cio, args, "bench link --pki-dir D [--quic HOST:PORT --url http://HOST:PORT --profile P ... --requests N --concurrency N]"); done || err != nil {
		return err
	}
	if *pkiDir == "" {
		return &cli.FieldError{Field: "pki-dir", Err: errors.New("required: the cloud's PKI directory")}
	}
	rows, err := linkbench.Run(ctx, linkbench.Config{
		QUIC: *quicAddr, URL: *url, PKIDir: *pkiDir, DeviceID: *device, APIKey: *key,
		Profiles: profiles, Requests: *requests, Concurrency: *concurrency, MaxTokens: *maxTokens,
		Seed: *seed, Timeout: *timeout, Progress: cio.Stderr,
	})
	if err != nil {
		return err
	}
	linkbench.WriteMarkdown(cio.Stdout, rows)
	return nil
}

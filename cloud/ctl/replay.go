package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/phaseless/phaseless/cloud/replay"
	"github.com/phaseless/phaseless/cloud/sched"
	"github.com/phaseless/phaseless/internal/cli"
)

// `replay` plays a real serving trace against a running coordinator (package
// cloud/replay) and reports latency, throughput and goodput per policy.
func init() {
	register(&cli.Command{Name: "replay", Summary: "replay an LLM serving trace (azure, mooncake) against a coordinator and compare policies", Run: replayCmd})
}

func replayCmd(ctx context.Context, cio cli.IO, args []string) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	target := fs.String("target", "http://127.0.0.1:8080", "coordinator base URL")
	trace := fs.String("trace", "", "trace file (cloud/replay/testdata/traces has heads of both)")
	format := fs.String("format", "", "trace format: azure or mooncake")
	speedup := fs.Float64("speedup", 1, "divide the trace's inter-arrival times by this")
	limit := fs.Int("limit", 200, "replay the first N requests (0 = all)")
	policy := fs.String("policy", "all", "all (scheduler, round-robin, least-loaded) or a comma-separated list of policies (sched.Names), one run each, same trace, same workers")
	scale := fs.Float64("scale", 0.1, "multiply the trace's prompt lengths by this (a small model has a short context)")
	outScale := fs.Float64("output-scale", 1, "multiply the trace's output lengths by this")
	maxInput := fs.Int("max-input", 800, "cap on prompt tokens after scaling")
	maxOutput := fs.Int("max-output", 64, "cap on max_tokens after scaling")
	cpt := fs.Int("chars-per-token", 1, "prompt characters per token: 1 for the built-in byte-level models, about 4 for llama-style tokenizers")
	sloTTFT := fs.Duration("slo-ttft", 2*time.Second, "goodput SLO: time to first token")
	sloITL := fs.Duration("slo-itl", 200*time.Millisecond, "goodput SLO: mean time between tokens")
	timeout := fs.Duration("timeout", 2*time.Minute, "per-request timeout")
	apiKey := fs.String("api-key", "", "API key (or PHASELESS_API_KEY)")
	rounds := fs.Int("rounds", 1, "repeat the comparison, rotating the policy order each round, so drift in the machine's load does not favour one policy")
	usage := "replay --target URL --trace F --format azure|mooncake [--speedup X] [--limit N] [--policy scheduler|round-robin|least-loaded|all] [--scale S]"
	if err := cli.Parse(fs, args, cio.Getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			cli.PrintUsage(cio.Stdout, fs, usage)
			return nil
		}
		return fmt.Errorf("%w: %v", cli.ErrUsage, err)
	}
	switch {
	case *trace == "":
		return &cli.FieldError{Field: "trace", Err: errors.New("required")}
	case *format != "azure" && *format != "mooncake":
		return &cli.FieldError{Field: "format", Err: fmt.Errorf("%q is not azure or mooncake", *format)}
	case !(*speedup > 0):
		return &cli.FieldError{Field: "speedup", Err: errors.New("must be > 0")}
	case !(*scale > 0) || !(*outScale > 0):
		return &cli.FieldError{Field: "scale", Err: errors.New("scales must be > 0")}
	case *rounds < 1:
		return &cli.FieldError{Field: "rounds", Err: errors.New("must be ≥ 1")}
	case *maxInput < 1 || *maxOutput < 1 || *cpt < 1:
		return &cli.FieldError{Field: "max-input", Err: errors.New("max-input, max-output and chars-per-token must be ≥ 1")}
	}
	var policies []string
	if *policy == "all" {
		policies = []string{"scheduler", "round-robin", "least-loaded"}
	} else {
		for _, p := range strings.Split(*policy, ",") {
			p = strings.TrimSpace(p)
			if _, err := sched.ByName(p, sched.RulesConfig{}); err != nil || p == "" {
				return &cli.FieldError{Field: "policy", Err: fmt.Errorf("%q: not all or one of %s", p, strings.Join(sched.Names(), ", "))}
			}
			policies = append(policies, p)
		}
	}
	if *apiKey == "" {
		*apiKey = cio.Getenv("PHASELESS_API_KEY")
	}
	return replay.Run(ctx, replay.Config{
		Target: *target, APIKey: *apiKey, Trace: *trace, Format: *format, Speedup: *speedup, Limit: *limit,
		Policies: policies, Scale: *scale, OutputScale: *outScale, MaxInput: *maxInput, MaxOutput: *maxOutput,
		CharsPerToken: *cpt, SLOTTFT: *sloTTFT, SLOITL: *sloITL, Timeout: *timeout, Rounds: *rounds,
		Stdout: cio.Stdout, Stderr: cio.Stderr,
	})
}

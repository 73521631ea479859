package ctl

import (
	"errors"
	"flag"
	"math"
	"time"

	"github.com/phaseless/phaseless/cloud/sim"
	"github.com/phaseless/phaseless/internal/cli"
)

// simEngineFlags registers the serving engine's knobs, named as vLLM's
// flags are (sim.EngineConfig; --tp is the command's own). The returned
// function reads them after parsing into c; cpu pools (their engine is the
// built-in one, fitted from lm bench) refuse them.
func simEngineFlags(fs *flag.FlagSet) func(c *sim.Config) error {
	batched := fs.Int("max-num-batched-tokens", 0, "each engine step's token budget, shared by decodes and prefill chunks (vLLM --max-num-batched-tokens); 0 = vLLM's default for the GPU (8192 on ≥ 70 GB, 2048 below)")
	seqs := fs.Int("max-num-seqs", 256, "sequences an engine runs at once (vLLM --max-num-seqs)")
	util := fs.Float64("gpu-memory-utilization", 0.9, "share of GPU memory the engine takes; the KV cache is what the weights and activations leave of it (vLLM --gpu-memory-utilization)")
	block := fs.Int("block-size", 16, "KV cache block in tokens; prefix caching reuses whole blocks (vLLM --block-size)")
	prefix := fs.Bool("prefix-caching", true, "automatic prefix caching (vLLM --enable-prefix-caching); false computes every prompt whole")
	hostCost := fs.Duration("token-host-cost", 0, "host time per token a step samples (output processing, streaming, per-sequence scheduling), done beside the GPU's work: a step lasts the longer of the two; 0 = the host keeps up (sim.EngineConfig.TokenHostCost; InferenceBench's H100 needs 690µs)")
	async := fs.Bool("async-scheduling", false, "vLLM's async scheduling (vLLM --async-scheduling, on in vLLM V1 by default): the engine schedules a step while the one before runs, so a request that arrives during a step waits one more; off = the calibrated synchronous scheduler (docs/sim.md)")
	pcie := fs.Float64("pcie-gbps", 0, "host link bandwidth in GB/s in one direction, what --host-kv reloads cross; 0 = the GPU profile's (64 for H100/H200, 32 for A100, L40S, L4)")
	return func(c *sim.Config) error {
		var set []string
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "max-num-batched-tokens", "max-num-seqs", "gpu-memory-utilization", "block-size", "prefix-caching", "pcie-gbps", "token-host-cost", "async-scheduling":
				set = append(set, f.Name)
			}
		})
		switch {
		case *batched < 0 || *batched > 1<<20:
			return &cli.FieldError{Field: "max-num-batched-tokens", Err: errors.New("must be in [0, 2^20]")}
		case *seqs < 1 || *seqs > 1<<16:
			return &cli.FieldError{Field: "max-num-seqs", Err: errors.New("must be in [1, 65536]")}
		case !(*util > 0 && *util <= 1):
			return &cli.FieldError{Field: "gpu-memory-utilization", Err: errors.New("must be in (0, 1]")}
		case *block < 1 || *block > 1024 || *block&(*block-1) != 0:
			return &cli.FieldError{Field: "block-size", Err: errors.New("must be a power of two up to 1024")}
		case *batched > 0 && *batched < *block:
			return &cli.FieldError{Field: "max-num-batched-tokens", Err: errors.New("is below one block")}
		case *hostCost < 0 || *hostCost > time.Second:
			return &cli.FieldError{Field: "token-host-cost", Err: errors.New("must be in [0, 1s]")}
		case !(*pcie >= 0) || math.IsInf(*pcie, 0) || *pcie > 1e4:
			return &cli.FieldError{Field: "pcie-gbps", Err: errors.New("must be in [0, 10000]")}
		case *pcie > 0 && c.Cache.HostKV == 0:
			return &cli.FieldError{Field: "pcie-gbps", Err: errors.New("is the host KV tier's link: set --host-kv")}
		case !*prefix && (c.Cache.HostKV > 0 || c.Cache.TTL > 0 || c.Cache.PinFor != nil):
			return &cli.FieldError{Field: "prefix-caching", Err: errors.New("--host-kv and pins find blocks by prefix: they need it")}
		}
		for _, p := range c.Pools {
			if p.GPU.Name == sim.CPU && len(set) > 0 {
				return &cli.FieldError{Field: set[0], Err: errors.New("a cpu pool runs the built-in engine's own scheduling (lm.EngineConfig)")}
			}
		}
		c.Engine.MaxBatchedTokens, c.Engine.MaxNumSeqs, c.Engine.MemUtil, c.Engine.BlockSize = *batched, *seqs, *util, *block
		c.Engine.NoPrefixCaching, c.Engine.PCIeBytesPerSec, c.Engine.TokenHostCost = !*prefix, *pcie*1e9, *hostCost
		c.Engine.AsyncScheduling = *async
		return nil
	}
}

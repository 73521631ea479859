package sim

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/phaseless/phaseless/cloud/sched"
)

// Link is the path a disaggregated request's KV blocks take from the
// prefill worker to the decode worker.
type Link struct {
	Name        string
	BytesPerSec float64 // achieved bandwidth
	Latency     time.Duration
}

// The link profiles. Bandwidths are the line rates of the named hardware
// at the efficiency a bulk transfer achieves over it; latencies are per
// transfer (setup and the first byte), not per block.
var links = map[string]Link{
	// NVLink 4 on one H100 HGX board: 900 GB/s per GPU (NVIDIA datasheet),
	// 80% achieved by large copies.
	"nvlink": {Name: "nvlink", BytesPerSec: 720e9, Latency: 5 * time.Microsecond},
	// 400 Gb/s InfiniBand NDR / RoCE NIC per GPU (the H100 HGX reference
	// design): 50 GB/s, 90% achieved by RDMA writes (NIXL, Mooncake
	// Transfer Engine report near line rate).
	"rdma400": {Name: "rdma400", BytesPerSec: 45e9, Latency: 10 * time.Microsecond},
	// 100 Gb/s RDMA: 12.5 GB/s at 90%.
	"rdma100": {Name: "rdma100", BytesPerSec: 11.25e9, Latency: 10 * time.Microsecond},
	// 25 Gb/s Ethernet with TCP (a common cloud NIC without RDMA): 3.1 GB/s,
	// 80% achieved, plus the kernel's copies and a round trip to start.
	"tcp": {Name: "tcp", BytesPerSec: 2.5e9, Latency: 200 * time.Microsecond},
}

// LookupLink returns a link profile by name.
func LookupLink(name string) (Link, error) {
	l, ok := links[strings.ToLower(name)]
	if !ok {
		return Link{}, fmt.Errorf("unknown KV link %q (%s)", name, strings.Join(LinkNames(), ", "))
	}
	return l, nil
}

// LinkNames lists the link profiles.
func LinkNames() []string { return slices.Sorted(maps.Keys(links)) }

// defaultLink is the link between two workers when Config.KVLink is unset:
// NVLink inside a pool of NVLink GPUs of one board (at most 8), the GPUs'
// own PCIe link inside other pools, 400 Gb RDMA between pools (they are
// different machines).
func defaultLink(a, b *Pool) Link {
	if a == b && a.GPU.LinkBytesPerS >= 600e9 && a.Count <= 8 {
		return links["nvlink"]
	}
	if a == b && a.GPU.LinkBytesPerS > 0 {
		return Link{Name: "pcie", BytesPerSec: 0.8 * a.GPU.LinkBytesPerS, Latency: 10 * time.Microsecond}
	}
	return links["rdma400"]
}

// TransferTime is how long tokens of d's KV take over l.
func (l Link) TransferTime(d *Deployment, tokens int) time.Duration {
	bytes := float64(tokens) * d.Model.KVBytesPerToken()
	return l.Latency + time.Duration(bytes/l.BytesPerSec*1e9)
}

// Class is how the scheduler prices a worker of this deployment
// (sched.Class), from the roofline: the prefill rate of a full token-budget
// chunk of a fresh prompt, a decode step at batch 1 over a 1,024-token
// context, what each further such sequence adds, the KV capacity, and
// price per GPU-hour × TP.
func (d *Deployment) Class(pricePerGPUHour float64) sched.Class {
	b := d.Engine.MaxBatchedTokens
	prefill := d.StepTime(StepShape{Tokens: b, Sampled: 1, AttnPairs: float64(b) * float64(b+1) / 2})
	const ctx, n = 1024, 33
	one := d.StepTime(StepShape{Tokens: 1, Sampled: 1, AttnPairs: ctx, KVRead: ctx})
	many := d.StepTime(StepShape{Tokens: n, Sampled: n, AttnPairs: n * ctx, KVRead: n * ctx})
	return sched.Class{
		ID:                  sched.LookupClass(d.GPU.Name),
		PrefillTokensPerSec: float64(b) / prefill.Seconds(),
		DecodeStepSec:       one.Seconds(),
		DecodeStepPerSeq:    max(0, (many-one).Seconds()/(n-1)),
		KVTokens:            d.KVBlocks * d.Engine.BlockSize,
		PricePerHour:        pricePerGPUHour * float64(d.TP),
	}
}

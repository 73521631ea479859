package sim

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// GPU is an accelerator's published specification.
type GPU struct {
	Name           string
	MemBytes       float64 // device memory
	HBMBytesPerSec float64 // memory bandwidth
	PeakFLOPS      float64 // dense BF16/FP16 tensor throughput (no sparsity)
	LinkBytesPerS  float64 // per-GPU interconnect for tensor-parallel all-reduce
	// HostBytesPerSec is the host link's bandwidth in one direction (PCIe
	// to host DRAM): what a host-memory KV tier's reloads cross (host.go).
	HostBytesPerSec float64
	PricePerHour    float64 // default $ per GPU-hour (override with --price-NAME)
}

// The GPU profiles. Figures are the vendors' datasheets; prices are round
// 2025 on-demand cloud figures per GPU-hour, a default to override.
var gpus = map[string]GPU{
	// NVIDIA H100 SXM5 datasheet: 80 GB HBM3, 3.35 TB/s, 989 TFLOPS dense
	// BF16 (1,979 with sparsity), NVLink 900 GB/s, PCIe Gen5 x16 (128 GB/s
	// both ways: 64 GB/s to the host).
	"h100": {Name: "h100", MemBytes: 80e9, HBMBytesPerSec: 3.35e12, PeakFLOPS: 989e12, LinkBytesPerS: 900e9, HostBytesPerSec: 64e9, PricePerHour: 3.00},
	// NVIDIA A100 80GB SXM datasheet: 80 GB HBM2e, 2,039 GB/s, 312 TFLOPS
	// dense BF16, NVLink 600 GB/s, PCIe Gen4 x16 (64 GB/s both ways: 32 to
	// the host).
	"a100": {Name: "a100", MemBytes: 80e9, HBMBytesPerSec: 2.039e12, PeakFLOPS: 312e12, LinkBytesPerS: 600e9, HostBytesPerSec: 32e9, PricePerHour: 1.80},
	// NVIDIA A100 40GB SXM (the A100 datasheet's 40 GB column): 40 GB
	// HBM2, 1,555 GB/s, the same 312 TFLOPS and links as the 80 GB part.
	"a100-40": {Name: "a100-40", MemBytes: 40e9, HBMBytesPerSec: 1.555e12, PeakFLOPS: 312e12, LinkBytesPerS: 600e9, HostBytesPerSec: 32e9, PricePerHour: 1.30},
	// NVIDIA H200 Tensor Core GPU datasheet (H200 SXM): 141 GB HBM3e,
	// 4.8 TB/s, 1,979 TFLOPS BF16 with sparsity (989 dense, the H100's
	// Hopper die), NVLink 900 GB/s, PCIe Gen5 128 GB/s (64 to the host).
	"h200": {Name: "h200", MemBytes: 141e9, HBMBytesPerSec: 4.8e12, PeakFLOPS: 989e12, LinkBytesPerS: 900e9, HostBytesPerSec: 64e9, PricePerHour: 3.80},
	// NVIDIA L40S datasheet: 48 GB GDDR6, 864 GB/s, 362.05 TFLOPS BF16/FP16
	// tensor dense (733 with sparsity), PCIe Gen4 x16 64 GB/s
	// bidirectional (32 to the host), no NVLink: tensor parallelism
	// crosses PCIe.
	"l40s": {Name: "l40s", MemBytes: 48e9, HBMBytesPerSec: 864e9, PeakFLOPS: 362.05e12, LinkBytesPerS: 64e9, HostBytesPerSec: 32e9, PricePerHour: 1.20},
	// NVIDIA L4 datasheet: 24 GB GDDR6, 300 GB/s, 121 TFLOPS dense BF16
	// (242 with sparsity), PCIe Gen4 x16 64 GB/s (both ways: 32 to the host).
	"l4": {Name: "l4", MemBytes: 24e9, HBMBytesPerSec: 300e9, PeakFLOPS: 121e12, LinkBytesPerS: 64e9, HostBytesPerSec: 32e9, PricePerHour: 0.80},
	// NVIDIA T4 datasheet: 16 GB GDDR6, 320 GB/s, 65 TFLOPS mixed-precision
	// FP16 (no BF16), PCIe Gen3 x16 32 GB/s.
	"t4": {Name: "t4", MemBytes: 16e9, HBMBytesPerSec: 320e9, PeakFLOPS: 65e12, LinkBytesPerS: 32e9, PricePerHour: 0.35},
}

// LookupGPU returns a GPU profile by name (GPUNames).
func LookupGPU(name string) (GPU, error) {
	g, ok := gpus[strings.ToLower(name)]
	if !ok {
		return GPU{}, fmt.Errorf("unknown GPU %q (%s)", name, strings.Join(GPUNames(), ", "))
	}
	return g, nil
}

// GPUNames lists the known GPU profiles.
func GPUNames() []string { return slices.Sorted(maps.Keys(gpus)) }

// Model is a decoder-only transformer's shape.
type Model struct {
	Name                             string
	Layers, Hidden, Heads, KVHeads   int
	HeadDim, FFN, Vocab              int
	Params                           float64 // total parameters
	ContextLen                       int     // longest prompt + output accepted
	BytesPerParam, BytesPerKVElement float64 // 2 for BF16 weights and KV
}

// The model profiles, from each model's config.json on its Hugging Face
// model card.
var models = map[string]Model{
	// meta-llama/Llama-3.1-8B: 32 layers, hidden 4096, 32 heads, 8 KV heads,
	// intermediate 14336, vocab 128256, 8.03B parameters,
	// max_position_embeddings 131072.
	"llama3.1-8b": {Name: "llama3.1-8b", Layers: 32, Hidden: 4096, Heads: 32, KVHeads: 8, HeadDim: 128, FFN: 14336, Vocab: 128256, Params: 8.03e9, ContextLen: 131072, BytesPerParam: 2, BytesPerKVElement: 2},
	// meta-llama/Llama-3.1-70B: 80 layers, hidden 8192, 64 heads, 8 KV
	// heads, intermediate 28672, vocab 128256, 70.6B parameters, 131072.
	"llama3.1-70b": {Name: "llama3.1-70b", Layers: 80, Hidden: 8192, Heads: 64, KVHeads: 8, HeadDim: 128, FFN: 28672, Vocab: 128256, Params: 70.6e9, ContextLen: 131072, BytesPerParam: 2, BytesPerKVElement: 2},
	// Qwen/Qwen2.5-7B: 28 layers, hidden 3584, 28 heads, 4 KV heads,
	// intermediate 18944, vocab 152064, 7.61B parameters,
	// max_position_embeddings 32768 (131072 only with YaRN scaling).
	"qwen2.5-7b": {Name: "qwen2.5-7b", Layers: 28, Hidden: 3584, Heads: 28, KVHeads: 4, HeadDim: 128, FFN: 18944, Vocab: 152064, Params: 7.61e9, ContextLen: 32768, BytesPerParam: 2, BytesPerKVElement: 2},
}

// LookupModel returns a model profile by name.
func LookupModel(name string) (Model, error) {
	m, ok := models[strings.ToLower(name)]
	if !ok {
		return Model{}, fmt.Errorf("unknown model %q (%s)", name, strings.Join(ModelNames(), ", "))
	}
	return m, nil
}

// ModelNames lists the known model profiles.
func ModelNames() []string { return slices.Sorted(maps.Keys(models)) }

// WeightBytes is the size of the weights.
func (m *Model) WeightBytes() float64 { return m.Params * m.BytesPerParam }

// KVBytesPerToken is the K and V of one token over all layers.
func (m *Model) KVBytesPerToken() float64 {
	return 2 * float64(m.Layers*m.KVHeads*m.HeadDim) * m.BytesPerKVElement
}

// EngineConfig is the serving engine's configuration. The zero value means
// vLLM's defaults.
type EngineConfig struct {
	// BlockSize is the KV cache block in tokens (vLLM --block-size, 16).
	BlockSize int
	// MaxNumSeqs is how many sequences run at once (vLLM --max-num-seqs,
	// 256).
	MaxNumSeqs int
	// MaxBatchedTokens is the per-step token budget shared by decodes and
	// prefill chunks (vLLM --max-num-batched-tokens). Default as vLLM V1's
	// API server picks it: 8192 on GPUs with ≥ 70 GB, 2048 on smaller ones.
	MaxBatchedTokens int
	// MemUtil is the fraction of device memory the engine may use (vLLM
	// --gpu-memory-utilization, 0.9).
	MemUtil float64
	// ComputeEff and MemEff are the achieved fractions of peak FLOPS and of
	// memory bandwidth. Defaults 0.6 (a typical prefill MFU of tuned
	// kernels) and 0.85: with StepOverhead they reproduce the 6.5 ms TPOT
	// measured for Llama-3.1-8B at concurrency 1 on an H100 (vLLM 0.21,
	// InferenceBench, see /work/shared/data/README.md): 16.06 GB at
	// 3.35 TB/s × 0.85 = 5.6 ms, plus the overhead.
	ComputeEff, MemEff float64
	// AttnEff is the achieved fraction of peak for attention's FLOPs.
	// Default ComputeEff; a CPU engine's attention runs far below its
	// matrix multiplies, so FitCPU sets it apart.
	AttnEff float64
	// HostEff is the achieved fraction of GPU.HostBytesPerSec for a host
	// KV tier's reloads. Default 0.8: pinned-memory copies reach about
	// that share of a PCIe link's peak (an estimate, not a measurement).
	HostEff float64
	// StepOverhead is the fixed host-side cost of a step (scheduling,
	// sampling, launch). Default 0.9 ms, the rest of that 6.5 ms.
	StepOverhead time.Duration
	// NoPrefixCaching turns automatic prefix caching off (vLLM
	// --no-enable-prefix-caching; V1 has it on): a prompt's blocks are
	// never found again, so every prompt is computed whole.
	NoPrefixCaching bool
	// AsyncScheduling is vLLM's async scheduling (vLLM
	// --async-scheduling; vLLM V1 turns it on unless an option conflicts,
	// vllm/config/vllm.py: "Enable async scheduling unless there is an
	// incompatible option"). The engine core then keeps two batches in
	// its queue (max_concurrent_batches = 2 in vllm/v1/executor): it
	// schedules step k+1 while step k runs on the GPU
	// (EngineCore.step_with_batch_queue), so a request that arrives
	// during step k is first seen by step k+2's scheduling, a step later
	// than a synchronous scheduler takes it; an idle engine takes it at
	// once. Off by default here: on InferenceBench's H100 sweep it moves
	// TTFT at concurrency 16 nearer (−48.7% → −23.9%) but concurrency 4
	// and 64 past it (docs/sim.md, calibration), so the calibrated
	// default stays the synchronous one.
	AsyncScheduling bool
	// RequestOverhead is what a request spends in the server outside its
	// engine (the OpenAI API server's HTTP handling, chat templating and
	// tokenization, the first token's detokenization and streaming),
	// once per request, charged before the engine sees it. Default 7.4 ms:
	// fitted so one short request on an idle H100 (Llama-3.1-8B) has the
	// 13.98 ms TTFT p50 InferenceBench published for vLLM 0.21 at
	// concurrency 1 (docs/sim.md, calibration); the engine step itself
	// is 6.6 ms of it.
	RequestOverhead time.Duration
	// TokenHostCost is the host's time per token a step samples: output
	// processing (detokenization, the streamed frame) and the scheduler's
	// per-sequence bookkeeping. It runs beside the GPU's work, so a step
	// takes the longer of the two: it costs nothing until a batch is
	// large enough, then it, not the GPU, sets TPOT. Default 0 (the host
	// keeps up, as with several API servers or async scheduling).
	// InferenceBench's H100 deployment (vLLM 0.21) needs 0.68 ms, fitted on
	// its TPOT at concurrency 16; its output rate then stays at about
	// 1,400 tokens/s through concurrency 64, as published (docs/sim.md,
	// calibration), while the GPU alone could give several times that.
	TokenHostCost time.Duration
	// PCIeBytesPerSec, when positive, is the host link's bandwidth in one
	// direction instead of the GPU profile's (GPU.HostBytesPerSec): what a
	// host KV tier's reloads cross (a Gen4 x16 slot under a Gen5 GPU, a
	// link shared by several GPUs).
	PCIeBytesPerSec float64
}

func (c *EngineConfig) fill(g GPU) {
	if c.BlockSize == 0 {
		c.BlockSize = 16
	}
	if c.MaxNumSeqs == 0 {
		c.MaxNumSeqs = 256
	}
	if c.MaxBatchedTokens == 0 {
		c.MaxBatchedTokens = 2048
		if g.MemBytes >= 70e9 {
			c.MaxBatchedTokens = 8192
		}
	}
	if c.MemUtil == 0 {
		c.MemUtil = 0.9
	}
	if c.ComputeEff == 0 {
		c.ComputeEff = 0.6
	}
	if c.MemEff == 0 {
		c.MemEff = 0.85
	}
	if c.AttnEff == 0 {
		c.AttnEff = c.ComputeEff
	}
	if c.StepOverhead == 0 {
		c.StepOverhead = 900 * time.Microsecond
	}
	if c.HostEff == 0 {
		c.HostEff = 0.8
	}
	if c.RequestOverhead == 0 {
		c.RequestOverhead = defaultRequestOverhead
	}
}

// defaultRequestOverhead is EngineConfig.RequestOverhead's default (see
// there for its source).
const defaultRequestOverhead = 7400 * time.Microsecond

// Validate names the first bad field.
func (c *EngineConfig) Validate() error {
	switch {
	case c.BlockSize < 1 || c.MaxNumSeqs < 1:
		return errors.New("sim.EngineConfig.BlockSize/MaxNumSeqs: must be ≥ 1")
	case c.MaxBatchedTokens < c.BlockSize:
		return fmt.Errorf("sim.EngineConfig.MaxBatchedTokens: %d is below a block", c.MaxBatchedTokens)
	case !(c.MemUtil > 0 && c.MemUtil <= 1):
		return fmt.Errorf("sim.EngineConfig.MemUtil: %v is not in (0, 1]", c.MemUtil)
	case !(c.ComputeEff > 0 && c.ComputeEff <= 1) || !(c.MemEff > 0 && c.MemEff <= 1) || !(c.AttnEff > 0 && c.AttnEff <= 1) || !(c.HostEff > 0 && c.HostEff <= 1):
		return errors.New("sim.EngineConfig.ComputeEff/MemEff/AttnEff/HostEff: must be in (0, 1]")
	case c.StepOverhead < 0 || c.RequestOverhead < 0 || c.TokenHostCost < 0:
		return errors.New("sim.EngineConfig.StepOverhead/RequestOverhead/TokenHostCost: must be ≥ 0")
	case !(c.PCIeBytesPerSec >= 0) || math.IsInf(c.PCIeBytesPerSec, 0):
		return fmt.Errorf("sim.EngineConfig.PCIeBytesPerSec: %v is not a bandwidth", c.PCIeBytesPerSec)
	}
	return nil
}

// Deployment is one model served on TP GPUs of one kind by one engine: a
// worker's physics.
type Deployment struct {
	GPU    GPU
	Model  Model
	TP     int
	Engine EngineConfig
	// KVBlocks is how many KV blocks fit per engine; MaxModelLen the
	// longest request it accepts (the model's context, or less when the
	// cache cannot hold one request that long, as an operator would set
	// vLLM's --max-model-len).
	KVBlocks    int
	MaxModelLen int
}

// activationReserve is memory held outside weights and KV: CUDA graphs, the
// NCCL and cuBLAS workspaces and the allocator's slack. 1 GiB is an
// estimate of what vLLM's profile run leaves aside on a small model.
const activationReserve = 1 << 30

// NewDeployment sizes the KV cache: device memory × MemUtil, less the
// weights' share per GPU, less the activations of one forward pass over the
// token budget (hidden state, attention and MLP intermediates in 16 bits),
// the FP32 logits of MaxNumSeqs samples, and activationReserve. tp 0 picks
// the smallest power of two that fits.
func NewDeployment(g GPU, m Model, tp int, ec EngineConfig) (*Deployment, error) {
	ec.fill(g)
	if err := ec.Validate(); err != nil {
		return nil, err
	}
	if tp == 0 {
		for tp = 1; tp <= 8; tp *= 2 {
			if d, err := NewDeployment(g, m, tp, ec); err == nil && d.KVBlocks*ec.BlockSize >= 4096 {
				return d, nil
			}
		}
		return nil, fmt.Errorf("%s does not fit on 8 × %s", m.Name, g.Name)
	}
	if tp < 1 || tp > 8 || tp&(tp-1) != 0 || m.KVHeads%tp != 0 && tp%m.KVHeads != 0 {
		return nil, fmt.Errorf("tensor parallelism %d: must be 1, 2, 4 or 8 and divide the model's heads", tp)
	}
	d := &Deployment{GPU: g, Model: m, TP: tp, Engine: ec}
	if ec.PCIeBytesPerSec > 0 {
		d.GPU.HostBytesPerSec = ec.PCIeBytesPerSec
	}
	act := float64(ec.MaxBatchedTokens)*float64(4*m.Hidden+2*m.FFN/tp)*2 + float64(ec.MaxNumSeqs*m.Vocab)*4 + activationReserve
	free := g.MemBytes*ec.MemUtil - m.WeightBytes()/float64(tp) - act
	if free <= 0 {
		return nil, fmt.Errorf("%s does not fit on %d × %s: %.1f GB of weights per GPU, %.1f GB usable", m.Name, tp, g.Name, m.WeightBytes()/float64(tp)/1e9, g.MemBytes*ec.MemUtil/1e9)
	}
	d.KVBlocks = int(free / (float64(ec.BlockSize) * d.kvBytesPerTokenPerGPU()))
	d.MaxModelLen = min(m.ContextLen, d.KVBlocks*ec.BlockSize)
	if d.KVBlocks < 1 {
		return nil, fmt.Errorf("%s on %d × %s leaves no room for a KV block", m.Name, tp, g.Name)
	}
	return d, nil
}

// kvBytesPerTokenPerGPU: KV heads are split over the TP group (replicated
// when there are fewer heads than GPUs).
func (d *Deployment) kvBytesPerTokenPerGPU() float64 {
	heads := max(1, d.Model.KVHeads/d.TP)
	return 2 * float64(d.Model.Layers*heads*d.Model.HeadDim) * d.Model.BytesPerKVElement
}

// StepShape is what one engine step computes.
type StepShape struct {
	Tokens  int // prompt (prefill chunk) and decode tokens computed
	Sampled int // sequences that sample a token (the LM head runs for these)
	// AttnPairs is Σ over computed tokens of the context each attends to
	// (causal: a chunk token at position p attends to p+1 positions).
	AttnPairs float64
	// KVRead is Σ over sequences of the context tokens whose K and V the
	// step reads.
	KVRead int
	// HostLoad is the tokens whose K and V the step first copies in from
	// the host KV tier (host.go), before it computes.
	HostLoad int
}

// StepCost splits a step's duration into its parts (seconds).
type StepCost struct {
	Compute, Memory, Comm, Overhead float64
	// Tokens is the host's per-token work (EngineConfig.TokenHostCost),
	// done while the GPU computes: the step lasts the longer of the two.
	Tokens float64
	// Host is the host KV tier's reload, which the step waits for: a
	// conservative model (engines that load layer by layer overlap part
	// of it with compute).
	Host float64
}

// Seconds is the step's duration: the roofline's larger side, plus the
// tensor-parallel all-reduces, plus the overhead, or the host's per-token
// work when that is longer.
func (c StepCost) Seconds() float64 {
	return math.Max(math.Max(c.Compute, c.Memory)+c.Comm+c.Overhead, c.Tokens) + c.Host
}

// Cost is the roofline of one step on one GPU of the TP group.
//
// Compute: 2 FLOPs per parameter per token for the transformer's matrices
// (embeddings excluded; the LM head only for sampled tokens) plus
// attention's QKᵀ and PV, 4·layers·heads·head_dim per attended pair, split
// over TP, at PeakFLOPS × ComputeEff. Memory: the weights' share plus the
// K and V read and written, at HBM bandwidth × MemEff. Comm: two ring
// all-reduces of the hidden state per layer (2·(TP−1)/TP of it crosses each
// link) at the link bandwidth, each with vLLM's measured per-call cost
// (allReduce).
func (d *Deployment) Cost(s StepShape) StepCost {
	m, tp := &d.Model, float64(d.TP)
	embed := float64(m.Vocab * m.Hidden)
	matrix := m.Params - 2*embed // input embedding and LM head
	flops := 2*matrix*float64(s.Tokens) + 2*embed*float64(s.Sampled)
	attn := 4 * float64(m.Layers*m.Heads*m.HeadDim) * s.AttnPairs
	bytes := m.WeightBytes()/tp + float64(s.KVRead+s.Tokens)*d.kvBytesPerTokenPerGPU()
	c := StepCost{
		Compute:  (flops/(d.GPU.PeakFLOPS*d.Engine.ComputeEff) + attn/(d.GPU.PeakFLOPS*d.Engine.AttnEff)) / tp,
		Memory:   bytes / (d.GPU.HBMBytesPerSec * d.Engine.MemEff),
		Overhead: d.Engine.StepOverhead.Seconds(),
		Tokens:   float64(s.Sampled) * d.Engine.TokenHostCost.Seconds(),
	}
	if s.HostLoad > 0 {
		// Each GPU of the group loads its heads' share over its own link.
		c.Host = float64(s.HostLoad) * d.kvBytesPerTokenPerGPU() / (d.GPU.HostBytesPerSec * d.Engine.HostEff)
	}
	if d.TP > 1 {
		c.Comm = 2 * float64(m.Layers) * d.allReduce(float64(s.Tokens*m.Hidden)*2)
	}
	return c
}

// All-reduce of the hidden state across a TP group, fitted on vLLM's own
// custom all-reduce as SGLang measured it on H100s over NVLink (table
// "vllm" in sgl-project/sglang pull request #2904, 2025-01-15, latency
// by TP size and bytes): a fixed cost per call (the 512-byte row: 9.5,
// 9.1 and 10.1 µs at TP 2, 4 and 8) and a per-byte cost up to 1 MiB (the
// 1 MiB row: 26.6, 40.2 and 45.0 µs), past which the ring's bandwidth
// term over the GPU's link applies. The 32 KiB and 256 KiB rows are held
// out (docs/sim.md, calibration). Other GPUs scale the per-byte cost by
// their link against the H100's 900 GB/s; the fixed cost is the kernel's
// and the barrier's, kept as measured.
var (
	allReduceFixed  = map[int]float64{2: 9.5e-6, 4: 9.1e-6, 8: 10.1e-6}
	allReduceAt1MiB = map[int]float64{2: 26.6e-6, 4: 40.2e-6, 8: 45.0e-6}
)

const allReduceMeasuredLink = 900e9 // the H100 NVLink the figures above crossed

// allReduce is one all-reduce of bytes on the group, in seconds.
func (d *Deployment) allReduce(bytes float64) float64 {
	const mib = 1 << 20
	tp := float64(d.TP)
	fixed, at1 := allReduceFixed[d.TP], allReduceAt1MiB[d.TP]
	perByte := (at1 - fixed) / (mib - 512) * allReduceMeasuredLink / d.GPU.LinkBytesPerS
	t := fixed + perByte*min(bytes, mib)
	if bytes > mib {
		t += (bytes - mib) * 2 * (tp - 1) / tp / d.GPU.LinkBytesPerS
	}
	return t
}

// StepTime is Cost's duration.
func (d *Deployment) StepTime(s StepShape) time.Duration {
	return time.Duration(d.Cost(s).Seconds() * 1e9)
}

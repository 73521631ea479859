// Package lm is Phaseless's built-in language-model engine: a llama-family
// decoder (llama, qwen2, qwen3; see Architectures) in pure Go (no cgo, so it cross-compiles into the ARM agent) that
// loads GGUF files, and a continuous-batching server on top of it with a paged,
// prefix-sharing KV cache. Its counters (KV faults, prefill vs decode tokens,
// tokens per step) are the "KV jitter" signals the cloud scheduler and the
// agent's router read.
//
// # How it fits
//
// Load or Read gives a *Model (weights, Config, Tokenizer). NewEngine wraps a
// Model in an *Engine whose step loop advances every running sequence by one
// token per step and fills the rest of the step's token budget with chunks of
// waiting prompts; Engine implements llm.Generator, so agent/local and
// cloud/worker call Generate and get tokens streamed as UTF-8-complete text.
// Engine.Prefill and Engine.Resume split a generation between two engines:
// the first runs the prompt and hands over its KV blocks as a Handoff, the
// second decodes from them (prefill/decode disaggregation).
// Model.Logits is the plain single-sequence forward pass used by
// `phaselessctl lm logits` and by models/lmtrain's agreement test; WriteGGUF is
// how the trainer saves weights the engine loads.
//
// The parts that stand without the engine are subpackages: tokenizer (text to
// ids and back), kernels (the matrix products and attention arithmetic,
// with their assembly), chatfmt (the chat prompt and tool-call text a
// request becomes), constraint (grammar masks), grammar, kvcache (the
// block allocator and its hashes), gguf and chattmpl. A coordinator that
// only counts and hashes prompt tokens imports tokenizer, chatfmt and
// kvcache, not this package.
//
// # Weights and the forward pass, exactly
//
// All matrices are row-major [out][in]: element (o, i) is at W[o*in+i] and the
// layer computes y[o] = Σ_i W[o*in+i]·x[i] (y = W x). In GGUF the same tensor has
// dims [in, out] (ggml lists the contiguous dimension first). With d = Dim,
// h = Heads, kv = KVHeads, hd = Dim/Heads, f = FFN, V = Vocab:
//
//	token_embd.weight     [V][d]      row t is the embedding of token t
//	blk.N.attn_norm.weight [d]
//	blk.N.attn_q.weight   [h·hd][d]   rows of head j are j·hd … j·hd+hd-1
//	blk.N.attn_k.weight   [kv·hd][d]
//	blk.N.attn_v.weight   [kv·hd][d]
//	blk.N.attn_output.weight [d][h·hd]
//	blk.N.ffn_norm.weight [d]
//	blk.N.ffn_gate.weight [f][d]
//	blk.N.ffn_up.weight   [f][d]
//	blk.N.ffn_down.weight [d][f]
//	output_norm.weight    [d]
//	output.weight         [V][d]      absent = tied to token_embd.weight
//
// For tokens t_0…t_{n-1}: x = token_embd[t_p]; for each layer
//
//	a = RMSNorm(x)·attn_norm, RMSNorm(x) = x / sqrt(mean(x²) + NormEps)
//	q = Wq a, k = Wk a, v = Wv a, then RoPE on q and k per head
//	query head j uses kv head j / (h/kv) (grouped-query attention)
//	att_j = Σ_{s≤p} softmax_s(q_j·k_s / sqrt(hd)) v_s (causal)
//	x = x + Wo att
//	b = RMSNorm(x)·ffn_norm
//	x = x + Wdown (silu(Wgate b) ⊙ (Wup b)), silu(z) = z / (1 + e^-z)
//
// and logits = Woutput (RMSNorm(x)·output_norm). RoPE is llama.cpp's "normal"
// mode for the llama architecture, rotating adjacent pairs: for i < hd/2,
// θ_i = p · RopeTheta^(-2i/hd) and (x[2i], x[2i+1]) ↦ (x[2i]cosθ_i − x[2i+1]sinθ_i,
// x[2i]sinθ_i + x[2i+1]cosθ_i); with rope_freqs.weight (Llama 3 scaling) θ_i is
// divided by its entry i. qwen2 and qwen3 rotate (x[i], x[i+hd/2]) instead
// ("neox" mode); qwen2 adds blk.N.attn_{q,k,v}.bias to q, k and v; qwen3
// RMS-normalises each head of q and k with blk.N.attn_{q,k}_norm.weight ([hd])
// before RoPE, and its hd may differ from Dim/Heads (Config.HeadSize). The engine computes in float32 (angles, mean of
// squares and softmax sums in float64) so an implementation following this
// text agrees to float32 rounding.
package lm

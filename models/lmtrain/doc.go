// Package lmtrain trains the built-in engine's llama-architecture language
// models (package models/lm) from scratch on CPU, so the project can ship real
// default models without a model hub.
//
// # How it fits
//
// A corpus (models/lmtrain/corpus) becomes a byte-level token stream; Train
// samples seeded windows from it, runs the model's forward and backward pass,
// clips the global gradient norm and applies AdamW under a warmup + cosine
// learning-rate schedule, checkpoints, and reports validation loss. Export
// writes the weights as a GGUF file that lm.Load runs unchanged: the tensor
// names, layouts and numerics (RMSNorm, RoPE pairs, grouped-query attention,
// SwiGLU) are the engine's, and a test checks that both forward passes give the
// same logits.
//
// # Why hand-written kernels and not gorgonia
//
// gorgonia's graph reached about 7 GFLOP/s on this model family here, with half
// its time in allocation, copies and goroutines rather than arithmetic, and it
// bakes shapes into the graph (DEPENDENCIES.md). The forward and backward
// passes here are written by hand, with attention parallel over (sequence,
// kv-head) pairs and every buffer allocated once per shape, so a step
// allocates nothing. On gonum's blas32 Sgemm they already ran 1.6–2.2×
// gorgonia's throughput; their products now use the package's own packed
// matrix multiply (gemm.go: a 6×16 AVX2/FMA micro-kernel on amd64, plain Go
// elsewhere, large products split over all cores by row panel, attention's
// causal products skipping their zero half), 5–15× gonum's Sgemm on the
// trainer's shapes and 3.7–4.5× its training step, measured here. The
// arithmetic stays the engine's, which the agreement test relies on, and
// gradients are checked against finite differences in the tests.
//
// The agent must never link this package (training code does not belong on a
// device); a dependency test in the agent enforces that.
package lmtrain

package sched

import "math"

// NumFeatures is the width of the learned classifier's input.
const NumFeatures = 20

// FeatureVersion names the layout Features writes; a model trained on
// another layout is refused at load.
const FeatureVersion = 1

// featurePools are the pools whose state the features describe, in order.
var featurePools = [3]Role{RolePrefill, RoleDecode, RoleStream}

// Features writes the classifier's input for req on s into dst, without
// allocating. Layout:
//
//	0 input entropy, bits/char / 8
//	1 prompt tokens, log2(1+n) / 17
//	2 predicted output tokens, log2(1+n) / 12
//	3 share of the prompt no worker has cached
//	4–6   prefix overlap: the largest cached share of the prompt per pool (prefill, decode, stream)
//	7–9   KV faults per ms, log1p of the pool's mean
//	10–12 queue depth: the pool's mean (running + queued) / capacity
//	13–15 the pool's shortest prefill backlog, seconds at its class's rate (ReferenceClass when undeclared)
//	16–18 token burstiness: the pool's mean σ per 100 ms / 10
//	19 the request streams
//
// A pool with no healthy worker reads 0 everywhere but its backlog, which
// reads 10 s (nothing there can start soon).
func Features(req *Request, s *Snapshot, dst *[NumFeatures]float32) {
	*dst = [NumFeatures]float32{}
	dst[0] = float32(req.EntropyBits / 8)
	dst[1] = float32(math.Log2(1+float64(max(req.InputTokens, 0))) / 17)
	dst[2] = float32(math.Log2(1+float64(max(req.PredictedOutput, 0))) / 12)
	nb := len(req.BlockHashes)
	maxPrefix := 0
	for k, role := range featurePools {
		n, prefix, faults, load, sigma, backlog := 0, 0, 0.0, 0.0, 0.0, 10.0
		for i := range s.Workers {
			w := &s.Workers[i]
			if !w.Healthy || w.Role != role {
				continue
			}
			n++
			prefix = max(prefix, w.PrefixBlocks)
			faults += w.KVFaultsPerMs
			load += w.Load()
			sigma += w.BurstSigma
			c := &w.Class
			if !c.Known() {
				c = &ReferenceClass
			}
			backlog = min(backlog, float64(w.PendingPrefill)/c.PrefillTokensPerSec)
		}
		maxPrefix = max(maxPrefix, prefix)
		if nb > 0 {
			dst[4+k] = float32(float64(prefix) / float64(nb))
		}
		if n > 0 {
			dst[7+k] = float32(math.Log1p(faults / float64(n)))
			dst[10+k] = float32(load / float64(n))
			dst[16+k] = float32(sigma / float64(n) / 10)
		}
		dst[13+k] = float32(backlog)
	}
	dst[3] = 1
	if req.InputTokens > 0 {
		dst[3] = float32(max(0, 1-float64(maxPrefix*16)/float64(req.InputTokens)))
	}
	if req.Stream {
		dst[19] = 1
	}
}

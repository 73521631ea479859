package lmtrain

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/phaseless/phaseless/llm"
	"github.com/phaseless/phaseless/models/lm"
	"github.com/phaseless/phaseless/models/lm/tokenizer"
)

// EngineConfig is c as the engine's lm.Config.
func EngineConfig(c Config) lm.Config {
	return lm.Config{
		Vocab: c.Vocab, Dim: c.Dim, Layers: c.Layers, Heads: c.Heads, KVHeads: c.KVHeads,
		FFN: c.FFN, ContextLen: c.Context, RopeTheta: float64(c.RopeTheta), NormEps: float64(c.NormEps),
	}
}

// EngineWeights views p as the engine's lm.Weights (no copy; the layouts are
// the same by construction).
func EngineWeights(p *Params) *lm.Weights {
	w := &lm.Weights{TokenEmbd: p.Embed.Data, OutputNorm: p.Norm.Data, Output: p.Output.Data}
	for _, l := range p.Layers {
		w.Layers = append(w.Layers, lm.LayerWeights{
			AttnNorm: l.AttnNorm.Data, Q: l.Q.Data, K: l.K.Data, V: l.V.Data, O: l.O.Data,
			FFNNorm: l.FFNNorm.Data, Gate: l.Gate.Data, Up: l.Up.Data, Down: l.Down.Data,
		})
	}
	return w
}

// ParamsFromModel copies a loaded model's weights (dequantised) into
// training parameters of shape c, to fine-tune it.
func ParamsFromModel(m *lm.Model, c Config) (*Params, error) {
	if got := EngineConfig(c); m.Config.Vocab != got.Vocab || m.Config.Dim != got.Dim || m.Config.Layers != got.Layers ||
		m.Config.Heads != got.Heads || m.Config.KVHeads != got.KVHeads || m.Config.FFN != got.FFN {
		return nil, fmt.Errorf("init model: shape %+v is not the preset's %+v", m.Config, got)
	}
	p := NewParams(c)
	w := m.Weights()
	if w.Output == nil {
		return nil, fmt.Errorf("init model: tied output weights are not supported")
	}
	ew := EngineWeights(p)
	pairs := [][2][]float32{{ew.TokenEmbd, w.TokenEmbd}, {ew.OutputNorm, w.OutputNorm}, {ew.Output, w.Output}}
	for i, l := range w.Layers {
		d := ew.Layers[i]
		pairs = append(pairs, [2][]float32{d.AttnNorm, l.AttnNorm}, [2][]float32{d.Q, l.Q}, [2][]float32{d.K, l.K}, [2][]float32{d.V, l.V},
			[2][]float32{d.O, l.O}, [2][]float32{d.FFNNorm, l.FFNNorm}, [2][]float32{d.Gate, l.Gate}, [2][]float32{d.Up, l.Up}, [2][]float32{d.Down, l.Down})
	}
	for _, pr := range pairs {
		if len(pr[0]) != len(pr[1]) {
			return nil, fmt.Errorf("init model: tensor of %d values where %d are expected", len(pr[1]), len(pr[0]))
		}
		copy(pr[0], pr[1])
	}
	return p, nil
}

// Provenance is what a shipped model records about how it was made, written
// into the GGUF metadata under phaseless.*.
type Provenance struct {
	Name        string      // general.name
	Description string      // general.description
	Preset      string      // preset that made it, "" for a custom run
	Command     string      // the command that reproduces the file
	Train       TrainConfig // full training configuration
	Sources     []string    // data sources with licences
	Result      *Result     // measured outcome; may be nil
	// Sampling is the sampling the model declares (general.sampling.*).
	Sampling llm.Sampling
}

// ExportGGUF writes p as a GGUF file the engine loads, with the byte-level
// tokenizer and the provenance in its metadata.
func ExportGGUF(w io.Writer, p *Params, prov Provenance, dtype lm.DType) error {
	tc, err := json.Marshal(prov.Train)
	if err != nil {
		return err
	}
	mc, err := json.Marshal(p.Config)
	if err != nil {
		return err
	}
	meta := lm.SamplingMeta(prov.Sampling)
	for k, v := range map[string]any{
		"general.name":                prov.Name,
		"general.description":         prov.Description,
		"general.license":             "Apache-2.0 (weights); training data licences in phaseless.data.sources",
		"phaseless.trainer":           "models/lmtrain",
		"phaseless.train.config":      string(tc),
		"phaseless.model.config":      string(mc),
		"phaseless.train.command":     prov.Command,
		"phaseless.train.preset":      prov.Preset,
		"phaseless.data.sources":      append([]string{}, prov.Sources...),
		"phaseless.chat.template":     "<|user|>\\n{prompt}\\n<|assistant|>\\n{answer}\\n (turn ends at \"<|\")",
		"phaseless.train.param_count": uint64(p.Count()),
	} {
		meta[k] = v
	}
	if len(prov.Sources) == 0 {
		meta["phaseless.data.sources"] = []string{"unspecified"}
	}
	if r := prov.Result; r != nil {
		meta["phaseless.train.steps"] = uint32(r.Steps)
		meta["phaseless.eval.val_loss"] = float32(r.ValLoss)
		meta["phaseless.eval.val_perplexity"] = float32(r.Perplexity())
	}
	if err := lm.WriteGGUF(w, EngineConfig(p.Config), tokenizer.ByteSpec(), EngineWeights(p), meta, dtype); err != nil {
		return fmt.Errorf("export %s: %w", prov.Name, err)
	}
	return nil
}

package predictor

import (
	"errors"
	"fmt"
	"math"

	"github.com/phaseless/phaseless/models/textfeat"
)

// Predictor estimates the probability that a request needs the cloud from
// its textfeat feature vector (length textfeat.Dim). Implementations are safe
// for concurrent use.
type Predictor interface {
	Predict(features []float32) (float64, error)
}

// Thresholder is a Predictor that carries the decision threshold it was
// trained for: a request should go to the cloud when Predict answers at
// least th. Model and Swappable implement it; ok is false when the model
// names no threshold.
type Thresholder interface {
	Threshold() (th float64, ok bool)
}

// Errors callers branch on.
var (
	// ErrInputWidth: the feature vector or the model's input has the wrong width.
	ErrInputWidth = errors.New("predictor: wrong input width")
	// ErrUnsupported: the model uses an operator, type or layout this runtime does not run.
	ErrUnsupported = errors.New("predictor: unsupported model")
	// ErrBadOutput: the model answered something that is not a probability.
	ErrBadOutput = errors.New("predictor: output is not a probability")
)

// DefaultEntropyThreshold is the source articles' rule: input byte entropy
// above 4.2 bits per character goes to the cloud.
const DefaultEntropyThreshold = 4.2

// EntropyRule is the source articles' router as a Predictor, the baseline
// the learned model must beat. It reads the byte entropy of the normalised
// text from features[textfeat.IdxByteEntropy] (bits per byte) and answers
// sigmoid((H − Threshold) / Softness): above 0.5 exactly when H > Threshold,
// and monotone in H so that AUC and APGR rank requests by entropy.
//
// Feature picks another entropy of the vector instead: the answering
// model's own next-token entropy (textfeat.IdxEntropyMean, nats) makes it
// the design card's entropy predictor measured on the edge model. The
// default 0 is textfeat.IdxByteEntropy.
type EntropyRule struct {
	Threshold float64 // bits; 0 means DefaultEntropyThreshold
	Softness  float64 // bits; 0 means 0.1 (a 0.3-bit margin gives p ≈ 0.95)
	Feature   int     // index into the vector; 0 = textfeat.IdxByteEntropy
}

// ReadsProbe reports whether the rule reads a feature of the probe block
// (ProbeReader): the edge-model entropy rule does, the byte-entropy rule
// does not.
func (r EntropyRule) ReadsProbe() bool {
	return r.Feature >= textfeat.ProbeOffset && r.Feature < textfeat.ProbeOffset+textfeat.ProbeFeatures
}

var _ Predictor = EntropyRule{}

// Predict implements Predictor.
func (r EntropyRule) Predict(features []float32) (float64, error) {
	if len(features) != textfeat.Dim {
		return 0, fmt.Errorf("%w: %d features, want %d", ErrInputWidth, len(features), textfeat.Dim)
	}
	th, soft := r.Threshold, r.Softness
	if th == 0 {
		th = DefaultEntropyThreshold
	}
	if soft == 0 {
		soft = 0.1
	}
	if r.Feature < 0 || r.Feature >= textfeat.Dim {
		return 0, fmt.Errorf("%w: feature %d of %d", ErrInputWidth, r.Feature, textfeat.Dim)
	}
	h := float64(features[r.Feature])
	return 1 / (1 + math.Exp(-(h-th)/soft)), nil
}

// Source names the rule in routing decisions ("entropy-rule"), so a
// decision made by the rule reads as the rule's whether it runs alone or
// inside a Swappable.
func (EntropyRule) Source() string { return "entropy-rule" }

// Bound is the byte entropy (bits) at which the rule answers p: the
// entropy bound a probability threshold p stands for.
func (r EntropyRule) Bound(p float64) float64 {
	th, soft := r.Threshold, r.Softness
	if th == 0 {
		th = DefaultEntropyThreshold
	}
	if soft == 0 {
		soft = 0.1
	}
	return th + soft*math.Log(p/(1-p))
}

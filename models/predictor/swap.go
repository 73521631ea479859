package predictor

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"

	"github.com/phaseless/phaseless/models/textfeat"
)

// Swappable serves one Predictor and replaces it with a new model while
// requests keep flowing: Predict never blocks on a swap, a request in flight
// finishes on the model it started with, and a candidate that fails
// validation is refused with the old model still serving.
type Swappable struct {
	cur atomic.Pointer[holder]
}

type holder struct{ p Predictor }

var _ Predictor = (*Swappable)(nil)

// probeTexts are run through every candidate before it replaces the current
// model: a command, a knowledge question, CJK with emoji, and nothing.
var probeTexts = []string{
	"set a timer for ten minutes",
	"Which of the following best explains the photoelectric effect?\nA. waves\nB. photons\nC. heat\nD. sound\nAnswer:",
	"東京駅までの道を教えてください 🚗",
	"",
}

// NewSwappable returns a Swappable serving p, which must not be nil.
func NewSwappable(p Predictor) *Swappable {
	if p == nil {
		panic("predictor: NewSwappable(nil)")
	}
	s := &Swappable{}
	s.cur.Store(&holder{p})
	return s
}

// Predict implements Predictor with whatever model is current.
func (s *Swappable) Predict(features []float32) (float64, error) {
	return s.cur.Load().p.Predict(features)
}

// Threshold is the current model's decision threshold (Thresholder); ok is
// false when the current predictor carries none. A swap between a caller's
// Predict and Threshold pairs one request's probability with the other
// model's threshold; each is valid for its model, and the next request
// sees the new pair.
func (s *Swappable) Threshold() (float64, bool) {
	if t, ok := s.cur.Load().p.(Thresholder); ok {
		return t.Threshold()
	}
	return 0, false
}

var _ Thresholder = (*Swappable)(nil)

// ReadsProbe is the serving predictor's (ProbeReader; true when it does not
// say).
func (s *Swappable) ReadsProbe() bool {
	if r, ok := s.cur.Load().p.(ProbeReader); ok {
		return r.ReadsProbe()
	}
	return true
}

var _ ProbeReader = (*Swappable)(nil)

// Current returns the Predictor now serving.
func (s *Swappable) Current() Predictor { return s.cur.Load().p }

// Source names what the Swappable serves now: the current predictor's own
// Source when it has one (EntropyRule), "predictor" for a learned model.
func (s *Swappable) Source() string {
	if n, ok := s.Current().(interface{ Source() string }); ok {
		return n.Source()
	}
	return "predictor"
}

// Swap loads the ONNX model at path, validates it and makes it current. On
// any error the old model keeps serving and the error says why.
func (s *Swappable) Swap(path string) error {
	m, err := Load(path)
	if err != nil {
		return fmt.Errorf("swap predictor: %w", err)
	}
	return s.SwapTo(m)
}

// SwapTo validates p and makes it current.
func (s *Swappable) SwapTo(p Predictor) error {
	if p == nil {
		return errors.New("swap predictor: nil predictor")
	}
	if err := Validate(p); err != nil {
		return fmt.Errorf("swap predictor: %w", err)
	}
	s.cur.Store(&holder{p})
	return nil
}

// Validate checks that p takes textfeat.Dim features and answers a finite
// probability in [0,1] for each probe text, and refuses vectors of another
// width.
func Validate(p Predictor) error {
	if m, ok := p.(*Model); ok && m.InputWidth() != textfeat.Dim {
		return fmt.Errorf("%w: model takes %d features, textfeat v%d has %d", ErrInputWidth, m.InputWidth(), textfeat.Version, textfeat.Dim)
	}
	for _, text := range probeTexts {
		v, err := p.Predict(textfeat.Extract(text))
		if err != nil {
			return fmt.Errorf("probe %q: %w", text, err)
		}
		if math.IsNaN(v) || v < 0 || v > 1 {
			return fmt.Errorf("probe %q: %w: %v", text, ErrBadOutput, v)
		}
	}
	if _, err := p.Predict(make([]float32, textfeat.Dim+1)); err == nil {
		return fmt.Errorf("%w: predictor accepted %d features, want exactly %d", ErrInputWidth, textfeat.Dim+1, textfeat.Dim)
	}
	return nil
}

package firmware

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"
)

// ProbeSetFile is the name a model or router bundle carries its probe set
// under (`phaselessctl ota sign ... probes.json=SET`): the device scores the
// new artifact and the one in force on it before it commits the update
// (agent/probegate).
const ProbeSetFile = "probes.json"

// ProbeSet is a quality gate's exam: prompts with graded expectations. The
// device answers every prompt with the candidate artifact and with the one
// in force, grades both with models/grade, and commits the candidate only
// if its mean score is at least the installed one's minus Margin.
type ProbeSet struct {
	Name string `json:"name,omitempty"`
	// Margin is how much worse (in mean grade score, 0..1) the candidate
	// may score than the artifact in force and still commit. The fleet's
	// probe-margin setting replaces it on a device where it is set.
	Margin float64 `json:"margin"`
	// MaxTokens bounds each answer of a language model (default
	// DefaultProbeTokens); routers answer with a route and ignore it.
	MaxTokens int     `json:"max_tokens,omitempty"`
	Probes    []Probe `json:"probes"`
}

// Probe is one prompt and what a right answer is, in models/grade's
// notation: "=a|b" exact, "#42" number, "@intent value,value" an in-car
// command's reply, "~reference" word overlap. A router's answer is the
// route it picks, so its probes expect "=local" or "=cloud".
type Probe struct {
	Prompt string `json:"prompt"`
	Expect string `json:"expect"`
}

// DefaultProbeTokens is a probe answer's length when the set names none:
// the shipped edge model is byte-level (a token is a byte) and its in-car
// replies run to about 90 bytes; a cut reply grades wrong.
const DefaultProbeTokens = 96

// Limits that keep a probe set small enough to run on a device's trial
// and keep a hostile file from making it allocate without bound.
const (
	maxProbeSet    = 1 << 20
	maxProbes      = 1000
	maxProbePrompt = 4096
	maxProbeTokens = 512
	// maxProbeName keeps the name short: it travels in every gate's
	// result line, in the device's status (8 KiB at most).
	maxProbeName = 64
)

// ErrProbeSet marks a probe set that does not verify or is malformed.
var ErrProbeSet = errors.New("probe set is invalid")

// signedProbeSet is the file: the probe set's JSON and the ed25519
// signature of its compact form (json.Compact: insignificant whitespace
// removed, nothing else changed), so the file may be indented or
// re-indented but not altered.
type signedProbeSet struct {
	ProbeSet  json.RawMessage `json:"probe_set"`
	Signature string          `json:"signature"` // base64
}

// Check reports the first thing wrong with ps, besides its expectations'
// notation (models/grade parses that; firmware does not import models).
func (ps ProbeSet) Check() error {
	if len(ps.Name) > maxProbeName || !utf8.ValidString(ps.Name) {
		return fmt.Errorf("%w: name of %d bytes (want at most %d of UTF-8)", ErrProbeSet, len(ps.Name), maxProbeName)
	}
	if len(ps.Probes) == 0 || len(ps.Probes) > maxProbes {
		return fmt.Errorf("%w: %d probes (want 1..%d)", ErrProbeSet, len(ps.Probes), maxProbes)
	}
	if math.IsNaN(ps.Margin) || ps.Margin < 0 || ps.Margin > 1 {
		return fmt.Errorf("%w: margin %v (want 0..1, in mean grade score)", ErrProbeSet, ps.Margin)
	}
	if ps.MaxTokens < 0 || ps.MaxTokens > maxProbeTokens {
		return fmt.Errorf("%w: max_tokens %d (want 0..%d)", ErrProbeSet, ps.MaxTokens, maxProbeTokens)
	}
	for i, p := range ps.Probes {
		if p.Prompt == "" || len(p.Prompt) > maxProbePrompt || !utf8.ValidString(p.Prompt) {
			return fmt.Errorf("%w: probe %d: prompt of %d bytes (want 1..%d of UTF-8)", ErrProbeSet, i+1, len(p.Prompt), maxProbePrompt)
		}
		if p.Expect == "" {
			return fmt.Errorf("%w: probe %d: no expectation", ErrProbeSet, i+1)
		}
	}
	return nil
}

// Tokens is the answer length a language model is given for each probe.
func (ps ProbeSet) Tokens() int {
	if ps.MaxTokens > 0 {
		return ps.MaxTokens
	}
	return DefaultProbeTokens
}

// SignProbeSet checks ps and writes it signed with key.
func SignProbeSet(key ed25519.PrivateKey, ps ProbeSet) ([]byte, error) {
	if err := ps.Check(); err != nil {
		return nil, err
	}
	body, err := json.Marshal(ps)
	if err != nil {
		return nil, err
	}
	out, err := json.MarshalIndent(signedProbeSet{ProbeSet: body, Signature: base64.StdEncoding.EncodeToString(ed25519.Sign(key, body))}, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// OpenProbeSet verifies a signed probe set against the fleet's key and
// parses it. A device runs only probe sets the fleet signed: one that an
// attacker could write would let them pass a bad model or block every
// update.
func OpenProbeSet(raw []byte, key ed25519.PublicKey) (ProbeSet, error) {
	if len(raw) > maxProbeSet {
		return ProbeSet{}, fmt.Errorf("%w: %d bytes, over %d", ErrProbeSet, len(raw), maxProbeSet)
	}
	var s signedProbeSet
	if err := json.Unmarshal(raw, &s); err != nil {
		return ProbeSet{}, fmt.Errorf("%w: %v", ErrProbeSet, err)
	}
	sig, err := base64.StdEncoding.DecodeString(s.Signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return ProbeSet{}, fmt.Errorf("%w: signature is not %d bytes of base64", ErrProbeSet, ed25519.SignatureSize)
	}
	var body bytes.Buffer
	if err := json.Compact(&body, s.ProbeSet); err != nil {
		return ProbeSet{}, fmt.Errorf("%w: %v", ErrProbeSet, err)
	}
	if len(key) != ed25519.PublicKeySize || !ed25519.Verify(key, body.Bytes(), sig) {
		return ProbeSet{}, fmt.Errorf("%w: %w", ErrProbeSet, ErrBadSignature)
	}
	var ps ProbeSet
	if err := json.Unmarshal(s.ProbeSet, &ps); err != nil {
		return ProbeSet{}, fmt.Errorf("%w: %v", ErrProbeSet, err)
	}
	return ps, ps.Check()
}

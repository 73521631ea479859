package sched

import "fmt"

// Combo is a resource combination: which pool prefills a request and which
// decodes it. The learned classifier's centres each name one.
type Combo uint8

// The combinations. Colocated ones run the whole request on one worker of
// the pool; split ones prefill on the prefill-heavy pool and decode on
// another pool (Decision.Split).
const (
	ComboColocatePrefill  Combo = iota // one prefill-heavy worker does both
	ComboColocateDecode                // one decode-heavy worker does both
	ComboColocateStream                // one stream worker does both
	ComboColocateCheapest              // the cheapest worker anywhere that meets the SLOs (Priced without a split)
	ComboSplitDecode                   // prefill-heavy prefills, decode-heavy decodes
	ComboSplitStream                   // prefill-heavy prefills, stream decodes
	NumCombos
)

var comboNames = [NumCombos]string{"colocate-prefill", "colocate-decode", "colocate-stream", "colocate-cheapest", "split-decode", "split-stream"}

func (c Combo) String() string {
	if c < NumCombos {
		return comboNames[c]
	}
	return fmt.Sprintf("combo(%d)", uint8(c))
}

// ParseCombo reads a name as String writes it.
func ParseCombo(s string) (Combo, error) {
	for i, n := range comboNames {
		if n == s {
			return Combo(i), nil
		}
	}
	return 0, fmt.Errorf("unknown resource combination %q", s)
}

// Available reports whether s has a healthy worker for every pool c uses.
func (c Combo) Available(s *Snapshot) bool {
	var has [NumRoles]bool
	for i := range s.Workers {
		if w := &s.Workers[i]; w.Healthy {
			has[w.Role] = true
		}
	}
	switch c {
	case ComboColocatePrefill:
		return has[RolePrefill]
	case ComboColocateDecode:
		return has[RoleDecode]
	case ComboColocateStream:
		return has[RoleStream]
	case ComboSplitDecode:
		return has[RolePrefill] && has[RoleDecode]
	case ComboSplitStream:
		return has[RolePrefill] && has[RoleStream]
	}
	return c == ComboColocateCheapest
}

// DecideCombo places req with combination c, choosing the workers inside
// its pools by the same estimates as Decide. A split needs more than one
// output token; when c cannot be had (no healthy worker in its pool, or a
// single-token request asked to split) the cheapest colocated placement is
// used. pol and r label the decision.
func (p *Priced) DecideCombo(req *Request, s *Snapshot, c Combo, pol PolicyID, r Reason) (Decision, error) {
	var pre, dec roleMask
	switch c {
	case ComboColocatePrefill:
		return p.colocate(req, s, 1<<RolePrefill, pol, r, 0)
	case ComboColocateDecode:
		return p.colocate(req, s, 1<<RoleDecode, pol, r, 0)
	case ComboColocateStream:
		return p.colocate(req, s, 1<<RoleStream, pol, r, 0)
	case ComboSplitDecode:
		pre, dec = 1<<RolePrefill, 1<<RoleDecode
	case ComboSplitStream:
		pre, dec = 1<<RolePrefill, 1<<RoleStream
	default:
		return p.colocate(req, s, anyRole, pol, r, 0)
	}
	if req.PredictedOutput >= 2 {
		a := p.best(req, s, pre, phasePrefill, -1, 0)
		if a.i >= 0 {
			if b := p.best(req, s, dec, phaseDecode, a.i, 0); b.i >= 0 {
				d := decided(req, s, a.i, r, pol)
				d.Split, d.DecodeWorker = true, b.i
				return d, nil
			}
		}
	}
	return p.colocate(req, s, anyRole, pol, r, 0)
}

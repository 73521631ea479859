package sched

// NameDisaggregated is the x-phaseless-policy (--dev) that splits every
// request it can: the demo's and experiments' way to see a split without
// waiting for the scheduler to choose one. It is an override only, not a
// --scheduler (Names does not list it).
const NameDisaggregated = "disaggregated"

// Disaggregated prefills on the least loaded prefill-heavy worker and
// decodes on the least loaded other decode-heavy worker (else stream). With
// no healthy worker of the one pool or the other it places the request as
// explicit phases would, on one worker.
type Disaggregated struct {
	prefill *ExplicitPhases // declares every request a prefill
}

var _ Policy = Disaggregated{}

// NewDisaggregated returns the policy.
func NewDisaggregated() (Disaggregated, error) {
	p, err := NewExplicitPhases(ExplicitPhasesConfig{PrefillPrompt: 1})
	return Disaggregated{prefill: p}, err
}

// Name implements Policy.
func (Disaggregated) Name() string { return NameDisaggregated }

// Decide implements Policy.
func (p Disaggregated) Decide(req *Request, s *Snapshot) (Decision, error) {
	d, err := p.prefill.Decide(req, s)
	if err != nil || d.Pool != RolePrefill {
		return d, err
	}
	best, bestPref := -1, 0
	for i := range s.Workers {
		w := &s.Workers[i]
		pref := 0
		switch w.Role {
		case RoleDecode:
			pref = 2
		case RoleStream:
			pref = 1
		}
		if i == d.Worker || !w.Healthy || pref == 0 {
			continue
		}
		if pref > bestPref || pref == bestPref && w.Load() < s.Workers[best].Load() {
			best, bestPref = i, pref
		}
	}
	if best >= 0 {
		d.Split, d.DecodeWorker = true, best
	}
	return d, nil
}

// Package schedtest holds stand-ins for cloud/sched's policies in other
// packages' tests.
package schedtest

import "github.com/phaseless/phaseless/cloud/sched"

// Fixed places every request as D says: the tests' stand-in for a policy
// whose choice they need to know (the decider that chooses when to split,
// a worker out of range), so what the layers around it change shows.
type Fixed struct{ D sched.Decision }

var _ sched.Policy = Fixed{}

// Name implements sched.Policy.
func (Fixed) Name() string { return "test-fixed" }

// Decide implements sched.Policy.
func (p Fixed) Decide(*sched.Request, *sched.Snapshot) (sched.Decision, error) { return p.D, nil }

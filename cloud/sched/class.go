package sched

// Class is what a worker's hardware costs the scheduler: how fast it
// prefills and decodes the served model, how much KV it holds and its price.
// Pools that differ by GPU class are priced from these figures (cloud/sim
// derives them from its roofline for a GPU profile; phaseless-cloud does so
// for a `--worker URL#gpu=h100`). The zero value is an undeclared class:
// priced like every other undeclared worker, by load alone.
type Class struct {
	ID ClassID
	// PrefillTokensPerSec is prompt tokens one engine computes per second
	// when prefill saturates it (compute-bound).
	PrefillTokensPerSec float64
	// DecodeStepSec is one decode step at batch 1 (the weights streamed
	// once from memory, plus the step overhead): the floor of its TPOT.
	DecodeStepSec float64
	// DecodeStepPerSeq is what each further running sequence adds to a
	// decode step (its KV read at a typical context).
	DecodeStepPerSeq float64
	// KVTokens is the KV cache's capacity in tokens: a longer prompt plus
	// output cannot run there.
	KVTokens int
	// PricePerHour is the worker's $ per hour (all its GPUs).
	PricePerHour float64
}

// Known reports that the class was declared.
func (c *Class) Known() bool { return c.PrefillTokensPerSec > 0 && c.DecodeStepSec > 0 }

// ClassID names a GPU class compactly (cloud/sim's profiles).
type ClassID uint8

// GPU classes known to the scheduler.
const (
	ClassUnknown ClassID = iota
	ClassH100
	ClassA100
	ClassL4
	ClassT4
	ClassCPU
	ClassH200
	ClassL40S
	NumClasses
)

var classNames = [NumClasses]string{"", "h100", "a100", "l4", "t4", "cpu", "h200", "l40s"}

func (c ClassID) String() string {
	if c < NumClasses {
		return classNames[c]
	}
	return "class?"
}

// LookupClass returns the ID of a GPU class name, ClassUnknown when none.
func LookupClass(name string) ClassID {
	for i, n := range classNames {
		if i > 0 && n == name {
			return ClassID(i)
		}
	}
	return ClassUnknown
}

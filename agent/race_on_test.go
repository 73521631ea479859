//go:build race

package agent

// raceEnabled is true under -race, where the learning-loop test, which
// trains a router with gorgonia, would take minutes; make test also runs
// it without the race detector.
const raceEnabled = true

//go:build race

package ctl

// raceEnabled is true under -race, where the commands that train or
// evaluate models (gorgonia and the engine's numeric loops, no shared
// state) take minutes; make test runs them without the race detector.
const raceEnabled = true

//go:build race

package docscheck

// raceEnabled is true under -race, where the tests that start a real cloud
// and agents (the docs check, the operator's walkthrough) take tens of
// seconds; make test runs them without the race detector (RACE_FULL).
const raceEnabled = true

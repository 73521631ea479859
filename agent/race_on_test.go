//go:build race

package agent

// raceEnabled is true under -race, where the learning-loop test (it trains
// a router with gorgonia) and the kill -9 test would take minutes and the
// concurrent-clients test runs fewer clients; make test also runs them
// without the race detector.
const raceEnabled = true

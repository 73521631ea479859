//go:build race

package probegate

// raceEnabled is true under -race, where the real-model test would take
// minutes; make test also runs it without the race detector (RACE_FULL).
const raceEnabled = true

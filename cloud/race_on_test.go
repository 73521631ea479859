//go:build race

package cloud

// raceEnabled is true under -race, where the tests that generate hundreds
// of tokens with the shipped model take minutes; make test also runs them
// without the race detector (RACE_FULL).
const raceEnabled = true

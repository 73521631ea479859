//go:build race

package grammar

// raceEnabled is true under -race, where the mask test at the Llama 3
// vocabulary (its reference walk takes up to 250 ms a state) is skipped;
// make test runs it without the race detector.
const raceEnabled = true

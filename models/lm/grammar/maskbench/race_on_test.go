//go:build race

package maskbench

// raceEnabled is true under -race, where the sample at the Llama 3
// vocabulary is skipped and the byte-vocabulary comparison runs on part of
// it; make test runs them whole without the race detector.
const raceEnabled = true

//go:build race

package textfeat

// raceEnabled is true under -race, where sync.Pool deliberately drops a
// share of what is Put back, so allocation counts are not meaningful.
const raceEnabled = true

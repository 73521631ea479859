//go:build !race

package textfeat

const raceEnabled = false

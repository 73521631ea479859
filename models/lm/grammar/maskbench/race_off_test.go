//go:build !race

package maskbench

const raceEnabled = false

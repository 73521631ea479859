//go:build !race

package probegate

const raceEnabled = false

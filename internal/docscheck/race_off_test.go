//go:build !race

package docscheck

const raceEnabled = false

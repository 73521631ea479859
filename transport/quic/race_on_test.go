//go:build race

package quic

// raceEnabled is true under -race; see TestZeroRTTRunsOnce.
const raceEnabled = true

//go:build race

package fleetclient

// raceEnabled is true under -race, where the test through the emulated
// lossy link and tunnel (mostly waiting on the link's delays) runs past
// its time budget; make test also runs it without the race detector.
const raceEnabled = true

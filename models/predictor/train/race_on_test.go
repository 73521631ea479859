//go:build race

package train

// raceEnabled is true under -race, where the shifted-traffic fleet
// simulation (TestCalibratedFleetOnShiftedTraffic) would take minutes; make
// test also runs it without the race detector (RACE_FULL).
const raceEnabled = true

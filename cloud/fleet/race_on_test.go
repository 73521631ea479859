//go:build race

package fleet

// raceEnabled is true under -race, where the thousand-device rollout runs
// with a smaller fleet (make test runs the full one without -race).
const raceEnabled = true

//go:build race

package fleet

// raceEnabled is true under -race, where the thousand-device tests run
// with a smaller fleet and the crash test is skipped (make test runs the
// full ones without -race).
const raceEnabled = true

//go:build !race

package fleetclient

const raceEnabled = false

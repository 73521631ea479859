//go:build !unix

package firmware

// lockFile is a no-op where flock does not exist: one process per slot
// directory is then the caller's promise (the agent ships for Linux).
func lockFile(string) (func(), error) { return func() {}, nil }

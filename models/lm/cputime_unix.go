//go:build unix

package lm

import (
	"syscall"
	"time"
)

// processCPUTime is the CPU time this process has used (user + system). On a
// machine shared with other work, rates per CPU-second are steadier than rates
// per wall-clock second.
func processCPUTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

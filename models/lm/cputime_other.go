//go:build !unix

package lm

import "time"

// processCPUTime is unknown here; rates per CPU-second come out as 0.
func processCPUTime() time.Duration { return 0 }

//go:build !linux

package maskbench

import "time"

// threadCPU is not read outside Linux: the report then has wall times only.
func threadCPU() (time.Duration, bool) { return 0, false }

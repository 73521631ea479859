//go:build !linux

package ota

import "errors"

// freeBytes is not measured off Linux (the agent's device targets are all
// Linux): the space check before a download is skipped there.
func freeBytes(string) (int64, error) { return 0, errors.ErrUnsupported }

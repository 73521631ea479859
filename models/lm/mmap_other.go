//go:build !unix

package lm

import "os"

// mapFile is unavailable here: Load reads the file into memory instead.
func mapFile(*os.File, int64) ([]byte, func(), bool) { return nil, nil, false }

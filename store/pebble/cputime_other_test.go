//go:build !unix

package pebble

import "time"

// processCPU is 0 where it is not measured.
func processCPU() time.Duration { return 0 }

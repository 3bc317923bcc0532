//go:build !linux

package bench

import "os"

// syncData is fsync where there is no fdatasync.
func syncData(f *os.File) error { return f.Sync() }

package bench

import (
	"os"

	"golang.org/x/sys/unix"
)

// syncData is fdatasync, the sync Pebble's WAL uses on Linux.
func syncData(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }

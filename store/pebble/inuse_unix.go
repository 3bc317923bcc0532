//go:build linux || darwin || freebsd || netbsd || openbsd

package pebble

import (
	"io"
	"os"
	"syscall"
)

// lockHolder returns the pid of the process holding a write lock on the
// file, or 0. It must not run on a file this process has locked: closing
// the descriptor it opens would drop this process's lock.
func lockHolder(file string) int {
	f, err := os.Open(file)
	if err != nil {
		return 0
	}
	defer f.Close()
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: io.SeekStart}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_GETLK, &lk); err != nil || lk.Type == syscall.F_UNLCK {
		return 0
	}
	return int(lk.Pid)
}

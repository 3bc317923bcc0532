//go:build linux || darwin || freebsd || netbsd || openbsd

package pebble

import "syscall"

var errNoSpace error = syscall.ENOSPC

// freeBytes returns the bytes free to unprivileged users on dir's file
// system.
func freeBytes(dir string) (uint64, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return uint64(st.Bavail) * uint64(st.Bsize), true
}

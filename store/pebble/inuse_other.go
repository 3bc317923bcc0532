//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package pebble

// lockHolder cannot tell who holds the lock here.
func lockHolder(string) int { return 0 }

package pebble

import (
	"errors"
	"fmt"
	"path/filepath"
	"syscall"
)

// InUseError is Open's error when another process has the store open:
// Pebble locks the directory for as long as a process uses it.
type InUseError struct {
	Dir string
	// PID is the process holding the lock, 0 when it cannot be known.
	PID int
}

func (e *InUseError) Error() string {
	if e.PID > 0 {
		return fmt.Sprintf("store %s is in use by another process (pid %d)", e.Dir, e.PID)
	}
	return fmt.Sprintf("store %s is in use by another process", e.Dir)
}

// inUse turns the error of a Pebble open that found the directory locked
// by another process into an InUseError, and returns any other unchanged.
// Pebble takes a POSIX record lock on dir/LOCK; the kernel answers who
// holds it.
func inUse(dir string, err error) error {
	if !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EACCES) {
		return err
	}
	return &InUseError{Dir: dir, PID: lockHolder(filepath.Join(dir, "LOCK"))}
}

package pebble

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/devmsg/devmsg/store"
)

// The free-space floor (WithMinFree). Pebble treats a failed write to its
// log as fatal, so a disk that fills up stops the process; and restarted on
// a disk still full, it could not open. So writes that add data are refused
// with store.ErrFull while the data directory's file system has less than
// the floor free: the writes that keep the service going (presence, the
// acks and status of deliveries, callbacks' progress, trimming) are small
// and go on, in the space the floor keeps. Open refuses to start below it.
const (
	// diskCheckEvery is how often the free space is measured.
	diskCheckEvery = time.Second
	// diskLogEvery is the least time between two log lines while full.
	diskLogEvery = time.Minute
)

// DiskFullError is store.ErrFull from the embedded store: its data
// directory has less than the floor free.
type DiskFullError struct {
	Dir         string
	Free, Floor uint64 // bytes
}

func (e *DiskFullError) Error() string {
	return fmt.Sprintf("disk full: %s has %d MiB free, under the floor of %d MiB; writes that add data are refused until space is freed",
		e.Dir, e.Free>>20, e.Floor>>20)
}

// Is makes a DiskFullError match store.ErrFull.
func (e *DiskFullError) Is(target error) bool { return target == store.ErrFull }

// WithMinFree sets the free-space floor in bytes (0: none): below it, Open
// fails and writes that add data fail with a *DiskFullError.
func WithMinFree(bytes uint64) Option { return func(c *config) { c.minFree = bytes } }

// diskFloor watches the free space of the data directory.
type diskFloor struct {
	dir  string
	full atomic.Pointer[DiskFullError] // nil while above the floor
	// refused counts writes refused below the floor.
	refused atomic.Int64

	mu       sync.Mutex // serialises measure
	floor    uint64
	lastLog  time.Time
	unlogged int64
}

// checkFree returns a *DiskFullError when dir's file system has less
// than floor bytes free. A file system whose free space cannot be read
// passes.
func checkFree(dir string, floor uint64) *DiskFullError {
	if floor == 0 {
		return nil
	}
	free, ok := freeBytes(existingParent(dir))
	if !ok || free >= floor {
		return nil
	}
	return &DiskFullError{Dir: dir, Free: free, Floor: floor}
}

// existingParent is dir, or its nearest ancestor that exists.
func existingParent(dir string) string {
	for {
		if _, err := os.Stat(dir); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return dir
		}
		dir = parent
	}
}

// measure updates the floor's state and logs its changes.
func (s *Store) measure() {
	d := &s.disk
	d.mu.Lock()
	defer d.mu.Unlock()
	was := d.full.Load()
	now := checkFree(d.dir, d.floor)
	d.full.Store(now)
	switch {
	case now != nil && (was == nil || time.Since(d.lastLog) >= diskLogEvery):
		refused := d.refused.Load()
		s.log.Error("store: "+now.Error(), "writes_refused", refused-d.unlogged)
		d.lastLog, d.unlogged = time.Now(), refused
	case now == nil && was != nil:
		s.log.Info("store: disk space is back above the floor; writes resume", "dir", d.dir)
	}
}

// watchDisk measures the free space every diskCheckEvery until Close.
func (s *Store) watchDisk() {
	t := time.NewTicker(diskCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.measure()
		}
	}
}

// enterWrite is enter for a method that adds data: it fails with the
// floor's *DiskFullError while the disk is under it.
func (s *Store) enterWrite(ctx context.Context) error {
	if full := s.disk.full.Load(); full != nil {
		s.disk.refused.Add(1)
		return full
	}
	return s.enter(ctx)
}

// DiskFull returns the *DiskFullError while the data directory is under
// its free-space floor, nil otherwise.
func (s *Store) DiskFull() error {
	if full := s.disk.full.Load(); full != nil {
		return full
	}
	return nil
}

// WritesRefused returns how many writes were refused under the floor.
func (s *Store) WritesRefused() int64 { return s.disk.refused.Load() }

// isNoSpace reports whether err is the file system's "no space left".
func isNoSpace(err error) bool { return errors.Is(err, errNoSpace) }

//go:build unix

package fdbudget

import "syscall"

// RaiseLimit raises the process's soft limit on open files to its hard
// limit and returns the soft limit in effect afterwards. When the limit
// cannot be read it returns 0 and the error.
func RaiseLimit() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Cur < lim.Max {
		raised := lim
		raised.Cur = raised.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err == nil {
			lim = raised
		}
	}
	return lim.Cur, nil
}

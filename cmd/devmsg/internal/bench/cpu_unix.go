//go:build unix

package bench

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// selfCPU is the CPU time this process has used, in seconds; -1 when
// unknown.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

// userHZ is the unit of the times in /proc/<pid>/stat: USER_HZ, which
// Linux fixes at 100 on every architecture Go supports.
const userHZ = 100

// procCPU is the CPU time process pid has used, all its threads, in
// seconds, from /proc (so Linux only); -1 when unknown. Children it
// forked (Redis's AOF rewrites) are not counted.
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The command name, in parentheses, may hold spaces; fields count
	// from the state after it: utime and stime are fields 14 and 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return -1
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 13 {
		return -1
	}
	utime, err1 := strconv.ParseInt(string(f[11]), 10, 64)
	stime, err2 := strconv.ParseInt(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return float64(utime+stime) / userHZ
}

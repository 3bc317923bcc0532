//go:build !unix

package bench

// selfCPU is unknown off unix.
func selfCPU() float64 { return -1 }

// procCPU is unknown off unix.
func procCPU(int) float64 { return -1 }

//go:build !unix

package fdbudget

// RaiseLimit has no descriptor limit to raise here: it returns 0 (no
// budget).
func RaiseLimit() (uint64, error) { return 0, nil }

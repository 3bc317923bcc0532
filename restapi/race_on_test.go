//go:build race

package restapi

// raceEnabled says the race detector is on: it allocates for itself, so
// the tests that count allocations skip.
const raceEnabled = true

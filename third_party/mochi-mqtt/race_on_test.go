// SPDX-License-Identifier: MIT

//go:build race

package mqtt

// raceEnabled: the race detector's instrumentation makes frames larger, so
// stack sizes are not measured under it.
const raceEnabled = true

// SPDX-License-Identifier: MIT

//go:build !race

package mqtt

const raceEnabled = false

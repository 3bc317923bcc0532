//go:build race

package broker

const raceEnabled = true

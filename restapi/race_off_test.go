//go:build !race

package restapi

const raceEnabled = false

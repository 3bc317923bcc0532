package restapi

// Integers written in fraction or exponent form must be read exactly,
// never rounded through a float64.

import (
	"encoding/json"
	"errors"
	"testing"
)

// docs/api.md: integer fields take integral JSON numbers (5, 5.0, 5e0);
// an integral value in int64 range is that integer, not a neighbour.
func TestIntegralFloatSpellingKeepsValue(t *testing.T) {
	for lit, want := range map[string]int64{
		"9007199254740993.0":     9007199254740993,
		"9007199254740993e0":     9007199254740993,
		"1234567890123456789.0":  1234567890123456789,
		"9223372036854775807.0":  9223372036854775807,
		"-9223372036854775808.0": -9223372036854775808,
		"1.5e1":                  15,
		"0.5e1":                  5,
		"-0.0":                   0,
		"0e99999999999999999999": 0,
		"3.6e3":                  3600,
		"36000e-1":               3600,
	} {
		got, err := parseInt(json.RawMessage(lit))
		if err != nil || got != want {
			t.Errorf("parseInt(%s) = %d, %v; want %d", lit, got, err, want)
		}
	}
}

// docs/api.md: "A fraction is 400/1003 <field> must be an integer" - also
// a fraction too small for a float64 to hold.
func TestTinyFractionIsRefused(t *testing.T) {
	for _, lit := range []string{"5.00000000000000000001", "604800.0000000000000001", "1.0000000000000000001e3", "null"} {
		if n, err := parseInt(json.RawMessage(lit)); err == nil {
			t.Errorf("parseInt(%s) = %d, want an error (a fraction)", lit, n)
		}
	}
}

func TestHugeExponentsAreRefusedCheaply(t *testing.T) {
	for lit, wantRange := range map[string]bool{
		"1e999":                   true,
		"1e99999999999999999999":  true,
		"9223372036854775808.0":   true,
		"1e-99999999999999999999": false,
		"5e-1":                    false,
	} {
		_, err := parseInt(json.RawMessage(lit))
		if err == nil || errors.Is(err, errIntRange) != wantRange {
			t.Errorf("parseInt(%s) = %v, want out of range %v", lit, err, wantRange)
		}
	}
}

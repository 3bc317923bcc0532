package broker

import "testing"

func TestMatchFilter(t *testing.T) {
	tests := []struct {
		filter, topic string
		want          bool
	}{
		{"d/a/x/msg", "d/a/x/msg", true},
		{"d/a/x/#", "d/a/x/msg", true},
		{"d/a/x/#", "d/a/x/property/desired", true},
		{"d/a/x/+", "d/a/x/msg", true},
		{"d/a/x/+", "d/a/x/property/desired", false},
		{"d/a/x/property/+", "d/a/x/property/desired", true},
		{"d/a/x/+/desired", "d/a/x/property/desired", true},
		{"d/a/x/msg/#", "d/a/x/msg", true}, // "#" also matches its parent
		{"d/a/x/msg", "d/a/x/msg/click", false},
		{"d/a/x/ms", "d/a/x/msg", false},
		{"d/a/y/#", "d/a/x/msg", false},
		{"#", "d/a/x/msg", true},
	}
	for _, tc := range tests {
		if got := matchFilter(tc.filter, tc.topic); got != tc.want {
			t.Errorf("matchFilter(%q, %q) = %v, want %v", tc.filter, tc.topic, got, tc.want)
		}
	}
}

func TestParseUsername(t *testing.T) {
	tests := []struct {
		in       string
		app, dev string
		ok       bool
	}{
		{"key/dev-1", "key", "dev-1", true},
		{"a-b_c/x@y.z", "a-b_c", "x@y.z", true},
		{"nodevice", "", "", false},
		{"/dev", "", "", false},
		{"key/", "", "", false},
		{"", "", "", false},
	}
	for _, tc := range tests {
		app, dev, ok := parseUsername(tc.in)
		if app != tc.app || dev != tc.dev || ok != tc.ok {
			t.Errorf("parseUsername(%q) = %q, %q, %v", tc.in, app, dev, ok)
		}
	}
}

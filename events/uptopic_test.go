package events

import (
	"strings"
	"testing"
)

// TestIsUpTopic: up, or up/ and a suffix of 1 to 128 bytes of non-empty
// levels without wildcards.
func TestIsUpTopic(t *testing.T) {
	for topic, want := range map[string]bool{
		"up": true, "up/temp": true, "up/room-1/humidity": true, "up/" + strings.Repeat("x", 128): true,
		"up/": false, "up/" + strings.Repeat("x", 129): false, "up/+": false, "up/a/#": false,
		"up//x": false, "up/a/": false, "up/a//b": false, "up///": false, "up/ ": true,
		"ups/x": false, "UP": false, "upx": false,
	} {
		if got := IsUpTopic(topic); got != want {
			t.Errorf("IsUpTopic(%q) = %v, want %v", topic, got, want)
		}
	}
}

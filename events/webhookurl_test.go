package events

import "testing"

func TestNormalWebhookURL(t *testing.T) {
	for raw, want := range map[string]string{
		"http://127.0.0.1:19601/x?":         "http://127.0.0.1:19601/x",
		"HTTP://Hooks.Example.COM:80/A?b=C": "http://hooks.example.com/A?b=C",
		"https://example.com:443":           "https://example.com/",
		"https://example.com:8443/p?":       "https://example.com:8443/p",
		"http://[::1]:80/x":                 "http://[::1]/x",
		"http://[::1]:8080/x":               "http://[::1]:8080/x",
		"http://example.com/a%2Fb":          "http://example.com/a%2Fb",
		"ftp://example.com/x":               "ftp://example.com/x",
		"http://user:pw@example.com/":       "http://user:pw@example.com/",
		"not a url":                         "not a url",
	} {
		if got := NormalWebhookURL(raw); got != want {
			t.Errorf("NormalWebhookURL(%q) = %q, want %q", raw, got, want)
		}
	}
}

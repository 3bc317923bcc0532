package events

import (
	"net"
	"net/url"
	"strings"
)

// NormalWebhookURL returns raw in the one spelling a webhook URL is stored
// and compared in, so that one receiver cannot be added twice under two
// spellings: scheme and host in lower case (an upper-case scheme is as
// valid as any), no default port (80 for http, 443 for https), "/" for an
// empty path and no "?" before an empty query. The path and query are
// kept as written. A raw that does not parse as an http or https URL is
// returned as it is, for the URL rules to refuse.
func NormalWebhookURL(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	scheme = strings.ToLower(scheme)
	if scheme != "http" && scheme != "https" {
		return raw
	}
	u, err := url.Parse(scheme + "://" + rest)
	if err != nil || u.Opaque != "" || u.User != nil || u.Host == "" || strings.ContainsAny(raw, " \t\r\n") {
		return raw
	}
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
		port = ""
	}
	if port != "" {
		u.Host = net.JoinHostPort(host, port)
	} else if strings.Contains(host, ":") {
		u.Host = "[" + host + "]"
	} else {
		u.Host = host
	}
	if u.Path == "" && u.RawPath == "" {
		u.Path = "/"
	}
	u.ForceQuery = false
	return u.String()
}

// sameWebhookURL reports whether two webhook URLs name the same receiver.
func sameWebhookURL(a, b string) bool { return NormalWebhookURL(a) == NormalWebhookURL(b) }

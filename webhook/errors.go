package webhook

import (
	"errors"
	"net"
	"net/url"
	"os"

	"github.com/devmsg/devmsg/internal/netguard"
)

// Reason words a failed connection or exchange with an app's URL for the
// app itself (verification answers, the deliveries and dead-letter lists):
// what went wrong, never an address its host resolved to, a local address
// or the resolver devmsg asked. Logs keep the whole error for the operator.
func Reason(err error) string {
	if errors.Is(err, netguard.ErrNotAllowed) {
		return netguard.ErrNotAllowed.Error()
	}
	var de *net.DNSError
	if errors.As(err, &de) {
		switch {
		case de.IsNotFound:
			return "could not connect: host not found"
		case de.IsTimeout:
			return "could not connect: host lookup timed out"
		}
		return "could not connect: host lookup failed"
	}
	var te interface{ Timeout() bool }
	if errors.As(err, &te) && te.Timeout() {
		return "no response in time"
	}
	// "dial tcp 203.0.113.7:443: connect: connection refused", "read tcp
	// 10.0.0.5:40312->203.0.113.7:443: connection reset by peer": the
	// addresses go, the reason stays.
	var oe *net.OpError
	if errors.As(err, &oe) {
		what := "connection failed"
		if oe.Op == "dial" {
			what = "could not connect"
		}
		var se *os.SyscallError
		if errors.As(oe.Err, &se) {
			return what + ": " + se.Err.Error()
		}
		return what
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

package webhook

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestReasonHidesAddresses: what an app reads about a failed connection
// says why, never an address a host resolved to nor the resolver's.
func TestReasonHidesAddresses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String() // nothing listens here once closed
	ln.Close()
	client := &http.Client{Timeout: 2 * time.Second}
	_, refused := client.Post("http://"+closed+"/cb", "application/json", strings.NewReader("[]"))
	_, dnsErr := net.DefaultResolver.LookupHost(context.Background(), "no-such-host.invalid")
	dns := &net.OpError{Op: "dial", Net: "tcp", Err: dnsErr.(*net.DNSError)}
	dns.Err.(*net.DNSError).Server = "10.255.255.53:53"
	reset := &net.OpError{Op: "read", Net: "tcp", Source: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 5), Port: 40312},
		Addr: &net.TCPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 443}, Err: refusedSyscall(refused)}
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"refused", refused, "could not connect: connection refused"},
		{"unknown host", dns, "could not connect: host not found"},
		{"reset mid-read", reset, "connection failed: connection refused"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.err == nil {
				t.Fatal("no error to word")
			}
			got := Reason(c.err)
			if got != c.want {
				t.Errorf("Reason(%v) = %q, want %q", c.err, got, c.want)
			}
			for _, leak := range []string{"127.0.0.1", "10.255.255.53", "10.0.0.5", "203.0.113.7"} {
				if strings.Contains(got, leak) {
					t.Errorf("Reason(%v) = %q shows %s", c.err, got, leak)
				}
			}
		})
	}
}

// refusedSyscall digs the system call error out of a refused dial.
func refusedSyscall(err error) error {
	var oe *net.OpError
	for e := err; e != nil; {
		if o, ok := e.(*net.OpError); ok {
			oe = o
			break
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			break
		}
		e = u.Unwrap()
	}
	if oe == nil {
		return err
	}
	return oe.Err
}

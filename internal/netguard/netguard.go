package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// ErrNotAllowed is the error of a connection the guard refused. Callers
// show tenants only "URL not allowed", never the address.
var ErrNotAllowed = errors.New("URL not allowed")

// blocked are the networks no tenant URL may reach. IPv4 addresses inside
// IPv6 ones are checked as IPv4 (see embedded).
var blocked = prefixes(
	// IPv4
	"0.0.0.0/8",      // "this network"; 0.0.0.0 reaches the local host
	"10.0.0.0/8",     // private (RFC 1918)
	"100.64.0.0/10",  // shared address space (RFC 6598): carrier NAT, cloud internals (100.100.100.200)
	"127.0.0.0/8",    // loopback
	"169.254.0.0/16", // link-local: cloud metadata services
	"172.16.0.0/12",  // private (RFC 1918)
	"192.0.0.0/24",   // IETF protocol assignments (192.0.0.192: a metadata service)
	"192.168.0.0/16", // private (RFC 1918)
	"198.18.0.0/15",  // benchmarking networks (RFC 2544)
	"224.0.0.0/4",    // multicast
	"240.0.0.0/4",    // reserved, and 255.255.255.255 broadcast
	// IPv6
	"::/96",          // unspecified, loopback and IPv4-compatible (deprecated) addresses
	"64:ff9b:1::/48", // local-use NAT64 (RFC 8215)
	"fc00::/7",       // unique local (ULA)
	"fe80::/10",      // link-local
	"fec0::/10",      // site-local (deprecated, still routed by some stacks)
	"ff00::/8",       // multicast
)

func prefixes(cidrs ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(cidrs))
	for i, c := range cidrs {
		out[i] = netip.MustParsePrefix(c)
	}
	return out
}

var (
	nat64  = netip.MustParsePrefix("64:ff9b::/96") // well-known NAT64: the IPv4 address in the last 32 bits
	sixTo4 = netip.MustParsePrefix("2002::/16")    // 6to4: the IPv4 address in bits 16..47
)

// embedded returns the IPv4 address an IPv6 address stands for: mapped
// (::ffff:a.b.c.d), NAT64 or 6to4.
func embedded(a netip.Addr) (netip.Addr, bool) {
	if a.Is4In6() {
		return a.Unmap(), true
	}
	b := a.As16()
	switch {
	case nat64.Contains(a):
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case sixTo4.Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	}
	return netip.Addr{}, false
}

// Blocked reports whether a is an address tenant URLs must not reach,
// with no allow-list.
func Blocked(a netip.Addr) bool {
	a = a.WithZone("")
	if !a.IsValid() {
		return true
	}
	if v4, ok := embedded(a); ok && Blocked(v4) {
		return true
	}
	for _, p := range blocked {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Guard decides which addresses outgoing requests may connect to. The
// zero value allows no exemptions.
type Guard struct {
	allowed []netip.Prefix
}

// New returns a guard that lets through the blocked addresses lying in
// allowed (callback.allowed_networks).
func New(allowed []netip.Prefix) *Guard {
	return &Guard{allowed: allowed}
}

// ParseNetworks parses CIDRs such as "127.0.0.0/8" or "fd00::/8". A bare
// address is taken as a network of that address alone.
func ParseNetworks(cidrs []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(cidrs))
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			a, aerr := netip.ParseAddr(c)
			if aerr != nil || a.Zone() != "" {
				return nil, fmt.Errorf("%q is not a CIDR like 10.0.0.0/8 or fd00::/8", c)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// Check returns nil if a connection to a is allowed, else ErrNotAllowed.
func (g *Guard) Check(a netip.Addr) error {
	a = a.WithZone("")
	if !Blocked(a) || g.exempt(a) {
		return nil
	}
	return ErrNotAllowed
}

// exempt reports whether a, or the IPv4 address it stands for, lies in an
// allowed network.
func (g *Guard) exempt(a netip.Addr) bool {
	v4, hasV4 := embedded(a)
	for _, p := range g.allowed {
		if p.Contains(a) || hasV4 && p.Contains(v4) {
			return true
		}
	}
	return false
}

// control is the net.Dialer hook: it runs for every address dialled, after
// name resolution, before the connection is made.
func (g *Guard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: unparsable address", ErrNotAllowed)
	}
	return g.Check(ap.Addr())
}

// DialContext dials like net.Dialer, refusing the addresses g does not
// allow. Event-webhook senders and other HTTP clients use it through
// Transport.
func (g *Guard) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	d := net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: g.control}
	return d.DialContext(ctx, network, address)
}

// Transport returns an HTTP transport like http.DefaultTransport whose
// every connection passes g. It uses no proxy: through a proxy the guard
// would see only the proxy's address.
func (g *Guard) Transport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.DialContext = g.DialContext
	return t
}

// Refused reports whether err, from an HTTP request, is the guard's
// refusal of every address of the URL's host.
func Refused(err error) bool { return errors.Is(err, ErrNotAllowed) }

package netguard

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
)

func TestBlocked(t *testing.T) {
	for _, c := range []struct {
		addr    string
		blocked bool
	}{
		{"127.0.0.1", true},
		{"127.255.255.254", true},
		{"0.0.0.0", true},
		{"0.1.2.3", true},
		{"10.0.0.1", true},
		{"172.16.0.1", true},
		{"172.31.255.255", true},
		{"172.32.0.1", false},
		{"192.168.1.1", true},
		{"169.254.169.254", true}, // cloud metadata
		{"100.64.0.1", true},      // shared address space (carrier NAT)
		{"100.100.100.200", true}, // a cloud metadata address in 100.64/10
		{"100.128.0.1", false},
		{"192.0.0.192", true},
		{"198.18.0.1", true},
		{"224.0.0.1", true},
		{"239.255.255.250", true},
		{"255.255.255.255", true},
		{"240.0.0.1", true},
		{"8.8.8.8", false},
		{"1.1.1.1", false},
		{"93.184.215.14", false},
		{"::", true},
		{"::1", true},
		{"::127.0.0.1", true}, // IPv4-compatible
		{"::ffff:127.0.0.1", true},
		{"::ffff:10.0.0.1", true},
		{"::ffff:169.254.169.254", true},
		{"::ffff:0.0.0.0", true},
		{"::ffff:8.8.8.8", false},
		{"64:ff9b::7f00:1", true}, // NAT64 of 127.0.0.1
		{"64:ff9b::a00:1", true},  // NAT64 of 10.0.0.1
		{"64:ff9b::808:808", false},
		{"64:ff9b:1::1", true},
		{"2002:7f00:1::1", true}, // 6to4 of 127.0.0.1
		{"2002:a9fe:a9fe::1", true},
		{"2002:808:808::1", false},
		{"fc00::1", true},
		{"fd12:3456::1", true},
		{"fe80::1", true},
		{"fe80::1%eth0", true},
		{"febf::1", true},
		{"fec0::1", true},
		{"ff02::1", true},
		{"2001:4860:4860::8888", false},
		{"2606:4700::1111", false},
	} {
		a := netip.MustParseAddr(c.addr)
		if got := Blocked(a); got != c.blocked {
			t.Errorf("Blocked(%s) = %v, want %v", c.addr, got, c.blocked)
		}
		if err := New(nil).Check(a); (err != nil) != c.blocked {
			t.Errorf("Check(%s) = %v", c.addr, err)
		}
	}
}

func TestAllowedNetworks(t *testing.T) {
	nets, err := ParseNetworks([]string{"127.0.0.0/8", "10.1.0.0/16", "fd00::1"})
	if err != nil {
		t.Fatal(err)
	}
	g := New(nets)
	for _, c := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1", true},
		{"::ffff:127.0.0.1", true}, // the mapped form of an allowed address
		{"10.1.2.3", true},
		{"10.2.0.1", false},
		{"fd00::1", true},
		{"fd00::2", false},
		{"::1", false},
		{"169.254.169.254", false},
		{"8.8.8.8", true},
	} {
		if err := g.Check(netip.MustParseAddr(c.addr)); (err == nil) != c.ok {
			t.Errorf("Check(%s) = %v, want allowed %v", c.addr, err, c.ok)
		}
	}
	for _, bad := range []string{"10.0.0.0/33", "localhost", "10.0.0.0/8 ", "fe80::1%eth0", ""} {
		if _, err := ParseNetworks([]string{bad}); err == nil {
			t.Errorf("ParseNetworks(%q) accepted", bad)
		}
	}
}

// FuzzBlocked: every IPv6 form of a blocked IPv4 address is blocked, and
// the guard with no allow-list agrees with Blocked.
func FuzzBlocked(f *testing.F) {
	for _, s := range [][]byte{{127, 0, 0, 1}, {10, 0, 0, 1}, {169, 254, 169, 254}, {8, 8, 8, 8}, {0, 0, 0, 0}, {100, 64, 0, 1}} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) != 4 && len(b) != 16 {
			return
		}
		a, _ := netip.AddrFromSlice(b)
		if (New(nil).Check(a) != nil) != Blocked(a) {
			t.Fatalf("Check and Blocked disagree on %s", a)
		}
		if !a.Is4() || !Blocked(a) {
			return
		}
		v4 := a.As4()
		mapped := netip.AddrFrom16([16]byte{10: 0xff, 11: 0xff, 12: v4[0], 13: v4[1], 14: v4[2], 15: v4[3]})
		nat := netip.AddrFrom16([16]byte{0: 0, 1: 0x64, 2: 0xff, 3: 0x9b, 12: v4[0], 13: v4[1], 14: v4[2], 15: v4[3]})
		six := netip.AddrFrom16([16]byte{0: 0x20, 1: 0x02, 2: v4[0], 3: v4[1], 4: v4[2], 5: v4[3]})
		for _, form := range []netip.Addr{mapped, nat, six} {
			if !Blocked(form) {
				t.Fatalf("%s blocked but its form %s is not", a, form)
			}
		}
	})
}

// TestDialRefused: the check runs on the address dialled, after DNS, and
// for every connection of a request, so neither a hostname that resolves
// to loopback nor a redirect to a blocked address gets through.
func TestDialRefused(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	get := func(g *Guard, url string) error {
		resp, err := (&http.Client{Transport: g.Transport()}).Get(url)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}

	if err := get(New(nil), srv.URL); !errors.Is(err, ErrNotAllowed) {
		t.Errorf("127.0.0.1 with no allow-list: %v, want ErrNotAllowed", err)
	}
	if err := get(New(nil), "http://localhost:"+port); !errors.Is(err, ErrNotAllowed) {
		t.Errorf("localhost with no allow-list: %v, want ErrNotAllowed", err)
	}
	if err := get(New(nil), "http://[::ffff:127.0.0.1]:"+port); !errors.Is(err, ErrNotAllowed) {
		t.Errorf("::ffff:127.0.0.1 with no allow-list: %v, want ErrNotAllowed", err)
	}
	only1 := New(prefixes("127.0.0.1/32"))
	if err := get(only1, srv.URL); err != nil {
		t.Errorf("127.0.0.1 allowed by 127.0.0.1/32: %v", err)
	}

	// A redirect from the allowed address to another loopback address is
	// refused at its connection, whatever follows redirects.
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://127.0.0.2:"+port+"/", http.StatusFound)
	}))
	defer redirect.Close()
	if err := get(only1, redirect.URL); !errors.Is(err, ErrNotAllowed) {
		t.Errorf("redirect to 127.0.0.2: %v, want ErrNotAllowed", err)
	}
}

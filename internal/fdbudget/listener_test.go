package fdbudget

import (
	"io"
	"net"
	"testing"
	"time"
)

// dialN opens n connections to ln and returns them; the server side of
// each admitted one is sent on accepted.
func dialN(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	var cs []net.Conn
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		cs = append(cs, c)
	}
	return cs
}

// refusedConn reports whether the server closed c without a word.
func refusedConn(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	return err == io.EOF
}

func serve(t *testing.T, l *Listener) chan net.Conn {
	accepted := make(chan net.Conn, 100)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	t.Cleanup(func() { _ = l.Close() })
	return accepted
}

func TestListenerAdmission(t *testing.T) {
	for _, tt := range []struct {
		name                string
		limit, reserve      int
		class               Class
		perSource, dials    int
		admitted            int
		wantBudget, wantSrc int64
	}{
		// limit 40, reserve 10: devices get 30, others 35.
		{name: "devices stop at the reserve", limit: 40, reserve: 10, class: Devices, dials: 33, admitted: 30, wantBudget: 3},
		{name: "others use half the reserve", limit: 40, reserve: 10, class: Other, dials: 38, admitted: 35, wantBudget: 3},
		{name: "per-source cap", limit: 1000, reserve: 10, class: Devices, perSource: 5, dials: 8, admitted: 5, wantSrc: 3},
		{name: "reserve at most a quarter", limit: 40, reserve: 1000, class: Devices, dials: 32, admitted: 30, wantBudget: 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			raw, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			b := New(uint64(tt.limit), tt.reserve)
			l := b.Listen(raw, Config{Name: "t", Class: tt.class, PerSource: tt.perSource})
			accepted := serve(t, l)
			cs := dialN(t, raw.Addr().String(), tt.dials)
			var server []net.Conn
			for range tt.admitted {
				select {
				case c := <-accepted:
					server = append(server, c)
				case <-time.After(5 * time.Second):
					t.Fatalf("admitted %d, want %d", len(server), tt.admitted)
				}
			}
			refused := 0
			for _, c := range cs[tt.admitted:] {
				if refusedConn(c) {
					refused++
				}
			}
			if refused != tt.dials-tt.admitted {
				t.Errorf("refused %d, want %d", refused, tt.dials-tt.admitted)
			}
			if bud, src := l.Refused(); bud != tt.wantBudget || src != tt.wantSrc {
				t.Errorf("Refused() = %d, %d; want %d, %d", bud, src, tt.wantBudget, tt.wantSrc)
			}
			if got := b.Open(); got != int64(tt.admitted) {
				t.Errorf("Open() = %d, want %d", got, tt.admitted)
			}
			if tt.class == Devices && tt.wantBudget > 0 && l.Check() == nil {
				t.Error("Check() = nil with the budget spent")
			}
			// Closing releases: one more is admitted.
			_ = server[0].Close()
			_ = server[0].Close() // twice counts once
			if got := b.Open(); got != int64(tt.admitted-1) {
				t.Errorf("Open() after a close = %d, want %d", got, tt.admitted-1)
			}
			if err := l.Check(); err != nil {
				t.Errorf("Check() = %v with room again", err)
			}
			dialN(t, raw.Addr().String(), 1)
			select {
			case <-accepted:
			case <-time.After(5 * time.Second):
				t.Fatal("a connection was refused after one closed")
			}
		})
	}
}

func TestRaiseLimit(t *testing.T) {
	n, err := RaiseLimit()
	if err != nil || n == 0 {
		t.Fatalf("RaiseLimit() = %d, %v", n, err)
	}
}

// Listeners given one Sources share the per-source cap (the three MQTT
// ports of a node).
func TestSharedSourceCap(t *testing.T) {
	b := New(1000, 10)
	shared := NewSources()
	var accepted []chan net.Conn
	var addrs []string
	for range 2 {
		raw, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		accepted = append(accepted, serve(t, b.Listen(raw, Config{Name: "t", PerSource: 3, Sources: shared})))
		addrs = append(addrs, raw.Addr().String())
	}
	dialN(t, addrs[0], 2)
	dialN(t, addrs[1], 1)
	for i, n := range []int{2, 1} {
		for range n {
			select {
			case <-accepted[i]:
			case <-time.After(5 * time.Second):
				t.Fatal("a connection under the shared cap was not admitted")
			}
		}
	}
	if !refusedConn(dialN(t, addrs[1], 1)[0]) {
		t.Error("a fourth connection from one address over two listeners was admitted")
	}
}

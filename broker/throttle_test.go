package broker

import (
	"strconv"
	"testing"
	"time"
)

func TestLoginThrottle(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	th := newLoginThrottle(LoginLimit{Failures: 3, Every: 10 * time.Second}, LoginLimit{Failures: 5, Every: time.Second})
	th.now = func() time.Time { return now }
	const dev = "app/dev"
	fail := func(remote string, n int) {
		for range n {
			th.Failed(remote, dev)
		}
	}
	check := func(step, remote, identity string, want bool) {
		t.Helper()
		if got := th.Allowed(remote, identity); got != want {
			t.Fatalf("%s: Allowed(%s, %s) = %v, want %v", step, remote, identity, got, want)
		}
	}

	fail("10.0.0.1:1000", 2)
	check("2 failures of 3", "10.0.0.1:1001", dev, true)
	fail("10.0.0.1:1002", 1)
	check("source budget spent", "10.0.0.1:1003", dev, false)
	check("another source", "10.0.0.2:1000", dev, true)
	check("another device from the source", "10.0.0.1:1004", "app/other", true)
	now = now.Add(10 * time.Second)
	check("one failure forgiven", "10.0.0.1:1005", dev, true)
	fail("10.0.0.1:1005", 1)
	check("and spent again", "10.0.0.1:1006", dev, false)

	// The identity's budget (5) spent from several sources.
	const id = "app/id"
	for _, src := range []string{"10.0.1.1:1", "10.0.1.2:1"} {
		for range 2 {
			th.Failed(src, id)
		}
	}
	check("4 of the identity's 5", "10.0.1.3:1", id, true)
	th.Failed("10.0.1.3:1", id)
	check("identity budget spent", "10.0.1.4:1", id, false)
	check("another identity", "10.0.1.4:1", "app/other", true)
	now = now.Add(time.Second)
	check("identity: one forgiven after a second", "10.0.1.4:1", id, true)

	// IPv6 addresses of one /64 are one source.
	for range 3 {
		th.Failed("[2001:db8:1:2::1]:1000", "app/v6")
	}
	check("same /64", "[2001:db8:1:2:ffff::9]:1000", "app/v6", false)
	check("another /64", "[2001:db8:1:3::1]:1000", "app/v6", true)

	// Entries go once refilled: a minute later the next failure sweeps.
	now = now.Add(time.Minute)
	th.Failed("10.0.0.9:1", "app/last")
	if n, m := len(th.source.spent), len(th.identity.spent); n != 1 || m != 1 {
		t.Fatalf("after the sweep %d and %d entries, want 1 and 1", n, m)
	}
}

func TestLoginThrottleBounded(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	th := newLoginThrottle(DefaultSourceLoginLimit, DefaultIdentityLoginLimit)
	th.now = func() time.Time { return now }
	for i := range maxThrottled + 10 {
		th.Failed("10.0.0.1:1", "app/dev-"+strconv.Itoa(i))
	}
	if n := len(th.identity.spent); n != maxThrottled {
		t.Fatalf("%d entries, want the cap %d", n, maxThrottled)
	}
}

// A source that logged the device in before is not held back by the
// identity budget that attackers elsewhere spent, but still by its own.
func TestLoginThrottleTrustedSource(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	th := newLoginThrottle(LoginLimit{Failures: 3, Every: 10 * time.Second}, LoginLimit{Failures: 5, Every: time.Second})
	th.now = func() time.Time { return now }
	const dev = "app/dev"
	th.Succeeded("10.0.0.1:1000", dev) // the device's own address
	for i := range 10 {
		th.Failed("10.0.2."+strconv.Itoa(i)+":1", dev) // an attack from elsewhere
	}
	if th.Allowed("10.0.0.9:1", dev) {
		t.Fatal("an untrusted source passed a spent identity budget")
	}
	if !th.Allowed("10.0.0.1:2000", dev) {
		t.Fatal("the device's own source was held back by failures elsewhere")
	}
	for range 3 {
		th.Failed("10.0.0.1:2001", dev)
	}
	if th.Allowed("10.0.0.1:2002", dev) {
		t.Fatal("a trusted source passed its own spent budget")
	}
	now = now.Add(25 * time.Hour) // budgets refilled, trust lapsed
	for i := range 10 {
		th.Failed("10.0.3."+strconv.Itoa(i)+":1", dev)
	}
	if th.Allowed("10.0.0.1:2003", dev) {
		t.Fatal("trust outlived trustFor")
	}
}

package restapi

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"math"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// Failed authentication is throttled per source address and per identity
// (the Basic user: an app key or the admin user name), on the REST and
// admin APIs alike (the console signs in through them too). The numbers:
const (
	// AuthSourceFailures failed authentications from one source within
	// AuthWindow lock that source out for AuthWindow. A source is an IPv4
	// address or an IPv6 /64 (what one host usually holds).
	AuthSourceFailures = 10
	// AuthIdentityFailures failed authentications for one identity, from
	// any sources, within AuthWindow lock that identity out for
	// AuthWindow; looser than the source limit, so a single source cannot
	// lock an app or the admin out.
	AuthIdentityFailures = 50
	// AuthWindow is the counting window and the lock's length: short, so
	// an attacker can keep a target locked only by keeping on.
	AuthWindow = time.Minute
	// authKnownGoodTTL is how long credentials that authenticated stay
	// exempt from the locks.
	authKnownGoodTTL = 24 * time.Hour
	// authMaxEntries bounds each of the three tables (sources,
	// identities, known-good credentials): about 100 bytes an entry, so
	// at most some 20 MB in all. A full table first forgets what has
	// expired, then arbitrary entries.
	authMaxEntries = 65536
)

// authThrottle keeps the counts. Credentials that authenticated within
// authKnownGoodTTL pass the locks: an app's backend that has signed in
// before keeps working while an attacker guesses its secret, also when it
// shares a source (a NAT, a TCP load balancer in front of devmsg) with the
// attacker. Presenting them proves knowledge of the secret, so this
// exemption gives a guesser nothing. Counts are per node.
type authThrottle struct {
	sourceFailures, identityFailures int
	window                           time.Duration
	now                              func() time.Time
	key                              []byte // HMAC key of the known-good table

	mu         sync.Mutex
	sources    map[string]*failCount
	identities map[[16]byte]*failCount
	knownGood  map[[32]byte]time.Time // credential MAC → last success
}

// failCount is the failures of one key in the window that started at
// start, and the end of its lock.
type failCount struct {
	n     int
	start time.Time
	until time.Time
}

func newAuthThrottle(sourceFailures, identityFailures int, window time.Duration, now func() time.Time) *authThrottle {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		panic("crypto/rand: " + err.Error()) // never fails on supported platforms
	}
	return &authThrottle{
		sourceFailures: sourceFailures, identityFailures: identityFailures, window: window, now: now, key: key,
		sources: map[string]*failCount{}, identities: map[[16]byte]*failCount{}, knownGood: map[[32]byte]time.Time{},
	}
}

// sourceOf is the throttled source of r: its peer address, IPv6 cut to
// its /64.
func sourceOf(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	a = a.Unmap().WithZone("")
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

func identityOf(user string) [16]byte {
	sum := sha256.Sum256([]byte(user))
	return [16]byte(sum[:16])
}

func (t *authThrottle) credMAC(user, pass string) [32]byte {
	m := hmac.New(sha256.New, t.key)
	m.Write([]byte(user))
	m.Write([]byte{0})
	m.Write([]byte(pass))
	return [32]byte(m.Sum(nil))
}

// locked returns how long a request from source for user must wait, 0
// when it may be checked; whether it was the source or the identity.
func (t *authThrottle) locked(source, user, pass string) (time.Duration, bool) {
	now := t.now()
	t.mu.Lock()
	var left time.Duration
	bySource := false
	if f, ok := t.sources[source]; ok && now.Before(f.until) {
		left, bySource = f.until.Sub(now), true
	}
	if f, ok := t.identities[identityOf(user)]; ok && now.Before(f.until) && f.until.Sub(now) > left {
		left, bySource = f.until.Sub(now), false
	}
	t.mu.Unlock()
	if left == 0 {
		return 0, false
	}
	mac := t.credMAC(user, pass)
	t.mu.Lock()
	seen, ok := t.knownGood[mac]
	t.mu.Unlock()
	if ok && now.Sub(seen) < authKnownGoodTTL {
		return 0, false
	}
	return left, bySource
}

// failed counts a failed authentication of user from source.
func (t *authThrottle) failed(source, user string) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	count(t.sources, source, t.sourceFailures, t.window, now)
	count(t.identities, identityOf(user), t.identityFailures, t.window, now)
}

// succeeded remembers credentials that authenticated.
func (t *authThrottle) succeeded(user, pass string) {
	now := t.now()
	mac := t.credMAC(user, pass)
	t.mu.Lock()
	defer t.mu.Unlock()
	if seen, ok := t.knownGood[mac]; ok && now.Sub(seen) < time.Minute {
		return
	}
	if _, ok := t.knownGood[mac]; !ok && len(t.knownGood) >= authMaxEntries {
		evict(t.knownGood, func(seen time.Time) bool { return now.Sub(seen) >= authKnownGoodTTL })
	}
	t.knownGood[mac] = now
}

// count records a failure of key; the limit-th within window locks key
// for window.
func count[K comparable](m map[K]*failCount, key K, limit int, window time.Duration, now time.Time) {
	f, ok := m[key]
	if !ok {
		if len(m) >= authMaxEntries {
			evict(m, func(g *failCount) bool { return now.Sub(g.start) >= window && !now.Before(g.until) })
		}
		f = &failCount{start: now}
		m[key] = f
	}
	if now.Sub(f.start) >= window {
		f.n, f.start = 0, now
	}
	f.n++
	if f.n >= limit {
		f.n, f.start, f.until = 0, now, now.Add(window)
	}
}

// evict makes room in a full table: it forgets the stale entries, then
// arbitrary ones until there is room for one more.
func evict[K comparable, V any](m map[K]V, stale func(V) bool) {
	for k, v := range m {
		if stale(v) {
			delete(m, k)
		}
	}
	for k := range m {
		if len(m) < authMaxEntries {
			break
		}
		delete(m, k)
	}
}

// retryAfter is d in whole seconds, at least 1.
func retryAfter(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}

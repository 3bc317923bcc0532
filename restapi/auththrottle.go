package restapi

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"hash"
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
	// authTrustTTL is how long a source that authenticated as an
	// identity stays trusted for it (see authThrottle).
	authTrustTTL = 24 * time.Hour
	// authMaxEntries bounds each of the four tables (sources,
	// identities, source-and-identity pairs, trusted pairs): about 100
	// bytes an entry, so at most some 26 MB in all. A full table first
	// forgets what has expired, then arbitrary entries.
	authMaxEntries = 65536
)

// authThrottle keeps the counts. Three locks, each AuthWindow long:
//   - a source and identity pair, after AuthSourceFailures: nothing
//     passes it, so no address guesses one secret faster than that;
//   - a source, after AuthSourceFailures for any identities (spraying
//     many app keys), and an identity, after AuthIdentityFailures from
//     any sources: a source that authenticated as that identity within
//     authTrustTTL passes these two, so an app's backend keeps working
//     while an attacker elsewhere guesses its secret, or while another
//     client sharing its address (a NAT) fails.
//
// Trust follows the address and the identity, never the credentials
// presented: a locked request is answered 429 whether its password is
// right or wrong, so the lock tells a guesser nothing. Counts are per
// node.
type authThrottle struct {
	sourceFailures, identityFailures int
	window                           time.Duration
	now                              func() time.Time
	key                              []byte    // hash key of the pair tables
	macs                             sync.Pool // of hmac.New(sha256.New, key): one a request costs two digests and pads

	mu         sync.Mutex
	sources    map[string]*failCount
	identities map[[16]byte]*failCount
	pairs      map[[32]byte]*failCount
	trusted    map[[32]byte]time.Time // pair → last success
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
	t := &authThrottle{
		sourceFailures: sourceFailures, identityFailures: identityFailures, window: window, now: now, key: key,
		sources: map[string]*failCount{}, identities: map[[16]byte]*failCount{},
		pairs: map[[32]byte]*failCount{}, trusted: map[[32]byte]time.Time{},
	}
	t.macs.New = func() any { return hmac.New(sha256.New, key) }
	return t
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

// pairOf keys a source and identity; keyed, so that nobody can make two
// pairs collide.
func (t *authThrottle) pairOf(source, user string) [32]byte {
	m := t.macs.Get().(hash.Hash)
	m.Reset()
	m.Write([]byte(source))
	m.Write([]byte{0})
	m.Write([]byte(user))
	var pair [32]byte
	m.Sum(pair[:0])
	t.macs.Put(m)
	return pair
}

// lockedFor is how long f still locks at now, 0 when it does not.
func lockedFor(f *failCount, ok bool, now time.Time) time.Duration {
	if !ok || !now.Before(f.until) {
		return 0
	}
	return f.until.Sub(now)
}

// authKey is what the throttle counts one request by, worked out once.
type authKey struct {
	source   string
	identity [16]byte
	pair     [32]byte
}

// keyOf returns the throttle's key of a request from source for user.
func (t *authThrottle) keyOf(source, user string) authKey {
	return authKey{source: source, identity: identityOf(user), pair: t.pairOf(source, user)}
}

// locked returns how long a request with key k must wait, 0 when it may
// be checked; whether a lock of the source (rather than of the identity)
// holds it.
func (t *authThrottle) locked(k authKey) (time.Duration, bool) {
	now := t.now()
	pair, source := k.pair, k.source
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok := t.pairs[pair]
	if left := lockedFor(f, ok, now); left > 0 {
		return left, true
	}
	if seen, ok := t.trusted[pair]; ok && now.Sub(seen) < authTrustTTL {
		return 0, false
	}
	f, ok = t.sources[source]
	bySrc := lockedFor(f, ok, now)
	f, ok = t.identities[k.identity]
	byID := lockedFor(f, ok, now)
	if bySrc >= byID {
		return bySrc, bySrc > 0
	}
	return byID, false
}

// failed counts a failed authentication with key k.
func (t *authThrottle) failed(k authKey) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	count(t.pairs, k.pair, t.sourceFailures, t.window, now)
	count(t.sources, k.source, t.sourceFailures, t.window, now)
	count(t.identities, k.identity, t.identityFailures, t.window, now)
}

// succeeded trusts the source of k for its identity (see authThrottle).
func (t *authThrottle) succeeded(k authKey) {
	now := t.now()
	pair := k.pair
	t.mu.Lock()
	defer t.mu.Unlock()
	if seen, ok := t.trusted[pair]; ok && now.Sub(seen) < time.Minute {
		return
	}
	if _, ok := t.trusted[pair]; !ok && len(t.trusted) >= authMaxEntries {
		evict(t.trusted, func(seen time.Time) bool { return now.Sub(seen) >= authTrustTTL })
	}
	t.trusted[pair] = now
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

package broker

import (
	"hash/maphash"
	"net"
	"sync"
	"time"
)

// Failed logins are throttled so that credentials cannot be guessed at
// full speed, while an attacker cannot keep a device out for long. Each
// limit is a budget of failures that refills at a steady pace; while a
// budget is spent, a login it covers is refused ("not authorized", as for
// wrong credentials) without looking at the credentials, and the refusal
// spends nothing more. The numbers are in docs/device-protocol.md.
//
// There is deliberately no budget for a source address alone: behind a
// load balancer or a NAT every device shares one, and one bad client
// would lock the whole fleet out.
//
// A source that logged a device in within trustFor is trusted for that
// device: the identity budget, which an attacker anywhere can spend, does
// not hold it back, so an attack from elsewhere cannot keep a working
// device off. Only the (source, identity) budget applies to it, which
// nobody but a client at that source can spend. The trust depends on the
// source alone, never on the credentials presented, so a guesser learns
// nothing from it.

// Default login limits (Config.SourceLoginLimit, Config.IdentityLoginLimit).
var (
	// DefaultSourceLoginLimit covers one device identity (the username)
	// from one source address (IPv4 address, IPv6 /64).
	DefaultSourceLoginLimit = LoginLimit{Failures: 10, Every: 6 * time.Second}
	// DefaultIdentityLoginLimit covers one device identity from
	// everywhere. It is looser and refills faster, so that an attack
	// spread over many addresses slows guessing without holding the
	// device off for much longer than the attack lasts.
	DefaultIdentityLoginLimit = LoginLimit{Failures: 30, Every: time.Second}
)

// LoginLimit allows Failures failed logins at once and one more each Every.
type LoginLimit struct {
	Failures int
	Every    time.Duration
}

// trustFor is how long a successful login trusts its source for that
// device (see above).
const trustFor = 24 * time.Hour

// maxThrottled bounds the entries each budget table keeps; an entry goes
// once its budget has refilled. When a table is full of live entries, new
// keys go untracked rather than push out the ones being throttled.
const maxThrottled = 1 << 17

// loginThrottle keeps the failure budgets of recent failed logins.
type loginThrottle struct {
	now  func() time.Time
	seed maphash.Seed

	mu       sync.Mutex
	source   budgets // by source and identity
	identity budgets
	trusted  map[uint64]time.Time // source-and-identity key → last login
}

func newLoginThrottle(source, identity LoginLimit) *loginThrottle {
	return &loginThrottle{
		now:      time.Now,
		seed:     maphash.MakeSeed(),
		source:   budgets{limit: source, spent: map[uint64]budget{}},
		identity: budgets{limit: identity, spent: map[uint64]budget{}},
		trusted:  map[uint64]time.Time{},
	}
}

// keys hashes the two budgets' keys for a login of identity from the
// remote address ("host:port"). Hashes keep an entry small whatever a
// client sends as its username; the random seed keeps anyone from making
// two identities collide.
func (t *loginThrottle) keys(remote, identity string) (source, ident uint64) {
	ident = maphash.String(t.seed, identity)
	return maphash.String(t.seed, sourceOf(remote)+" "+identity), ident
}

// Allowed reports whether a login of identity from remote may be checked.
func (t *loginThrottle) Allowed(remote, identity string) bool {
	s, i := t.keys(remote, identity)
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.source.left(s, now) < 1 {
		return false
	}
	if last, ok := t.trusted[s]; ok && now.Sub(last) < trustFor {
		return true
	}
	return t.identity.left(i, now) >= 1
}

// Succeeded records a successful login of identity from remote, which
// trusts that source for it (see trustFor).
func (t *loginThrottle) Succeeded(remote, identity string) {
	s, _ := t.keys(remote, identity)
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.trusted[s]; !ok && len(t.trusted) >= maxThrottled {
		for k, last := range t.trusted {
			if now.Sub(last) >= trustFor {
				delete(t.trusted, k)
			}
		}
		if len(t.trusted) >= maxThrottled {
			return // full of live trust: the new source is throttled as any
		}
	}
	t.trusted[s] = now
}

// Failed records a failed login of identity from remote.
func (t *loginThrottle) Failed(remote, identity string) {
	s, i := t.keys(remote, identity)
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.source.spend(s, now)
	t.identity.spend(i, now)
}

// sourceOf is the address a source budget covers: the IP of an IPv4
// client, the /64 of an IPv6 one (a single host often holds all of it).
func sourceOf(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return host
	}
	if ip4 := ip.To4(); ip4 != nil {
		return ip4.String()
	}
	return ip.Mask(net.CIDRMask(64, 128)).String()
}

// budgets is one table of failure budgets.
type budgets struct {
	limit LoginLimit
	spent map[uint64]budget
	swept time.Time
}

// budget is what is left of a key's budget at a time.
type budget struct {
	left float64
	at   time.Time
}

// left returns what is left of key's budget at now.
func (b *budgets) left(key uint64, now time.Time) float64 {
	e, ok := b.spent[key]
	if !ok {
		return float64(b.limit.Failures)
	}
	return b.refill(e, now)
}

func (b *budgets) refill(e budget, now time.Time) float64 {
	left := e.left + float64(now.Sub(e.at))/float64(b.limit.Every)
	return min(left, float64(b.limit.Failures))
}

// spend takes one failure from key's budget.
func (b *budgets) spend(key uint64, now time.Time) {
	e, ok := b.spent[key]
	if !ok {
		if len(b.spent) >= maxThrottled || now.Sub(b.swept) >= time.Minute {
			b.sweep(now)
		}
		if len(b.spent) >= maxThrottled {
			return
		}
		e = budget{left: float64(b.limit.Failures), at: now}
	}
	b.spent[key] = budget{left: max(b.refill(e, now)-1, 0), at: now}
}

// sweep drops the entries whose budget has refilled, at most once a
// second so that a full table of live entries costs no more.
func (b *budgets) sweep(now time.Time) {
	if now.Sub(b.swept) < time.Second {
		return
	}
	b.swept = now
	for k, e := range b.spent {
		if b.refill(e, now) >= float64(b.limit.Failures) {
			delete(b.spent, k)
		}
	}
}

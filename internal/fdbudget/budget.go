package fdbudget

import (
	"fmt"
	"sync/atomic"
)

// DefaultReserve is the descriptors kept for the store, Redis, callbacks,
// webhooks and the service's own files when the configuration sets none.
const DefaultReserve = 1024

// Budget counts the connections of its Listeners against the process's
// descriptor limit.
type Budget struct {
	limit, reserve int64
	open           atomic.Int64
}

// New returns the budget of a process whose descriptor limit is limit
// (0: unlimited), keeping reserve of them for everything but client
// connections. At most a quarter of the limit is reserved, so that a low
// limit still admits clients.
func New(limit uint64, reserve int) *Budget {
	l := int64(min(limit, 1<<40))
	r := min(int64(max(reserve, 0)), l/4)
	return &Budget{limit: l, reserve: r}
}

// Limit returns the descriptor limit (0: none).
func (b *Budget) Limit() int64 { return b.limit }

// Reserve returns how many descriptors are kept from client connections.
func (b *Budget) Reserve() int64 { return b.reserve }

// Open returns how many connections of the budget's Listeners are open.
func (b *Budget) Open() int64 { return b.open.Load() }

// Room reports whether one more device connection or long-poll leaves the
// reserve untouched.
func (b *Budget) Room() bool {
	return b.limit == 0 || b.open.Load()+1 <= b.limit-b.reserve
}

// roomFor reports whether class may open one more connection: devices up
// to the reserve, others into half of it.
func (b *Budget) roomFor(c Class) bool {
	if b.limit == 0 {
		return true
	}
	keep := b.reserve
	if c == Other {
		keep /= 2
	}
	return b.open.Load()+1 <= b.limit-keep
}

// Check returns an error that says why no device could connect now, nil
// while one can.
func (b *Budget) Check() error {
	if b.Room() {
		return nil
	}
	return fmt.Errorf("out of file descriptors for new connections: %d client connections open, limit %d, %d kept in reserve", b.open.Load(), b.limit, b.reserve)
}

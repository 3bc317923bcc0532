package idgen

import (
	"fmt"
	"sync"
	"time"
)

const (
	timeBits = 41
	nodeBits = 7
	seqBits  = 5
	// MaxNode is the highest node id.
	MaxNode = 1<<nodeBits - 1
	maxSeq  = 1<<seqBits - 1
	// MaxID is the highest id there can be, 2^53 − 1: the largest integer
	// a float64 (JavaScript's number, jq's) holds exactly.
	MaxID = 1<<(timeBits+nodeBits+seqBits) - 1
)

// epoch is 2025-01-01T00:00:00Z in Unix milliseconds.
const epoch = 1735689600000

// Generator hands out ids for one node. It is safe for concurrent use.
type Generator struct {
	mu     sync.Mutex
	node   int64
	lastMs int64
	seq    int64
	now    func() time.Time
}

// New returns a generator for node (0..MaxNode).
func New(node int) (*Generator, error) {
	if node < 0 || node > MaxNode {
		return nil, fmt.Errorf("node id %d out of range 0..%d", node, MaxNode)
	}
	return &Generator{node: int64(node), now: time.Now}, nil
}

// Next returns a new id, greater than every id this generator returned
// before. If the wall clock steps back, ids keep counting from the last
// millisecond used rather than repeating.
func (g *Generator) Next() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	ms := g.now().UnixMilli() - epoch
	if ms < g.lastMs {
		ms = g.lastMs
	}
	if ms == g.lastMs {
		g.seq++
		if g.seq > maxSeq {
			// 32 ids in one millisecond: borrow the next millisecond.
			ms++
			g.seq = 0
		}
	} else {
		g.seq = 0
	}
	g.lastMs = ms
	return ms<<(nodeBits+seqBits) | g.node<<seqBits | g.seq
}

// Time returns the creation time encoded in an id.
func Time(id int64) time.Time {
	return time.UnixMilli(id>>(nodeBits+seqBits) + epoch)
}

// Skip makes every later id greater than id, for instance the highest id
// issued before a restart, whatever the wall clock says. An id above
// MaxID is ignored: it comes from the 63-bit layout of earlier versions
// (41 bits of milliseconds, 10 of node, 12 of sequence), no id of this
// layout can equal it, and following it would push every new id past
// 2^53.
func (g *Generator) Skip(id int64) {
	if id > MaxID || id < 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	ms := id >> (nodeBits + seqBits)
	if ms > g.lastMs || ms == g.lastMs && id&maxSeq > g.seq {
		g.lastMs, g.seq = ms, id&maxSeq
	}
}

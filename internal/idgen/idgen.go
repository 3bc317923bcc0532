// Package idgen generates unique, time-ordered int64 ids (msgid, op_id)
// in the snowflake layout: 41 bits of milliseconds since 2025-01-01 UTC,
// 10 bits of node id and 12 bits of sequence within the millisecond.
package idgen

import (
	"fmt"
	"sync"
	"time"
)

const (
	nodeBits = 10
	seqBits  = 12
	maxNode  = 1<<nodeBits - 1
	maxSeq   = 1<<seqBits - 1
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

// New returns a generator for node (0..1023).
func New(node int) (*Generator, error) {
	if node < 0 || node > maxNode {
		return nil, fmt.Errorf("node id %d out of range 0..%d", node, maxNode)
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
			// 4096 ids in one millisecond: borrow the next millisecond.
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
// issued before a restart, whatever the wall clock says.
func (g *Generator) Skip(id int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ms := id >> (nodeBits + seqBits)
	if ms > g.lastMs || ms == g.lastMs && id&maxSeq > g.seq {
		g.lastMs, g.seq = ms, id&maxSeq
	}
}

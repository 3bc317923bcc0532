package pebble

import (
	"sync"

	"github.com/devmsg/devmsg/store"
)

// cmdCacheMax is the most open commands cmdCache holds; beyond it a
// command is decoded on each read.
const cmdCacheMax = 1 << 16

// cmdCacheEntryMax is the largest command, as stored, cmdCache holds:
// params and results reach 256 KiB, and a cache of such commands would
// hold gigabytes; a larger one is decoded on each read.
const cmdCacheEntryMax = 2 << 10

// cmdCacheEnded is the most ended commands cmdCache holds, the last to
// end: a command is read once more after its end by the writes that
// find it ended (a sent state recorded after the answer, an answer
// repeated) and by the calls that wait for it, and those reads decoded
// it (a tenth of the server's CPU in command-batch).
const cmdCacheEnded = 1 << 13

// cmdCache holds the open commands, and the last to end, as last
// written, so that a read of one skips the store and the JSON decode: a
// command is read by each of its writes (sent, delivered, answered) and
// by each call waiting for it. Every write of a command (createCommands,
// UpdateCommand, UpdateCommands) puts it here after its commit, under
// the stripe of its device, or forgets it when the commit fails, so an
// entry is never older than the last write a reader could have seen
// returned. A command not here is read from the store and not added: a
// read that raced a write could otherwise cache what the write replaced.
type cmdCache struct {
	mu sync.Mutex
	m  map[int64]store.Command
	// ended holds the ids of the ended commands in m, a ring whose
	// oldest is at next once full.
	ended []int64
	next  int
}

// get returns command id, if the cache holds it.
func (cc *cmdCache) get(id int64) (store.Command, bool) {
	cc.mu.Lock()
	c, ok := cc.m[id]
	cc.mu.Unlock()
	return c, ok
}

// forget drops command id, whose write failed: its next read goes to
// the store.
func (cc *cmdCache) forget(id int64) {
	cc.mu.Lock()
	delete(cc.m, id) // an ended one's place in the ring stays, empty
	cc.mu.Unlock()
}

// device returns the device of command id, if the cache holds it.
func (cc *cmdCache) device(id int64) (string, bool) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	c, ok := cc.m[id]
	return c.DeviceName, ok
}

// put records c, written as size bytes: kept while open, and once ended
// among the last cmdCacheEnded to end.
func (cc *cmdCache) put(c store.Command, size int) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.m == nil {
		cc.m = map[int64]store.Command{}
	}
	c.Emit, c.Lazy = nil, false
	if size > cmdCacheEntryMax {
		delete(cc.m, c.ID) // an ended one's place in the ring stays, empty
		return
	}
	if !c.Open() {
		if e, ok := cc.m[c.ID]; ok && !e.Open() {
			cc.m[c.ID] = c // ended already: its place in the ring stays
			return
		}
		if len(cc.ended) < cmdCacheEnded {
			cc.ended = append(cc.ended, c.ID)
		} else {
			delete(cc.m, cc.ended[cc.next])
			cc.ended[cc.next] = c.ID
			cc.next = (cc.next + 1) % cmdCacheEnded
		}
		cc.m[c.ID] = c
		return
	}
	if _, ok := cc.m[c.ID]; !ok && len(cc.m)-len(cc.ended) >= cmdCacheMax {
		return
	}
	cc.m[c.ID] = c
}

package pebble

import (
	"bytes"
	"encoding/json"
	"fmt"
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
// written, encoded and decoded, so a read that finds the same bytes
// stored skips the JSON decode: a command is read by each of its writes (sent, delivered,
// answered) and by each call waiting for it. An entry is used only
// when its bytes equal what the read found, so a stale one costs a
// decode, never a wrong answer.
type cmdCache struct {
	mu sync.Mutex
	m  map[int64]cmdEntry
	// ended holds the ids of the ended commands in m, a ring whose
	// oldest is at next once full.
	ended []int64
	next  int
}

type cmdEntry struct {
	raw []byte
	c   store.Command
}

// decode returns the command stored as raw under id.
func (cc *cmdCache) decode(id int64, raw []byte) (store.Command, error) {
	cc.mu.Lock()
	e, ok := cc.m[id]
	cc.mu.Unlock()
	if ok && bytes.Equal(e.raw, raw) {
		return e.c, nil
	}
	var c store.Command
	if err := json.Unmarshal(raw, &c); err != nil {
		return store.Command{}, fmt.Errorf("decode command %d: %w", id, err)
	}
	return c, nil
}

// device returns the device of command id, if the cache holds it.
func (cc *cmdCache) device(id int64) (string, bool) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	e, ok := cc.m[id]
	return e.c.DeviceName, ok
}

// put records c, written as raw: kept while open, and once ended among
// the last cmdCacheEnded to end.
func (cc *cmdCache) put(c store.Command, raw []byte) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.m == nil {
		cc.m = map[int64]cmdEntry{}
	}
	c.Emit, c.Lazy = nil, false
	if len(raw) > cmdCacheEntryMax {
		delete(cc.m, c.ID) // an ended one's place in the ring stays, empty
		return
	}
	if !c.Open() {
		if e, ok := cc.m[c.ID]; ok && !e.c.Open() {
			cc.m[c.ID] = cmdEntry{raw, c} // ended already: its place in the ring stays
			return
		}
		if len(cc.ended) < cmdCacheEnded {
			cc.ended = append(cc.ended, c.ID)
		} else {
			delete(cc.m, cc.ended[cc.next])
			cc.ended[cc.next] = c.ID
			cc.next = (cc.next + 1) % cmdCacheEnded
		}
		cc.m[c.ID] = cmdEntry{raw, c}
		return
	}
	if _, ok := cc.m[c.ID]; !ok && len(cc.m)-len(cc.ended) >= cmdCacheMax {
		return
	}
	cc.m[c.ID] = cmdEntry{raw, c}
}

package pebble

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/devmsg/devmsg/store"
)

// cmdCacheMax is the most commands cmdCache holds; beyond it a command
// is decoded on each read.
const cmdCacheMax = 1 << 16

// cmdCache holds the open commands as last written, encoded and
// decoded, so a read that finds the same bytes stored skips the JSON
// decode: a command is read by each of its writes (sent, delivered,
// answered) and by each call waiting for it. An entry is used only
// when its bytes equal what the read found, so a stale one costs a
// decode, never a wrong answer.
type cmdCache struct {
	mu sync.Mutex
	m  map[int64]cmdEntry
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

// put records c, written as raw: kept while open, dropped once ended.
func (cc *cmdCache) put(c store.Command, raw []byte) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if !c.Open() {
		delete(cc.m, c.ID)
		return
	}
	if cc.m == nil {
		cc.m = map[int64]cmdEntry{}
	}
	if _, ok := cc.m[c.ID]; !ok && len(cc.m) >= cmdCacheMax {
		return
	}
	c.Emit, c.Lazy = nil, false
	cc.m[c.ID] = cmdEntry{raw, c}
}

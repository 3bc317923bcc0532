package pebble

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/devmsg/devmsg/store"
)

// TestUpdatesBatchGroupsKeys checks that an UpdateMessages batch holds
// each kind of key in one run, in key order within it (what the
// memtable's inserts rely on to start near each other), with every
// removal and set in it.
func TestUpdatesBatchGroupsKeys(t *testing.T) {
	var leaving []store.Message
	var kvs []kv
	for i := range int64(5) {
		dev := fmt.Sprintf("dev%d", 4-i)
		leaving = append(leaving, store.Message{AppKey: "app", DeviceName: dev, ID: 100 + i, ExpireTime: 1000 - i})
		kvs = append(kvs, kv{msgKey(100 + i), []byte("m")}, kv{outboxKey(7 + i), []byte("o")})
	}
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b := db.NewBatch()
	defer b.Close()
	if err := fillUpdates(b, leaving, kvs); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	var runs []string
	var last []byte
	r := b.Reader()
	for {
		kind, k, _, ok, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		p := string(k[:2])
		if len(runs) == 0 || runs[len(runs)-1] != p {
			runs = append(runs, p)
		} else if bytes.Compare(last, k) >= 0 {
			t.Fatalf("key %q after %q", k, last)
		}
		last = append(last[:0], k...)
		if (kind == pebble.InternalKeyKindSingleDelete) != (p == pQueue || p == pExpiry) {
			t.Fatalf("key %q written as %v", k, kind)
		}
		seen[p]++
	}
	if len(runs) != 4 {
		t.Fatalf("batch keys in runs %v, want each prefix once", runs)
	}
	for _, p := range []string{pQueue, pExpiry, pMsg, pOutbox} {
		if seen[p] != 5 {
			t.Fatalf("%d keys under %s, want 5", seen[p], p)
		}
	}
}

package pebble

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/devmsg/devmsg/store"
)

// TestChunkKeysInOrder: a broadcast chunk's entries (messages to devices
// in name order, msgids rising, as the fan-out makes them) reach the
// batch in key order, so each memtable insert lands next to the one
// before; a key written twice keeps its order (the later write wins).
func TestChunkKeysInOrder(t *testing.T) {
	var kvs []kv
	for i := range 3 {
		m := store.Message{
			ID: 1000 + int64(i), AppKey: "app", DeviceName: fmt.Sprintf("d-%02d", i), Body: "fw",
			TTL: 60, TimeCreate: 100, ExpireTime: 160, State: store.StatePending, Broadcast: 7,
			Records: []store.Record{{Type: store.RecordTargetValid, SentTime: 100}, {Type: store.RecordSubmitSuccess, SentTime: 100}},
		}
		enc, err := encodeForm("app", m, 1, 100_000, recordFilter{known: true})
		if err != nil {
			t.Fatal(err)
		}
		kvs = append(kvs, enc...)
		kvs = append(kvs, kv{key(pCount, "app", m.DeviceName), be64(1)})
	}
	got := inKeyOrder(kvs)
	for i := 1; i < len(got); i++ {
		if bytes.Compare(got[i-1].k, got[i].k) >= 0 {
			t.Fatalf("entry %d %q is not after entry %d %q", i, got[i].k, i-1, got[i-1].k)
		}
	}

	twice := inKeyOrder([]kv{{[]byte("q/a"), []byte("1")}, {[]byte("m/a"), nil}, {[]byte("q/a"), []byte("2")}})
	if string(twice[1].v) != "1" || string(twice[2].v) != "2" {
		t.Fatalf("a key written twice: %q, want the writes in their order", twice)
	}
}

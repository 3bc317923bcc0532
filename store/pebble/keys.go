package pebble

import (
	"bytes"
	"encoding/binary"
)

// Key layout. App keys and device names never hold \x00, so it separates
// the parts of a key without ambiguity; every fixed-width number is
// big-endian so that byte order is numeric order.
const (
	pApp    = "a/" // a/<app> → App
	pDevice = "d/" // d/<app>\0<name> → Device
	pShadow = "s/" // s/<app>\0<name> → Shadow
	pMsg    = "m/" // m/<msgid> → Message
	// q/<app>\0<device>\0<msgid> → empty. A device's pending queue in
	// msgid order, which is send order because the service issues msgids
	// that increase with time (docs/api.md, "Ids"). Keying by msgid lets a
	// later delivery or retraction remove an entry without a lookup.
	pQueue = "q/"
	// c/<app>\0<device> → int64: the device's pending count, as builds
	// before 2026-11-25 stored it. Nothing reads it now (queuecount.go);
	// DeleteDevice deletes it.
	pCount = "c/"
	pSeq   = "n/" // n/<app>\0<seq> → SeqEntry
	// x/<expires ms><app>\0<seq> → empty. Expiry index for the sweeper.
	// An entry replaced after expiry leaves its old index key behind; the
	// sweeper drops that key and keeps the entry, which is still live.
	pSeqExp = "x/"
	pMeta   = "z/" // z/<key> → raw bytes
	// e/<expire s><msgid> → empty. Expiry index of pending messages.
	pExpiry = "e/"
	// b/<seq> → OutboxEntry. Status records waiting for callback delivery.
	pOutbox = "b/"
	// p/<app>\0<name> → empty. Index of online devices, so a restart
	// finds them without reading every device.
	pOnline = "p/"
	// k/<app>\0<url>\0<seq> → OutboxEntry: a callback delivery queue.
	pCallback = "k/"
	// l/<app>\0<id> → DeadLetter, id a fixed-width number.
	pDead = "l/"
	// r/<app>\0<msgid> → empty. An app's messages in id order, for
	// ListMessages; written with the message.
	pAppMsg = "r/"
	// v/<app>\0<id> → an event of the app's log (see events.go).
	pEvent = "v/"
	// w/<app> → int64, the highest id trimmed from the app's log.
	pEventTrim = "w/"
)

func key(prefix string, parts ...string) []byte {
	n := len(prefix)
	for _, p := range parts {
		n += len(p) + 1
	}
	b := make([]byte, 0, n+8)
	b = append(b, prefix...)
	for i, p := range parts {
		if i > 0 {
			b = append(b, 0)
		}
		b = append(b, p...)
	}
	return b
}

// be64 encodes v in 8 bytes. Negative numbers encode as their two's
// complement: distinct numbers get distinct keys, which is all seq_no
// keys need.
func be64(v int64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(v))
	return b[:]
}

func msgKey(id int64) []byte { return appendMsgKey(nil, id) }

// appendMsgKey appends msgKey(id) to b. The append forms let a batch
// encode a message's keys into one buffer (encodeForm); each key has
// this one definition, which matters for a SingleDelete (unqueue) to
// meet the very key that was Set.
func appendMsgKey(b []byte, id int64) []byte {
	return binary.BigEndian.AppendUint64(append(b, pMsg...), uint64(id))
}

// expiryKey is the expiry index key of a pending message. Times before
// 1970 are filed under 0, as for seqExpKey.
func expiryKey(expire, id int64) []byte { return appendExpiryKey(nil, expire, id) }

func appendExpiryKey(b []byte, expire, id int64) []byte {
	b = binary.BigEndian.AppendUint64(append(b, pExpiry...), uint64(max(expire, 0)))
	return binary.BigEndian.AppendUint64(b, uint64(id))
}

func outboxKey(seq int64) []byte { return binary.BigEndian.AppendUint64([]byte(pOutbox), uint64(seq)) }

func seqKey(app string, seq int64) []byte {
	return binary.BigEndian.AppendUint64(key(pSeq, app, ""), uint64(seq))
}

func appMsgKey(app string, id int64) []byte { return appendAppMsgKey(nil, app, id) }

func appendAppMsgKey(b []byte, app string, id int64) []byte {
	b = append(append(append(b, pAppMsg...), app...), 0)
	return binary.BigEndian.AppendUint64(b, uint64(id))
}

func queueKey(app, device string, id int64) []byte { return appendQueueKey(nil, app, device, id) }

func appendQueueKey(b []byte, app, device string, id int64) []byte {
	b = append(append(append(append(b, pQueue...), app...), 0), device...)
	return binary.BigEndian.AppendUint64(append(b, 0), uint64(id))
}

// seqExpKey is the expiry index key of an entry. Expiry times before 1970
// are filed under 0, so they sort first rather than after every real time.
func seqExpKey(expires int64, app string, seq int64) []byte {
	k := binary.BigEndian.AppendUint64([]byte(pSeqExp), uint64(max(expires, 0)))
	k = append(k, app...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint64(k, uint64(seq))
}

// parseSeqExpKey splits an expiry index key; ok is false for a malformed key.
func parseSeqExpKey(k []byte) (app string, seq int64, ok bool) {
	rest := k[len(pSeqExp)+8:]
	i := bytes.IndexByte(rest, 0)
	if i < 0 || len(rest) != i+9 {
		return "", 0, false
	}
	return string(rest[:i]), int64(binary.BigEndian.Uint64(rest[i+1:])), true
}

package restapi

import (
	"testing"
	"time"
)

// BenchmarkSendParsing is the CPU a send spends in restapi before the
// store: the body, its fields, the seq_no fingerprint and the throttle's
// key (the store write, TLS and net/http are not in it).
func BenchmarkSendParsing(b *testing.B) {
	body := []byte(`{"seq_no":1234567,"device_name":"bench-dev-0042","msg_body":"hello from the bench, message 1234567","ttl":600}`)
	th := newAuthThrottle(AuthSourceFailures, AuthIdentityFailures, AuthWindow, time.Now)
	b.ReportAllocs()
	for b.Loop() {
		obj, err := parseObject(body, "request body")
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := obj.seqTarget(); err != nil {
			b.Fatal(err)
		}
		if _, err := parseSend(obj); err != nil {
			b.Fatal(err)
		}
		_ = fingerprint("POST /msg/v1/msg", obj)
		_ = th.keyOf("127.0.0.1", "app-key-0123456789abcdef")
	}
}

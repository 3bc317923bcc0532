package broker

import (
	"bufio"
	"bytes"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// ackHandler reports each PUBACK on acked.
type ackHandler struct {
	fakeHandler
	acked chan uint16
}

func (h *ackHandler) Acked(_ *Session, pid uint16) { h.acked <- pid }

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPublishRoundTrip measures the process's CPU per delivery on
// the MQTT wire: Session.Publish of a 200-byte message, the device (a
// raw client here) reading it and sending its PUBACK, the broker reading
// that and reporting Acked. It reports cpu-ns/op: the CPU of both sides,
// the device's small and the same whatever the broker's build.
func BenchmarkPublishRoundTrip(b *testing.B) {
	h := &ackHandler{acked: make(chan uint16, 1)}
	br, addr := startBroker(b, Config{}, h)
	rc, _ := rawConnect(b, addr, 4, "app/dev", "secret")
	_ = rc.c.SetDeadline(time.Time{})
	var s *Session
	for s == nil {
		s = br.Session("app", "dev")
		time.Sleep(time.Millisecond)
	}
	r := bufio.NewReader(rc.c)
	payload := bytes.Repeat([]byte("x"), 200)
	body := make([]byte, 1024)
	ack := []byte{packets.Puback << 4, 2, 0, 0}
	b.ReportAllocs()
	start := cpuTime()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pid, err := s.Publish("msg", payload, 1)
		if err != nil {
			b.Fatal(err)
		}
		// The device reads the PUBLISH and acknowledges it.
		if _, err := r.ReadByte(); err != nil {
			b.Fatal(err)
		}
		n, _, err := packets.DecodeLength(r)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(r, body[:n]); err != nil {
			b.Fatal(err)
		}
		ack[2], ack[3] = byte(pid>>8), byte(pid)
		if _, err := rc.c.Write(ack); err != nil {
			b.Fatal(err)
		}
		<-h.acked
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

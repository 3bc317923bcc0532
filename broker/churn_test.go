package broker

import (
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// TestChurnLeavesNothingBehind: thousands of connect/subscribe/disconnect
// cycles, clean (DISCONNECT, through paho) and abrupt (the socket closed
// without one), leave no session, no mochi client, no subscription and no
// goroutine behind, and the live heap back near where it started, as
// docs/operations.md ("Sizing a node for many connected devices") promises
// (an upstream mochi report of memory that never comes back:
// https://github.com/mochi-mqtt/server/issues/429). The CI-sized version
// of `make churn` (200,000 cycles).
func TestChurnLeavesNothingBehind(t *testing.T) {
	b, addr := startBroker(t, Config{SubscribeRate: 1000, SubscribeBurst: 1000}, &fakeHandler{})
	const workers, perWorker, devicesPerWorker = 8, 300, 20

	// One round first, so that what stays for good (the first use of
	// pools, maps grown to their working size) is in the baseline.
	if err := cleanCycle(addr, "warm", 0); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the warm-up client to leave", func() bool { return b.Connected() == 0 })
	baseGoroutines, baseHeap := settledGoroutines(), liveHeap()

	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				dev := fmt.Sprintf("w%d-%d", w, i%devicesPerWorker)
				var err error
				if i%4 == 3 {
					err = abruptCycle(addr, dev)
				} else {
					err = cleanCycle(addr, dev, i)
				}
				if err != nil {
					errs[w] = fmt.Errorf("cycle %d of %s: %w", i, dev, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}

	waitUntil(t, "every session to end", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.Connected() == 0 && len(b.sessions) == 0 && len(b.devices) == 0 && b.server.Clients.Len() == 0
	})
	for w := range workers {
		for i := range devicesPerWorker {
			topic := fmt.Sprintf("d/app/w%d-%d/msg", w, i)
			if n := len(b.server.Topics.Subscribers(topic).Subscriptions); n != 0 {
				t.Fatalf("%s still has %d subscribers", topic, n)
			}
		}
	}
	// mochi's burst goroutines outlive the last burst by a second
	// (third_party/mochi-mqtt/PATCHES.md, patch 2), then exit.
	deadline := time.Now().Add(5 * time.Second)
	g := settledGoroutines()
	for g > baseGoroutines && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		g = settledGoroutines()
	}
	if g > baseGoroutines {
		t.Errorf("goroutines: %d before the cycles, %d after", baseGoroutines, g)
	}
	// Generous: 2,400 connections held at once would be about 25 MiB.
	if h := liveHeap(); h > baseHeap+8<<20 {
		t.Errorf("live heap: %d KiB before the cycles, %d KiB after", baseHeap>>10, h>>10)
	}
}

// cleanCycle connects device dev of app "app" with paho, subscribes to
// its msg topic and disconnects.
func cleanCycle(addr, dev string, i int) error {
	c := paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(fmt.Sprintf("%s-%d", dev, i)).
		SetUsername("app/" + dev).SetPassword("secret").SetAutoReconnect(false).SetConnectTimeout(5 * time.Second))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		return fmt.Errorf("connect: %v", tok.Error())
	}
	tok := c.Subscribe("d/app/"+dev+"/msg", 1, nil)
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		c.Disconnect(0)
		return fmt.Errorf("subscribe: %v", tok.Error())
	}
	c.Disconnect(0)
	return nil
}

// abruptCycle connects device dev as MQTT 3.1.1 over a raw socket,
// subscribes, and closes the socket without DISCONNECT.
func abruptCycle(addr, dev string) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	str := func(b []byte, s string) []byte { return append(append(b, byte(len(s)>>8), byte(len(s))), s...) }
	body := str(nil, "MQTT")
	body = append(body, 4, 0xC2, 0, 60) // 3.1.1, username, password, clean; keepalive 60 s
	body = str(body, "")                // the broker assigns an id
	body = str(body, "app/"+dev)
	body = str(body, "secret")
	if _, err := c.Write(append([]byte{0x10, byte(len(body))}, body...)); err != nil {
		return err
	}
	connack := make([]byte, 4)
	if _, err := io.ReadFull(c, connack); err != nil || connack[3] != 0 {
		return fmt.Errorf("connack %x: %v", connack, err)
	}
	sub := str([]byte{0, 1}, "d/app/"+dev+"/msg")
	sub = append(sub, 1)
	if _, err := c.Write(append([]byte{0x82, byte(len(sub))}, sub...)); err != nil {
		return err
	}
	suback := make([]byte, 5)
	if _, err := io.ReadFull(c, suback); err != nil || suback[0] != 0x90 {
		return fmt.Errorf("suback %x: %v", suback, err)
	}
	return nil
}

// settledGoroutines waits briefly for goroutines that are on their way
// out (paho's, the broker's for connections just closed) and returns the
// count.
func settledGoroutines() int {
	n := runtime.NumGoroutine()
	for range 100 {
		time.Sleep(20 * time.Millisecond)
		m := runtime.NumGoroutine()
		if m == n {
			return n
		}
		n = m
	}
	return n
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

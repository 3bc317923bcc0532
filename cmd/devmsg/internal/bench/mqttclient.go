package bench

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// mqttConn is the smallest MQTT 3.1.1 client the measurements need: one
// connection, QoS 1 subscribe and publish, PUBACK of what it receives.
// paho spends three goroutines and tens of KiB per client; the bench
// connects tens of thousands, and the client side must not be what limits
// a 2-core machine. Both devmsg and Mosquitto are measured with it.
type mqttConn struct {
	c      net.Conn
	r      *bufio.Reader
	wmu    sync.Mutex
	w      *bufio.Writer
	nextID uint16
}

// dialMQTT connects and waits for a successful CONNACK. src, when not
// empty, is the local IP to dial from: one source address has about 28,000
// ephemeral ports, so large fleets spread over 127.0.0.x.
func dialMQTT(addr, src, clientID, user, pass string, keepalive uint16) (*mqttConn, error) {
	d := net.Dialer{Timeout: 10 * time.Second}
	if src != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	m := &mqttConn{c: c, r: bufio.NewReaderSize(c, 512), w: bufio.NewWriterSize(c, 512)}
	var v []byte
	v = appendString(v, "MQTT")
	flags := byte(0x02) // clean session
	if user != "" {
		flags |= 0x80 | 0x40
	}
	v = append(v, 4, flags, byte(keepalive>>8), byte(keepalive))
	v = appendString(v, clientID)
	if user != "" {
		v = appendString(v, user)
		v = appendString(v, pass)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := m.write(0x10, v); err != nil {
		c.Close()
		return nil, err
	}
	typ, body, err := m.read()
	if err != nil || typ>>4 != 2 || len(body) != 2 {
		c.Close()
		return nil, fmt.Errorf("connack: %v", err)
	}
	if body[1] != 0 {
		c.Close()
		return nil, fmt.Errorf("connection refused with code %d", body[1])
	}
	_ = c.SetDeadline(time.Time{})
	return m, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// write sends one packet: fixed header byte, remaining length, body.
func (m *mqttConn) write(first byte, body []byte) error {
	m.wmu.Lock()
	defer m.wmu.Unlock()
	if err := m.writeLocked(first, body); err != nil {
		return err
	}
	return m.w.Flush()
}

func (m *mqttConn) writeLocked(first byte, body []byte) error {
	hdr := []byte{first}
	n := len(body)
	for {
		d := byte(n % 128)
		n /= 128
		if n > 0 {
			d |= 0x80
		}
		hdr = append(hdr, d)
		if n == 0 {
			break
		}
	}
	if _, err := m.w.Write(hdr); err != nil {
		return err
	}
	_, err := m.w.Write(body)
	return err
}

// read returns the next packet's first byte and body.
func (m *mqttConn) read() (byte, []byte, error) {
	first, err := m.r.ReadByte()
	if err != nil {
		return 0, nil, err
	}
	n, mult := 0, 1
	for i := 0; ; i++ {
		b, err := m.r.ReadByte()
		if err != nil {
			return 0, nil, err
		}
		n += int(b&0x7f) * mult
		mult *= 128
		if b&0x80 == 0 {
			break
		}
		if i == 3 {
			return 0, nil, errors.New("malformed remaining length")
		}
	}
	body := make([]byte, n)
	_, err = io.ReadFull(m.r, body)
	return first, body, err
}

// subscribe subscribes at QoS 1 and waits for the SUBACK. A broker may
// send matching PUBLISHes before it; those are acknowledged and dropped.
func (m *mqttConn) subscribe(topic string) error {
	body := appendString([]byte{0, 1}, topic)
	body = append(body, 1)
	if err := m.write(0x82, body); err != nil {
		return err
	}
	for {
		first, ack, err := m.read()
		if err != nil {
			return err
		}
		if first>>4 == 3 && (first>>1)&3 > 0 && len(ack) >= 2 {
			tl := int(binary.BigEndian.Uint16(ack))
			if len(ack) < 4+tl {
				return errors.New("short publish")
			}
			if err := m.write(0x40, ack[2+tl:4+tl]); err != nil {
				return err
			}
			continue
		}
		if first>>4 != 9 || len(ack) != 3 || ack[2] > 1 {
			return fmt.Errorf("subscribe %s refused: %x", topic, ack)
		}
		return nil
	}
}

// publish sends a QoS 1 PUBLISH without waiting for its PUBACK and
// returns its packet id, which the PUBACK names.
func (m *mqttConn) publish(topic string, payload []byte) (uint16, error) {
	m.wmu.Lock()
	defer m.wmu.Unlock()
	m.nextID++
	if m.nextID == 0 {
		m.nextID = 1
	}
	body := appendString(make([]byte, 0, 2+len(topic)+2+len(payload)), topic)
	body = binary.BigEndian.AppendUint16(body, m.nextID)
	body = append(body, payload...)
	if err := m.writeLocked(0x32, body); err != nil {
		return 0, err
	}
	return m.nextID, m.w.Flush()
}

// serve reads until the connection ends: each PUBLISH goes to onMsg and,
// at QoS 1, is acknowledged after it; PUBACKs go to onAck with the packet
// id they acknowledge.
func (m *mqttConn) serve(onMsg func(topic string, payload []byte), onAck func(id uint16)) error {
	for {
		first, body, err := m.read()
		if err != nil {
			return err
		}
		switch first >> 4 {
		case 3: // PUBLISH
			if len(body) < 2 {
				return errors.New("short publish")
			}
			tl := int(binary.BigEndian.Uint16(body))
			rest := body[2+tl:]
			topic := string(body[2 : 2+tl])
			qos := (first >> 1) & 3
			var id []byte
			if qos > 0 {
				id, rest = rest[:2], rest[2:]
			}
			if onMsg != nil {
				onMsg(topic, rest)
			}
			if qos > 0 {
				if err := m.write(0x40, id); err != nil {
					return err
				}
			}
		case 4: // PUBACK
			if onAck != nil && len(body) >= 2 {
				onAck(binary.BigEndian.Uint16(body))
			}
		}
	}
}

// ping sends PINGREQ; the answer is read (and ignored) by serve.
func (m *mqttConn) ping() error { return m.write(0xC0, nil) }

func (m *mqttConn) close() error { return m.c.Close() }

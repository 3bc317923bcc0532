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
	v5     bool // MQTT 5: packets carry properties (dialMQTT5)
}

// mqttProps are the MQTT 5 PUBLISH properties of request/response, the
// only ones the bench reads or sends.
type mqttProps struct {
	respTopic string
	corr      []byte
}

// dialMQTT connects and waits for a successful CONNACK. src, when not
// empty, is the local IP to dial from: one source address has about 28,000
// ephemeral ports, so large fleets spread over 127.0.0.x.
func dialMQTT(addr, src, clientID, user, pass string, keepalive uint16) (*mqttConn, error) {
	return dialMQTTVersion(addr, src, clientID, user, pass, keepalive, 4)
}

// dialMQTT5 is dialMQTT over MQTT 5, for the request/response workloads.
func dialMQTT5(addr, src, clientID, user, pass string, keepalive uint16) (*mqttConn, error) {
	return dialMQTTVersion(addr, src, clientID, user, pass, keepalive, 5)
}

func dialMQTTVersion(addr, src, clientID, user, pass string, keepalive uint16, version byte) (*mqttConn, error) {
	d := net.Dialer{Timeout: 10 * time.Second}
	if src != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	m := &mqttConn{c: c, r: bufio.NewReaderSize(c, 512), w: bufio.NewWriterSize(c, 512), v5: version == 5}
	var v []byte
	v = appendString(v, "MQTT")
	flags := byte(0x02) // clean session
	if user != "" {
		flags |= 0x80 | 0x40
	}
	v = append(v, version, flags, byte(keepalive>>8), byte(keepalive))
	if m.v5 {
		v = append(v, 0) // no properties
	}
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
	if err != nil || typ>>4 != 2 || len(body) < 2 || (!m.v5 && len(body) != 2) {
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
	hdr := appendVarint([]byte{first}, len(body))
	if _, err := m.w.Write(hdr); err != nil {
		return err
	}
	_, err := m.w.Write(body)
	return err
}

// appendVarint appends n as an MQTT variable byte integer.
func appendVarint(b []byte, n int) []byte {
	for {
		d := byte(n % 128)
		n /= 128
		if n > 0 {
			d |= 0x80
		}
		b = append(b, d)
		if n == 0 {
			return b
		}
	}
}

// readProps splits an MQTT 5 property block off the front of b, keeping
// the request/response properties.
func readProps(b []byte) (mqttProps, []byte, error) {
	n, mult, i := 0, 1, 0
	for ; ; i++ {
		if i >= len(b) || i == 4 {
			return mqttProps{}, nil, errors.New("malformed property length")
		}
		n += int(b[i]&0x7f) * mult
		mult *= 128
		if b[i]&0x80 == 0 {
			break
		}
	}
	b = b[i+1:]
	if n > len(b) {
		return mqttProps{}, nil, errors.New("short properties")
	}
	props, rest := b[:n], b[n:]
	var p mqttProps
	for len(props) > 0 {
		id := props[0]
		props = props[1:]
		switch id {
		case 0x08, 0x09, 0x03: // response topic, correlation data, content type: 2-byte length
			if len(props) < 2 || len(props) < 2+int(binary.BigEndian.Uint16(props)) {
				return mqttProps{}, nil, errors.New("short property")
			}
			l := int(binary.BigEndian.Uint16(props))
			v := props[2 : 2+l]
			switch id {
			case 0x08:
				p.respTopic = string(v)
			case 0x09:
				p.corr = v
			}
			props = props[2+l:]
		case 0x01: // payload format indicator
			props = props[1:]
		case 0x02: // message expiry interval
			props = props[4:]
		case 0x23: // topic alias
			props = props[2:]
		case 0x0B: // subscription identifier: a varint
			for len(props) > 0 && props[0]&0x80 != 0 {
				props = props[1:]
			}
			props = props[1:]
		case 0x26: // user property: two strings
			for range 2 {
				if len(props) < 2 || len(props) < 2+int(binary.BigEndian.Uint16(props)) {
					return mqttProps{}, nil, errors.New("short user property")
				}
				props = props[2+int(binary.BigEndian.Uint16(props)):]
			}
		default:
			return mqttProps{}, nil, fmt.Errorf("unexpected property 0x%x", id)
		}
	}
	return p, rest, nil
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
	body := []byte{0, 1}
	if m.v5 {
		body = append(body, 0) // no properties
	}
	body = appendString(body, topic)
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
		if first>>4 != 9 || len(ack) < 3 || (!m.v5 && len(ack) != 3) || ack[len(ack)-1] > 1 {
			return fmt.Errorf("subscribe %s refused: %x", topic, ack)
		}
		return nil
	}
}

// publish sends a QoS 1 PUBLISH without waiting for its PUBACK and
// returns its packet id, which the PUBACK names.
func (m *mqttConn) publish(topic string, payload []byte) (uint16, error) {
	return m.publishProps(topic, payload, mqttProps{})
}

// publishProps is publish with MQTT 5 request/response properties, which
// an MQTT 3.1.1 connection cannot carry.
func (m *mqttConn) publishProps(topic string, payload []byte, p mqttProps) (uint16, error) {
	m.wmu.Lock()
	defer m.wmu.Unlock()
	m.nextID++
	if m.nextID == 0 {
		m.nextID = 1
	}
	body := appendString(make([]byte, 0, 2+len(topic)+2+8+len(p.respTopic)+len(p.corr)+len(payload)), topic)
	body = binary.BigEndian.AppendUint16(body, m.nextID)
	if m.v5 {
		var props []byte
		if p.respTopic != "" {
			props = appendString(append(props, 0x08), p.respTopic)
		}
		if p.corr != nil {
			props = binary.BigEndian.AppendUint16(append(props, 0x09), uint16(len(p.corr)))
			props = append(props, p.corr...)
		}
		body = appendVarint(body, len(props))
		body = append(body, props...)
	}
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
	var f func(string, []byte, mqttProps)
	if onMsg != nil {
		f = func(topic string, payload []byte, _ mqttProps) { onMsg(topic, payload) }
	}
	return m.serveProps(f, onAck, false)
}

// serveProps is serve with each PUBLISH's MQTT 5 request/response
// properties; with ackFirst the PUBACK goes before onMsg is called, as a
// device that acknowledges a command before it answers.
func (m *mqttConn) serveProps(onMsg func(topic string, payload []byte, p mqttProps), onAck func(id uint16), ackFirst bool) error {
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
			var p mqttProps
			if m.v5 {
				if p, rest, err = readProps(rest); err != nil {
					return err
				}
			}
			if qos > 0 && ackFirst {
				if err := m.write(0x40, id); err != nil {
					return err
				}
			}
			if onMsg != nil {
				onMsg(topic, rest, p)
			}
			if qos > 0 && !ackFirst {
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

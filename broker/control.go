package broker

import (
	"errors"

	"github.com/mochi-mqtt/server/v2/packets"
)

// controlMax is the most publishes of PublishControl a session keeps
// waiting for places in its device's window. A device that lets more
// pile up acknowledges nothing while it is sent things; it is
// disconnected, as one whose writes time out is.
const controlMax = 1000

// ErrControlBacklog ends a connection whose device let controlMax
// publishes wait for places in its window.
var ErrControlBacklog = errors.New("the device acknowledges no publish: too many wait for its Receive Maximum")

// PublishControl publishes payload on topic (relative to the device's
// prefix) at QoS 1: a short notice the service owes the device (a
// command's cancel, a desired document, a report's reply) rather than
// one of its messages or commands.
//
// An MQTT 5 device that declared a Receive Maximum counts it like any
// QoS 1 publish, so it goes within that window: at once when a place is
// free, else it waits in the session, and each PUBACK that frees a
// place sends the oldest waiting (released by the broker before the
// Handler hears of the PUBACK). While one waits, PublishWithin and
// PublishRequestWithin send nothing: these go first. Without a declared
// Receive Maximum it goes at once. The window counts every publish the
// device has not acknowledged, also those Uncount took out of the
// service's own window. Its PUBACK reaches Handler.Acked with a packet
// id no message or command holds.
func (s *Session) PublishControl(topic string, payload []byte) error {
	pk := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
		TopicName:   s.prefix + topic,
		Payload:     payload,
	}
	limit := s.ReceiveMaximum()
	s.mu.Lock()
	if limit > 0 && (len(s.control) > 0 || len(s.awaiting) >= limit) {
		if len(s.control) >= controlMax {
			s.mu.Unlock()
			s.cl.Stop(ErrControlBacklog)
			return ErrControlBacklog
		}
		s.control = append(s.control, pk)
		s.mu.Unlock()
		return nil
	}
	id, err := s.nextPacketID()
	s.mu.Unlock()
	if err != nil {
		return err
	}
	pk.PacketID = id
	return s.writeOrHold([]packets.Packet{pk})
}

// acked frees the place of packet id, which the device acknowledged,
// and sends the publishes of PublishControl that the free places now
// take; it reports whether id was awaiting a PUBACK.
func (s *Session) acked(id uint16) bool {
	if !s.releasePacketID(id) {
		return false
	}
	s.mu.Lock()
	var next []packets.Packet
	if len(s.control) > 0 {
		limit := s.ReceiveMaximum()
		n := 0
		for n < len(s.control) && len(s.awaiting) < limit {
			pid, err := s.nextPacketID()
			if err != nil {
				break
			}
			s.control[n].PacketID = pid
			n++
		}
		next = s.control[:n:n]
		s.control = s.control[n:]
		if len(s.control) == 0 {
			s.control = nil
		}
	}
	s.mu.Unlock()
	if len(next) > 0 {
		_ = s.writeOrHold(next) // a failure ends the connection
	}
	return true
}

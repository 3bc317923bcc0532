package message

import (
	"time"

	"github.com/devmsg/devmsg/store"
)

// NewRecord builds a status record of message m as it is stored: the
// fields m already holds are left for Records to fill in, which halves the
// bytes written per message. errCode 0 means no error object.
func NewRecord(m store.Message, typ, errCode int, errMsg string, now time.Time) store.Record {
	r := store.Record{Type: typ, SentTime: now.Unix()}
	if errCode != 0 {
		r.Error = &store.RecordError{Code: errCode, Message: errMsg}
	}
	return r
}

// Records returns m's status records in the callback format, every field
// filled in.
func Records(m store.Message) []store.Record {
	out := make([]store.Record, len(m.Records))
	for i, r := range m.Records {
		out[i] = m.Filled(r)
	}
	return out
}

package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/devmsg/devmsg/store"
)

// A shadow is a hash, so that scripts can check and advance its versions
// and merge properties without decoding JSON in Lua (which would rewrite
// the raw JSON values). Fields: v, rv (LastDesiredVersion,
// LastReportedVersion), dt, rt (their times), sdk, appv, and per property
// d:<name> and ds:<name> (desired value and time), r:<name> and rs:<name>
// (reported). Fixed fields hold no ':', so a property name cannot collide.

// GetShadow returns the device's shadow or store.ErrNotFound.
func (s *Store) GetShadow(ctx context.Context, appKey, name string) (store.Shadow, error) {
	m, err := s.rdb.HGetAll(ctx, s.shadowKey(appKey, name)).Result()
	if err != nil {
		return store.Shadow{}, fmt.Errorf("get shadow %s/%s: %w", appKey, name, err)
	}
	if len(m) == 0 {
		return store.Shadow{}, store.ErrNotFound
	}
	return decodeShadow(m)
}

// shadowReply decodes the HGETALL reply a script returns, or maps its
// refusal code to an error.
func shadowReply(v any) (store.Shadow, error) {
	switch r := v.(type) {
	case int64:
		switch r {
		case codeSeqUsed:
			return store.Shadow{}, store.ErrSeqUsed
		case codeNotFound:
			return store.Shadow{}, store.ErrNotFound
		case codeConflict:
			return store.Shadow{}, store.ErrVersionConflict
		}
	case []any:
		m := make(map[string]string, len(r)/2)
		for i := 0; i+1 < len(r); i += 2 {
			k, _ := r[i].(string)
			v, _ := r[i+1].(string)
			m[k] = v
		}
		return decodeShadow(m)
	}
	return store.Shadow{}, fmt.Errorf("unexpected script reply %v", v)
}

func decodeShadow(m map[string]string) (store.Shadow, error) {
	sh := store.Shadow{Properties: map[string]store.Property{}, SDKVer: m["sdk"], AppVer: m["appv"]}
	num := func(field string) (int64, error) {
		v, ok := m[field]
		if !ok || v == "" {
			return 0, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("shadow field %s: %w", field, err)
		}
		return n, nil
	}
	var err error
	for _, f := range []struct {
		name string
		dst  *int64
	}{
		{"v", &sh.LastDesiredVersion}, {"rv", &sh.LastReportedVersion},
		{"dt", &sh.LastDesiredSTime}, {"rt", &sh.LastReportedSTime},
	} {
		if *f.dst, err = num(f.name); err != nil {
			return store.Shadow{}, err
		}
	}
	for field, v := range m {
		kind, name, ok := strings.Cut(field, ":")
		if !ok {
			continue
		}
		p := sh.Properties[name]
		switch kind {
		case "d":
			p.DesiredValue = json.RawMessage(v)
		case "r":
			p.ReportedValue = json.RawMessage(v)
		case "ds":
			if p.DesiredSTime, err = num(field); err != nil {
				return store.Shadow{}, err
			}
		case "rs":
			if p.ReportedSTime, err = num(field); err != nil {
				return store.Shadow{}, err
			}
		default:
			continue
		}
		sh.Properties[name] = p
	}
	return sh, nil
}

// seqArgs returns the script arguments that record seq (when not nil).
func seqArgs(seq *store.SeqEntry) (has string, data []byte, pxat int64, err error) {
	if seq == nil {
		return "0", nil, 0, nil
	}
	data, err = json.Marshal(seq)
	// PXAT must be positive; an expiry at or before 1970 is in the past
	// either way, and Redis drops the key at once.
	return "1", data, max(seq.ExpiresAt, 1), err
}

// SetDesired applies u and records seq in one script; see store.Store for
// the errors, which are checked in that order.
func (s *Store) SetDesired(ctx context.Context, u store.DesiredUpdate, seqNo int64, seq *store.SeqEntry) (store.Shadow, error) {
	has, data, pxat, err := seqArgs(seq)
	if err != nil {
		return store.Shadow{}, fmt.Errorf("set desired %s/%s: %w", u.AppKey, u.DeviceName, err)
	}
	args := []any{has, data, pxat, strconv.FormatInt(u.Version, 10), u.Time}
	for name, v := range u.Properties {
		args = append(args, name, []byte(v))
	}
	keys := []string{s.seqKey(u.AppKey, seqNo), s.shadowKey(u.AppKey, u.DeviceName)}
	v, err := s.run(ctx, setDesiredScript, keys, args...).Result()
	if err != nil {
		return store.Shadow{}, fmt.Errorf("set desired %s/%s: %w", u.AppKey, u.DeviceName, err)
	}
	return shadowReply(v)
}

// ReportProperties applies a device's report in one script. With
// r.Emit, whose events depend on the shadow the report leaves, it reads
// the shadow under WATCH, works out that shadow, and runs the same script
// with the version made explicit and the events' append in one MULTI.
func (s *Store) ReportProperties(ctx context.Context, r store.Report) (store.Shadow, error) {
	if r.Emit != nil {
		return s.reportEmitting(ctx, r)
	}
	v, err := s.run(ctx, reportScript, []string{s.shadowKey(r.AppKey, r.DeviceName)}, reportArgs(r)...).Result()
	if err != nil {
		return store.Shadow{}, fmt.Errorf("report %s/%s: %w", r.AppKey, r.DeviceName, err)
	}
	return shadowReply(v)
}

func reportArgs(r store.Report) []any {
	args := []any{strconv.FormatInt(r.Version, 10), r.Time, r.SDKVer, r.AppVer}
	for name, v := range r.Properties {
		args = append(args, name, []byte(v))
	}
	return args
}

func (s *Store) reportEmitting(ctx context.Context, r store.Report) (store.Shadow, error) {
	k := s.shadowKey(r.AppKey, r.DeviceName)
	var out store.Shadow
	err := s.watch(ctx, func(tx *goredis.Tx) error {
		m, err := tx.HGetAll(ctx, k).Result()
		if err != nil {
			return err
		}
		if len(m) == 0 {
			return store.ErrNotFound
		}
		sh, err := decodeShadow(m)
		if err != nil {
			return err
		}
		rr := r
		if rr.Version, err = store.ApplyReport(&sh, r); err != nil {
			return err
		}
		evs := store.Stamp(r.Emit(sh), r.AppKey, r.DeviceName)
		// The fence was checked under WATCH: the script is told none.
		_, err = tx.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			p.Eval(ctx, fenceLua+reportLua, []string{k}, append([]any{""}, reportArgs(rr)...)...)
			s.txAppend(ctx, p, r.AppKey, evs)
			return nil
		})
		if err != nil {
			return err
		}
		out = sh
		return nil
	}, k)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrVersionConflict) {
			return store.Shadow{}, err
		}
		return store.Shadow{}, fmt.Errorf("report %s/%s: %w", r.AppKey, r.DeviceName, err)
	}
	return out, nil
}

// GetSeq returns the unexpired entry for the app's seq_no, or
// store.ErrNotFound. Redis drops an entry at its ExpiresAt (PXAT), and
// never returns one past it. It is a durable read as store.Store asks:
// Redis shows a write once it is acknowledged, and an acknowledged write
// is durable.
func (s *Store) GetSeq(ctx context.Context, appKey string, seqNo int64) (store.SeqEntry, error) {
	// An entry written by createMessagesScript holds its body as text
	// (body_text), as the script cannot encode it in base64.
	var e struct {
		store.SeqEntry
		BodyText *string `json:"body_text"`
	}
	if err := getJSON(ctx, s.rdb, s.seqKey(appKey, seqNo), &e); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return store.SeqEntry{}, err
		}
		return store.SeqEntry{}, fmt.Errorf("get seq_no %d of %s: %w", seqNo, appKey, err)
	}
	if e.BodyText != nil {
		e.Body = []byte(*e.BodyText)
	}
	return e.SeqEntry, nil
}

// PutSeq records e with SET NX PXAT: store.ErrSeqUsed if an unexpired
// entry holds the seq_no.
func (s *Store) PutSeq(ctx context.Context, appKey string, seqNo int64, e store.SeqEntry) error {
	_, data, pxat, err := seqArgs(&e)
	if err != nil {
		return fmt.Errorf("put seq_no %d of %s: %w", seqNo, appKey, err)
	}
	err = s.rdb.Do(ctx, "SET", s.seqKey(appKey, seqNo), data, "NX", "PXAT", pxat).Err()
	if errors.Is(err, goredis.Nil) {
		return store.ErrSeqUsed
	}
	if err != nil {
		return fmt.Errorf("put seq_no %d of %s: %w", seqNo, appKey, err)
	}
	return nil
}

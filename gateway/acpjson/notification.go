package acpjson

import (
	"strings"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// UpdateNotification is a session/update notification decoded by
// [DecodeNotification].
type UpdateNotification struct {
	// SessionID is params.sessionId ("" when it is null or absent).
	SessionID string
	// Update is params.update as [DecodeUpdate] decodes it or, when that
	// fails, as [KeepUnknown] keeps it. It is never nil.
	Update *acpv2.SessionUpdate
	// Err says why params.update did not decode; nil when it did.
	Err error
}

// DecodeNotification decodes a whole JSON-RPC session/update notification
// from an agent that negotiated version v, such as
//
//	{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{...}}}
//
// in a single pass over data: its update is not cut out and parsed again,
// yet comes out as DecodeUpdate of params.update would make it, with
// KeepUnknown's fallback.
//
// ok is false, and nothing is decoded, unless data is plainly such a
// notification: one JSON object with the members method (the string
// "session/update"), params and optionally jsonrpc, each once and no other;
// params an object with an update member and a sessionId that is a string,
// null or absent, each once, and no other member named sessionId or update
// but for letter case; the update nested no deeper than [MaxDepth], and
// the rest no deeper than MaxDepth either. Anything else, invalid JSON and
// requests (messages with an id) included, is left to the caller's
// JSON-RPC decoder, whose reading of odd messages (encoding/json matches
// member names to fields regardless of case) this does not try to
// reproduce.
func DecodeNotification(data []byte, v Version) (n UpdateNotification, ok bool) {
	return decodeNotification(data, v)
}

func decodeNotification(data []byte, v Version) (n UpdateNotification, ok bool) {
	r := getReader(data, MaxDepth)
	defer putReader(r)
	d := decoder{version: v}
	var (
		u    *acpv2.SessionUpdate
		raw  []byte // the update's bytes, when it did not decode
		seen int
	)
	once := func(m int) bool {
		if seen&m != 0 {
			return false
		}
		seen |= m
		return true
	}
	params := func(name []byte) (bool, error) {
		switch {
		case string(name) == "sessionId":
			if !once(mSessionID) {
				return false, nil
			}
			switch r.kind() {
			case '"':
				s, err := r.str()
				n.SessionID = s
				return err == nil, err
			case 'n':
				_, err := r.scalar()
				return err == nil, err
			}
			return false, nil
		case string(name) == "update":
			if !once(mUpdate) {
				return false, nil
			}
			// The update may nest MaxDepth levels below params, as it
			// may on its own (DecodeUpdate); a deeper one is declined,
			// for DecodeUpdate to refuse.
			outer := r.limit
			r.limit = r.depth() + MaxDepth
			start, d0 := r.offset(), r.depth()
			err := d.update(r, &u)
			if semantic(err) {
				n.Err = err
				raw, err = r.finish(start, d0)
			}
			r.limit = outer
			return err == nil, err
		case strings.EqualFold(string(name), "sessionId"), strings.EqualFold(string(name), "update"):
			return false, nil
		}
		return true, r.skip()
	}
	top := func(name []byte) (bool, error) {
		switch string(name) {
		case "jsonrpc":
			return once(mJSONRPC), r.skip()
		case "method":
			if !once(mMethod) || r.kind() != '"' {
				return false, nil
			}
			m, err := r.str()
			return m == "session/update", err
		case "params":
			if !once(mParams) || r.kind() != '{' {
				return false, nil
			}
			return r.members(params)
		}
		return false, nil
	}
	if r.kind() != '{' {
		return UpdateNotification{}, false
	}
	if ok, err := r.members(top); !ok || err != nil || !r.end() || seen&(mMethod|mParams|mUpdate) != mMethod|mParams|mUpdate {
		return UpdateNotification{}, false
	}
	if n.Err != nil {
		n.Update = KeepUnknown(raw)
	} else {
		n.Update = u
	}
	return n, true
}

// members reads the object at r, calling member with the name of each of
// its members in turn; member reads the value, which follows, and reports
// whether to go on.
func (r *reader) members(member func(name []byte) (bool, error)) (bool, error) {
	if err := r.open(); err != nil {
		return false, err
	}
	for {
		more, err := r.more()
		if err != nil || !more {
			return err == nil, err
		}
		name, err := r.name()
		if err != nil {
			return false, err
		}
		if ok, err := member(name); !ok || err != nil {
			return false, err
		}
	}
}

// Members of a notification, as bits.
const (
	mJSONRPC = 1 << iota
	mMethod
	mParams
	mSessionID
	mUpdate
)

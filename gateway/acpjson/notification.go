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
	return decodeNotification(data, v, true)
}

// decodeNotification is DecodeNotification, taking the direct path (see
// directUpdate) when direct is set.
func decodeNotification(data []byte, v Version, direct bool) (n UpdateNotification, ok bool) {
	sid, update, decoded, ok := parseNotification(data, v, direct)
	if !ok {
		return UpdateNotification{}, false
	}
	n.SessionID = sid
	if decoded != nil {
		n.Update = decoded
		return n, true
	}
	n.Update, n.Err = decodeUpdate(update, v)
	if n.Err != nil {
		n.Update = keepUnknown(update)
	}
	return n, true
}

// decodeUpdate is DecodeUpdate of the parsed value val.
func decodeUpdate(val any, v Version) (*acpv2.SessionUpdate, error) {
	obj, err := asObject(val)
	if err != nil {
		return nil, err
	}
	u := &acpv2.SessionUpdate{}
	d := decoder{version: v}
	if err := d.sessionUpdate(obj, u); err != nil {
		return nil, err
	}
	return u, nil
}

// Members of a notification, as bits.
const (
	mJSONRPC = 1 << iota
	mMethod
	mParams
	mSessionID
	mUpdate
)

// parseNotification parses data as DecodeNotification describes, returning
// params.sessionId and the parsed params.update, or with direct, the
// update decoded by the direct path when it takes it.
func parseNotification(data []byte, v Version, direct bool) (sid string, update any, decoded *acpv2.SessionUpdate, ok bool) {
	p := getParser(data)
	defer putParser(p)
	seen := 0
	once := func(m int) bool {
		if seen&m != 0 {
			return false
		}
		seen |= m
		return true
	}
	params := func(k string) bool {
		switch {
		case k == "sessionId":
			if !once(mSessionID) {
				return false
			}
			var ok bool
			sid, ok = p.plainText() // a string, or null
			return ok
		case k == "update":
			if !once(mUpdate) {
				return false
			}
			// The update may nest MaxDepth levels below params, as it
			// may on its own (DecodeUpdate); a deeper one is declined,
			// for DecodeUpdate to refuse.
			outer := p.limit
			p.limit = p.depth + MaxDepth
			ok := false
			if direct {
				decoded, ok = p.directUpdate(v)
			}
			if !ok {
				update, ok = p.value()
			}
			p.limit = outer
			return ok
		case strings.EqualFold(k, "sessionId"), strings.EqualFold(k, "update"):
			return false
		}
		_, ok := p.value()
		return ok
	}
	ok = p.members(func(k string) bool {
		switch k {
		case "jsonrpc":
			_, ok := p.value()
			return once(mJSONRPC) && ok
		case "method":
			m, ok := p.value()
			return once(mMethod) && ok && m == "session/update"
		case "params":
			return once(mParams) && p.members(params)
		}
		return false
	})
	p.ws()
	if !ok || p.i != len(p.data) || seen&(mMethod|mParams|mUpdate) != mMethod|mParams|mUpdate {
		return "", nil, nil, false
	}
	return sid, update, decoded, true
}

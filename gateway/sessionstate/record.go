package sessionstate

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// RecordID is the id under which a State is stored among its session's
// tool calls (statestore.Call): no tool call has it, as the session
// refuses a tool call id that holds control characters.
const RecordID = "\x00acp-gateway:session-state"

// recordField is the field that carries the state in a record. A record
// is a ToolCall whose tool_call_id is RecordID, with the state (a
// SessionSnapshot holding only the state fields) in this field, which
// ToolCall does not declare: every store decodes and keeps a record as
// the tool call it looks like, unknown field included, so that no store
// needs to know of it.
const recordField protowire.Number = 1000

// Record returns the state encoded as a record to store among the tool
// calls, under RecordID.
func (st *State) Record() ([]byte, error) {
	body, err := proto.Marshal(&st.s)
	if err != nil {
		return nil, fmt.Errorf("sessionstate: encoding the state: %w", err)
	}
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	b = protowire.AppendString(b, RecordID)
	b = protowire.AppendTag(b, recordField, protowire.BytesType)
	return protowire.AppendBytes(b, body), nil
}

// FromCalls splits a session's stored tool calls into the calls and the
// state its record holds (an empty State when there is none, as for a
// session stored by a gateway from before this record).
func FromCalls(calls []*acpv2.ToolCall) ([]*acpv2.ToolCall, *State, error) {
	for i, tc := range calls {
		if tc.GetToolCallId() == RecordID {
			st, err := FromRecord(tc)
			if err != nil {
				return nil, nil, err
			}
			return append(calls[:i:i], calls[i+1:]...), st, nil
		}
	}
	return calls, &State{}, nil
}

// ErrCorrupt is a stored state record that cannot be read.
var ErrCorrupt = errors.New("sessionstate: corrupt state record")

// FromRecord returns the state that rec, the call a store holds under
// RecordID, holds: an empty State for nil (no record stored).
func FromRecord(rec *acpv2.ToolCall) (*State, error) {
	st := &State{}
	b := rec.ProtoReflect().GetUnknown()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, fmt.Errorf("%w: %w", ErrCorrupt, protowire.ParseError(n))
		}
		b = b[n:]
		if num == recordField && typ == protowire.BytesType {
			body, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return nil, fmt.Errorf("%w: %w", ErrCorrupt, protowire.ParseError(m))
			}
			if err := proto.Unmarshal(body, &st.s); err != nil {
				return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
			}
			return st, nil
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return nil, fmt.Errorf("%w: %w", ErrCorrupt, protowire.ParseError(m))
		}
		b = b[m:]
	}
	return st, nil
}

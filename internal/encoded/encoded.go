// Package encoded holds a session event as the gateway passes it around:
// numbered, encoded once, and never changed afterwards.
//
// An [Event] is made where the event is numbered, from its message
// ([New], [Of]), or where it is read back, from the bytes a store kept
// ([Decode]). It carries its seq, its kind, its protobuf encoding (the
// bytes the store keeps and every protobuf stream sends), its JSON
// encoding, made the first time a JSON stream asks and then shared by
// all, and its message, decoded the first time someone asks. The session
// hands the same Event to the store, to its ring of live events, to every
// subscription and to the codecs: nothing is encoded twice, and no cache
// has to find an event's bytes again.
//
// An Event is immutable: what it hands out (the bytes of [Event.Proto]
// and [Event.JSON], the message of [Event.Message]) is shared with every
// other holder and must not be modified. It is safe for concurrent use.
package encoded

import (
	"bytes"
	"fmt"
	"slices"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/eventjson"
	"github.com/acp-gateway/acp-gateway/internal/protowalk"
)

// Kind is the number of the field of SessionEvent's event oneof that an
// event sets (0 for none): which kind of event it is.
type Kind protowire.Number

var (
	eventDesc  = (&acpv2.SessionEvent{}).ProtoReflect().Descriptor()
	eventOneof = eventDesc.Oneofs().ByName("event")
)

func kindOf(name protoreflect.Name) Kind { return Kind(eventDesc.Fields().ByName(name).Number()) }

// The kinds the gateway tells apart.
var (
	ToolCall     = kindOf("tool_call")
	TurnStarted  = kindOf("turn_started")
	TurnEnded    = kindOf("turn_ended")
	StateChanged = kindOf("state_changed")
	Snapshot     = kindOf("snapshot")
)

// String returns the kind's field name (tool_call, agent_message_chunk,
// ...), or a number for a field this build does not know.
func (k Kind) String() string {
	if fd := eventOneof.Fields().ByNumber(protowire.Number(k)); fd != nil {
		return string(fd.Name())
	}
	return fmt.Sprintf("event field %d", k)
}

// isKind says whether num is a field of the event oneof.
func isKind(num protowire.Number) bool { return eventOneof.Fields().ByNumber(num) != nil }

// seqField is the number of SessionEvent's seq field.
const seqField = 1

// Event is a session event, encoded: see the package comment.
type Event struct {
	seq   uint64
	kind  Kind
	proto []byte

	msgOnce sync.Once
	msg     *acpv2.SessionEvent
	msgErr  error

	jsonOnce sync.Once
	json     []byte
	// jsonSegs, when set, is the JSON in segments, shared with the
	// events of the call's other versions (json is then nil).
	jsonSegs [][]byte
	jsonErr  error
	// call, for a merged tool call's event made by Calls.Body, is the
	// JSON of the call's parts that its events made, which its JSON
	// reuses.
	call *callJSON
}

// New returns the event of msg, encoded by proto.Marshal. msg is the
// event's from then on: it must not be modified.
func New(msg *acpv2.SessionEvent) (*Event, error) {
	b, err := proto.Marshal(msg)
	if err != nil {
		return nil, fmt.Errorf("encoding event %d: %w", msg.GetSeq(), err)
	}
	return Of(msg, b), nil
}

// Of returns the event of msg whose protobuf encoding is wire, made
// already (as the session makes it from its parts). Neither must be
// modified afterwards.
func Of(msg *acpv2.SessionEvent, wire []byte) *Event {
	e := &Event{}
	e.set(msg, wire, 0)
	return e
}

// set makes e, a zero Event, the event of msg whose encoding is wire;
// kind is its kind when known already (0: read from msg).
func (e *Event) set(msg *acpv2.SessionEvent, wire []byte, kind Kind) {
	e.seq, e.proto, e.msg, e.kind = msg.GetSeq(), wire, msg, kind
	if kind == 0 {
		if fd := msg.ProtoReflect().WhichOneof(eventOneof); fd != nil {
			e.kind = Kind(fd.Number())
		}
	}
	e.msgOnce.Do(func() {})
}

// Decode returns the event encoded in wire, as a store kept it: its seq
// and kind are read at once (an encoding whose fields do not parse fails
// here), its message only when asked for. wire must not be modified
// afterwards.
func Decode(wire []byte) (*Event, error) {
	e := &Event{proto: wire}
	err := protowalk.Fields(wire, func(num protowire.Number, typ protowire.Type, b []byte) error {
		switch {
		case num == seqField && typ == protowire.VarintType:
			e.seq, _ = protowire.ConsumeVarint(b)
		case typ == protowire.BytesType && isKind(num):
			e.kind = Kind(num) // the last one set, as in proto.Unmarshal
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("decoding an event: %w", err)
	}
	return e, nil
}

// Seq returns the event's seq.
func (e *Event) Seq() uint64 { return e.seq }

// Kind returns which kind of event it is.
func (e *Event) Kind() Kind { return e.kind }

// Proto returns the event's protobuf encoding: shared, not to be
// modified.
func (e *Event) Proto() []byte { return e.proto }

// Size returns the length of the event's protobuf encoding, what it
// counts in the bounds on kept events.
func (e *Event) Size() int { return len(e.proto) }

// Message returns the event's message, decoded from its encoding the
// first time it is asked for (an event made from its message has it
// already). It is shared: read it, do not modify it.
func (e *Event) Message() (*acpv2.SessionEvent, error) {
	e.msgOnce.Do(func() {
		msg := &acpv2.SessionEvent{}
		if err := proto.Unmarshal(e.proto, msg); err != nil {
			e.msgErr = fmt.Errorf("decoding event %d: %w", e.seq, err)
			return
		}
		e.msg = msg
	})
	return e.msg, e.msgErr
}

// JSON returns the event's protojson encoding (eventjson's). It is made
// the first time it or [Event.AppendJSON] is asked for, and shared: not
// to be modified. A merged tool call's JSON, made in segments (see
// AppendJSON), is joined here anew at each call: streams append it.
func (e *Event) JSON() ([]byte, error) {
	e.makeJSON()
	if e.jsonSegs != nil {
		return bytes.Join(e.jsonSegs, nil), nil
	}
	return e.json, e.jsonErr
}

// AppendJSON appends the event's JSON, as JSON returns it, to dst. A
// merged tool call's event made with its Body from [Calls.Body] has its
// JSON in segments: the JSON of the call's parts (content items,
// locations, rawInput, ...) that it shares with a version of the call
// whose JSON was made before are that version's, not written again, and
// only what changed is written, in proportion to the change, not to the
// call's size.
func (e *Event) AppendJSON(dst []byte) ([]byte, error) {
	e.makeJSON()
	if e.jsonErr != nil {
		return dst, e.jsonErr
	}
	if e.jsonSegs == nil {
		return append(dst, e.json...), nil
	}
	n := len(dst)
	for _, s := range e.jsonSegs {
		n += len(s)
	}
	dst = slices.Grow(dst, n-len(dst))
	for _, s := range e.jsonSegs {
		dst = append(dst, s...)
	}
	return dst, nil
}

// makeJSON makes the event's JSON, once.
func (e *Event) makeJSON() {
	e.jsonOnce.Do(func() {
		msg, err := e.Message()
		if err != nil {
			e.jsonErr = err
			return
		}
		if e.call != nil {
			segs, err := e.call.marshal(e.seq, msg)
			if len(segs) == 1 {
				e.json = segs[0]
			} else {
				e.jsonSegs = segs
			}
			e.jsonErr = err
			return
		}
		e.json, e.jsonErr = eventjson.Marshal(msg)
	})
}

// Field returns the contents of the event's field of kind k, within its
// encoding (not a copy), or nil when the event is not of that kind: a
// merged tool call's event holds the call's encoding, which the store
// keeps as the call's.
func (e *Event) Field(k Kind) []byte {
	if k == 0 || e.kind != k {
		return nil
	}
	v, _ := protowalk.Bytes(e.proto, protowire.Number(k))
	return v
}

// Reply is a stream message (a PromptResponse or WatchResponse) that the
// gateway's codecs write with its event's encodings, [Event.Proto] or
// [Event.JSON], rather than marshal the event again. It is itself the
// message, for whatever reads a stream's messages on the way.
type Reply struct {
	proto.Message
	// Event is the message's event, its only field; nil for a message
	// without one (a heartbeat).
	Event *Event
}

package merge

import (
	"github.com/acp-gateway/acp-gateway/internal/textcut"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/protowalk"
)

// Bounds: a State counts the bytes of its tool calls as a snapshot
// encodes them, and trims the oldest calls to what identifies them when
// they grow too large for one response. A trimmed call (ThinCall) keeps
// its tool_call_id, and its title, kind and status cut short; its
// content, locations, rawInput, rawOutput and extra are left out, and its
// meta is the marker {"acpGateway": {"trimmed": true}}.

// Lengths a trimmed call keeps of its strings, in bytes.
const (
	thinTitle = 256
	thinWord  = 64 // kind and status
)

// trimmedMarker is the meta of a trimmed call. It is shared, as every
// message of a State is, and never modified.
var trimmedMarker = &structpb.Struct{Fields: map[string]*structpb.Value{
	"acpGateway": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
		"trimmed": structpb.NewBoolValue(true),
	}}),
}}

// ThinCall returns tc trimmed: its id, its title, kind and status cut to
// 256, 64 and 64 bytes (control characters made spaces), and the marker
// meta {"acpGateway": {"trimmed": true}}. Its encoding, in protobuf or
// JSON, is at most about 0.7 and 1.4 KiB for an id of 256 bytes.
func ThinCall(tc *acpv2.ToolCall) *acpv2.ToolCall {
	return &acpv2.ToolCall{
		ToolCallId: tc.GetToolCallId(),
		Title:      clipText(tc.GetTitle(), thinTitle),
		Kind:       clipText(tc.GetKind(), thinWord),
		Status:     clipText(tc.GetStatus(), thinWord),
		Meta:       trimmedMarker,
	}
}

// IsThin reports whether tc is a trimmed call (its meta has the marker).
func IsThin(tc *acpv2.ToolCall) bool {
	gw := tc.GetMeta().GetFields()["acpGateway"].GetStructValue()
	return gw.GetFields()["trimmed"].GetBoolValue()
}

// clipText returns s cut to at most n bytes, on a character boundary,
// with its control characters made spaces, so that JSON writes each of
// its bytes as at most two.
func clipText(s string, n int) string {
	s = textcut.Prefix(s, n)
	b := []byte(nil)
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c == 0x7f {
			if b == nil {
				b = []byte(s)
			}
			b[i] = ' '
		}
	}
	if b != nil {
		return string(b)
	}
	return s
}

// Finished reports whether a tool-call status is final: completed or
// failed.
func Finished(status string) bool { return status == "completed" || status == "failed" }

// framed is the bytes a tool call whose encoding is n bytes takes in a
// snapshot's list of calls: its field's tag and length too.
func framed(n int) int { return 1 + protowire.SizeVarint(uint64(n)) + n }

// fieldStatus is the number of ToolCall's status field.
const fieldStatus = 4

// Encoded records that b is the protobuf encoding of call: the caller
// encoded it (for its event), and compacting the call keeps a copy of b
// rather than marshal it again; Bytes counts b's length. It does nothing
// for a call that is not the current version of its tool call. b must not
// be modified afterwards.
func (s *State) Encoded(call *acpv2.ToolCall, b []byte) {
	i, ok := s.index[call.GetToolCallId()]
	if !ok || s.calls[i].call != call {
		return
	}
	e := &s.calls[i]
	e.enc, e.encCall = b, call
	s.setSize(e, len(b))
}

// setSize records that e's call encodes in n bytes.
func (s *State) setSize(e *entry, n int) {
	f := framed(n)
	s.bytes += f - e.size
	e.size = f
}

// Bytes is the size of the State's tool calls in a snapshot (a
// SessionSnapshot's tool_calls field, as protobuf): each call as it was
// when last encoded (Encoded), restored or trimmed. A call applied and
// not encoded since counts as it was before.
func (s *State) Bytes() int { return s.bytes }

// ThinOldest trims the oldest tool calls whose status finished accepts,
// other than the call keep, until Bytes is at most target or none is
// left to trim, and returns the trimmed calls, which take the place of
// the others: a caller that stores the calls stores these.
func (s *State) ThinOldest(target int, keep string, finished func(status string) bool) []*acpv2.ToolCall {
	var out []*acpv2.ToolCall
	skip, kept := s.index[keep]
	for i := range s.calls {
		if s.bytes <= target {
			break
		}
		e := &s.calls[i]
		if e.thin || kept && i == skip || !finished(e.status()) {
			continue
		}
		thin := ThinCall(e.load(true))
		b, err := proto.Marshal(thin)
		if err != nil {
			continue // not valid UTF-8, which decoded calls always are
		}
		size := e.size
		*e = entry{wire: b, thin: true, size: size}
		s.setSize(e, len(b))
		out = append(out, thin)
	}
	return out
}

// status returns the status of e's call, read from its encoding when
// it is compacted.
func (e *entry) status() string {
	if e.call != nil || e.wire == nil {
		return e.call.GetStatus()
	}
	b, _ := protowalk.Bytes(e.wire, fieldStatus)
	return string(b)
}

// Fit returns calls as they fit in limit bytes of a response: calls
// itself, or a copy in which the oldest calls are trimmed (ThinCall), the
// finished ones first, until they do. size gives the bytes a call takes
// in the response's encoding, and fixed those of the rest of it. trimmed
// is the number of calls trimmed here.
func Fit(calls []*acpv2.ToolCall, limit, fixed int, size func(*acpv2.ToolCall) int) (out []*acpv2.ToolCall, trimmed int) {
	sizes := make([]int, len(calls))
	total := fixed
	for i, c := range calls {
		sizes[i] = size(c)
		total += sizes[i]
	}
	if total <= limit {
		return calls, 0
	}
	out = append([]*acpv2.ToolCall(nil), calls...)
	for _, finishedOnly := range []bool{true, false} {
		for i, c := range out {
			if total <= limit {
				return out, trimmed
			}
			if IsThin(c) || finishedOnly && !Finished(c.GetStatus()) {
				continue
			}
			out[i] = ThinCall(c)
			total += size(out[i]) - sizes[i]
			trimmed++
		}
	}
	return out, trimmed
}

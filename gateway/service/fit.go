package service

import (
	"net/http"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/acp-gateway/acp-gateway/gateway/merge"
	"github.com/acp-gateway/acp-gateway/gateway/sessionstate"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/eventjson"
)

// DefaultMaxResponseBytes is the largest response message (as the server's
// own default, server.DefaultSendMaxBytes): the snapshots GetSession and
// Watch send are made to fit in it.
const DefaultMaxResponseBytes = 16 << 20

// WithMaxResponseBytes sets the largest response message the server
// sends (server.Options.SendMaxBytes): a session snapshot larger than that,
// in the encoding its client asked for, has its oldest tool calls trimmed
// (merge.Fit) rather than fail the call. Zero or less means
// DefaultMaxResponseBytes.
func WithMaxResponseBytes(n int) Option { return func(s *Service) { s.maxResponse = n } }

// fitSlack is what the fitting leaves free of the response size for what
// it does not count exactly: the JSON list's brackets and commas, the
// field names around the snapshot.
const fitSlack = 4 << 10

// toolCallsField is the number of SessionSnapshot's tool_calls.
var toolCallsField = (&acpv2.SessionSnapshot{}).ProtoReflect().Descriptor().Fields().ByName("tool_calls").Number()

// jsonCodec reports whether a request's client reads JSON (Connect,
// gRPC or gRPC-Web, +json) rather than protobuf.
func jsonCodec(h http.Header) bool {
	return strings.Contains(h.Get("Content-Type"), "json")
}

// fit returns snap as it fits in a response to a client of the given
// encoding: snap itself, or a copy whose oldest tool calls are trimmed
// (finished ones first; each then has the meta {"acpGateway": {"trimmed":
// true}}), and whose state is cut (sessionstate.Thin) when it would take
// more than half the response. A session's calls are kept within a response as protobuf
// already (session.Options.MaxToolCallBytes); JSON takes more, as may a
// session stored by an older gateway.
func (s *Service) fit(snap *acpv2.SessionSnapshot, isJSON bool) *acpv2.SessionSnapshot {
	size := func(m proto.Message) int { return proto.Size(m) }
	callSize := func(tc *acpv2.ToolCall) int {
		return protowire.SizeTag(toolCallsField) + protowire.SizeBytes(proto.Size(tc))
	}
	if isJSON {
		size = func(m proto.Message) int {
			b, err := eventjson.Marshal(m)
			if err != nil {
				return s.maxResponse // not sent anyway: leave it to the codec
			}
			return len(b)
		}
		callSize = func(tc *acpv2.ToolCall) int { return size(tc) + 1 } // and a comma
	}
	limit := s.maxResponse - fitSlack
	// The snapshot as a whole first: most fit, and are measured once.
	if size(snap) <= limit {
		return snap
	}
	// A copy of all but the calls, sharing the fields' values.
	rest := &acpv2.SessionSnapshot{}
	snap.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Number() != toolCallsField {
			rest.ProtoReflect().Set(fd, v)
		}
		return true
	})
	// The session's state takes its share first only when it would take
	// more than half the response (a small --max-response-bytes; the
	// state alone is bounded by sessionstate.MaxBytes).
	fixed, thinned := size(rest), false
	if fixed > limit/2 {
		sessionstate.Thin(rest)
		fixed, thinned = size(rest), true
	}
	calls, trimmed := merge.Fit(snap.GetToolCalls(), limit, fixed, callSize)
	if trimmed == 0 && !thinned {
		return snap
	}
	rest.ToolCalls = calls
	return rest
}

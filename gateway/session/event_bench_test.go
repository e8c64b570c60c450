package session

import (
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	"github.com/acp-gateway/acp-gateway/gateway/merge"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/eventjson"
)

// benchEventUpdate is a typical tool-call update as an agent sends it: a
// status change with a diff, a location, raw output and _meta.
var benchEventUpdate = []byte(`{"sessionUpdate":"tool_call_update","toolCallId":"call_042","status":"completed",` +
	`"content":[{"type":"diff","path":"/home/user/project/src/config.json","oldText":"{\n  \"debug\": false\n}","newText":"{\n  \"debug\": true\n}"},` +
	`{"type":"content","content":{"type":"text","text":"Updated configuration: debug mode is now enabled for local runs."}}],` +
	`"locations":[{"path":"/home/user/project/src/config.json","line":2}],"rawOutput":{"ok":true,"bytes":27},` +
	`"_meta":{"trace":{"n":42,"t":"1712345678901234567"}}}`)

// benchEvents returns the two events the gateway makes of that update: the
// delta and the merged tool call, numbered and stamped as emitLocked does.
func benchEvents(b *testing.B) [2]*acpv2.SessionEvent {
	b.Helper()
	u, err := acpjson.DecodeUpdate(benchEventUpdate, acpjson.V2)
	if err != nil {
		b.Fatal(err)
	}
	merged, err := merge.New().ApplyUpdate(u.GetToolCallUpdate())
	if err != nil {
		b.Fatal(err)
	}
	evs := [2]*acpv2.SessionEvent{eventOf(u), {Event: &acpv2.SessionEvent_ToolCall{ToolCall: merged}}}
	for i, ev := range evs {
		ev.Seq = uint64(100 + i)
		ev.Time = nil
	}
	return evs
}

// BenchmarkEventMarshalProto encodes a typical update's two events, each in
// a PromptResponse, as the Connect and gRPC binary codecs do (once per
// stream that sends them).
func BenchmarkEventMarshalProto(b *testing.B) {
	benchMarshal(b, proto.MarshalOptions{}.MarshalAppend)
}

// BenchmarkEventMarshalProtoJSON encodes the same events with protojson,
// as the Connect JSON codec did before eventjson.
func BenchmarkEventMarshalProtoJSON(b *testing.B) {
	benchMarshal(b, protojson.MarshalOptions{}.MarshalAppend)
}

// BenchmarkEventMarshalEventJSON encodes the same events as the Connect
// JSON codec does: the same JSON as protojson's.
func BenchmarkEventMarshalEventJSON(b *testing.B) {
	benchMarshal(b, eventjson.MarshalAppend)
}

// benchMarshal encodes benchEvents, each in a PromptResponse, with
// marshalAppend.
func benchMarshal(b *testing.B, marshalAppend func([]byte, proto.Message) ([]byte, error)) {
	evs := benchEvents(b)
	var size int
	for _, ev := range evs {
		out, err := marshalAppend(nil, &acpv2.PromptResponse{Event: ev})
		if err != nil {
			b.Fatal(err)
		}
		size += len(out)
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	var buf []byte
	for b.Loop() {
		for _, ev := range evs {
			var err error
			if buf, err = marshalAppend(buf[:0], &acpv2.PromptResponse{Event: ev}); err != nil {
				b.Fatal(err)
			}
		}
	}
}

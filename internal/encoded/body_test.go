package encoded

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/testutil/protofill"
)

// updateOneof is SessionUpdate's oneof of update kinds.
var updateOneof = (&acpv2.SessionUpdate{}).ProtoReflect().Descriptor().Oneofs().ByName("update")

// bodyJSON are updates in JSON, in their usual shapes and their odd ones.
var bodyJSON = []string{
	`{"sessionUpdate":"tool_call_update","toolCallId":"c","title":"Edit","kind":"edit","status":"pending","locations":[{"path":"/p","line":4}],"rawInput":{"file":"/p","n":[1,2,{"x":null}]},"_meta":{"bench":{"n":1,"t":"17"}}}`,
	`{"sessionUpdate":"tool_call_update","toolCallId":"c","title":null,"kind":null,"status":null,"content":null,"locations":null,"rawInput":null,"rawOutput":null,"_meta":null}`,
	`{"sessionUpdate":"tool_call_update","toolCallId":"c","status":"completed","content":[{"type":"diff","path":"/p","oldText":"a","newText":"b"}],"rawOutput":"done","extraMember":{"k":true}}`,
	`{"sessionUpdate":"tool_call_update","toolCallId":"c","rawInput":7}`,
	`{"sessionUpdate":"tool_call_content_chunk","toolCallId":"c","content":{"type":"content","content":{"type":"text","text":"x","_meta":{"a":1}}},"_meta":{"b":{"c":[]}}}`,
	`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"},"messageId":"","_meta":{"bench":{"n":2}}}`,
	`{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"hmm"},"other":[1]}`,
	// Content items, locations and blocks, which appendMessage encodes.
	`{"sessionUpdate":"tool_call_update","toolCallId":"c","content":[{"type":"content","content":{"type":"text","text":"` + long + `"}},{"type":"diff","path":null,"oldText":"","newText":"` + long + long + `"},{"type":"terminal","terminalId":"t1","_meta":{"k":1}},{"type":"terminal","terminalId":""}],"locations":[{"path":"/p"},{"path":"","line":0,"_meta":{"a":"b"}},{"path":"/q","line":4294967295}]}`,
	`{"sessionUpdate":"tool_call_update","toolCallId":"c","title":"","content":[],"locations":[]}`,
	`{"sessionUpdate":"tool_call_update","toolCallId":"c","content":[{"type":"content","content":{"type":"image","data":"AAAA","mimeType":"image/png"}}]}`,
	`{"sessionUpdate":"tool_call_update","toolCallId":"c","content":[{"type":"content","content":{"type":"text","text":"x","annotations":{"priority":1}}}]}`,
	`{"sessionUpdate":"tool_call_update","toolCallId":"c","content":[{"type":"weird","k":1}]}`,
	`{"sessionUpdate":"tool_call_content_chunk","toolCallId":"c","content":{"type":"diff","path":"/p","newText":"` + long + `"}}`,
	`{"sessionUpdate":"tool_call_content_chunk","toolCallId":"c","content":{"type":"content","content":{"type":"text","text":""}}}`,
	`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"` + long + `","_meta":{"x":[true]}}}`,
	`{"sessionUpdate":"agent_message_chunk","content":{"type":"resource_link","name":"n","uri":"file:///n"}}`,
}

// bodyCases are update messages of the kinds appendUpdate encodes itself,
// in their usual shapes and their odd ones.
func bodyCases(t *testing.T) []proto.Message {
	t.Helper()
	var out []proto.Message
	for _, js := range bodyJSON {
		u, err := acpjson.DecodeUpdate([]byte(js), acpjson.V2)
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		m := u.ProtoReflect()
		out = append(out, m.Get(m.WhichOneof(updateOneof)).Message().Interface())
	}
	null := structpb.NullValue_NULL_VALUE
	out = append(out,
		&acpv2.ToolCallUpdate{ToolCallId: "c", Title: &acpv2.StringPatch{}, RawInput: &acpv2.ValuePatch{}, Meta: &acpv2.StructPatch{}},
		&acpv2.ToolCallUpdate{ToolCallId: "c", RawInput: &acpv2.ValuePatch{Op: &acpv2.ValuePatch_Clear{Clear: null}},
			Meta: &acpv2.StructPatch{Op: &acpv2.StructPatch_Clear{Clear: structpb.NullValue(3)}}},
		&acpv2.ToolCallContentChunk{ToolCallId: "c"},
		&acpv2.ContentChunk{},
		// Patches and items with nil values and unset oneofs.
		&acpv2.ToolCallUpdate{ToolCallId: "c",
			Title:     &acpv2.StringPatch{Op: &acpv2.StringPatch_Clear{Clear: null}},
			Kind:      &acpv2.StringPatch{Op: &acpv2.StringPatch_Value{Value: ""}},
			Content:   &acpv2.ToolCallContentPatch{Op: &acpv2.ToolCallContentPatch_Value{}},
			Locations: &acpv2.ToolCallLocationPatch{Op: &acpv2.ToolCallLocationPatch_Clear{Clear: structpb.NullValue(5)}}},
		&acpv2.ToolCallUpdate{ToolCallId: "c",
			Content:   &acpv2.ToolCallContentPatch{Op: &acpv2.ToolCallContentPatch_Clear{Clear: null}},
			Locations: &acpv2.ToolCallLocationPatch{Op: &acpv2.ToolCallLocationPatch_Value{}}},
		&acpv2.ToolCallUpdate{ToolCallId: "c", Content: &acpv2.ToolCallContentPatch{}, Locations: &acpv2.ToolCallLocationPatch{}},
		// A value patch set to a nil value: proto.Marshal writes an empty
		// message for it.
		&acpv2.ToolCallUpdate{ToolCallId: "c", RawInput: &acpv2.ValuePatch{Op: &acpv2.ValuePatch_Value{}},
			RawOutput: &acpv2.ValuePatch{Op: &acpv2.ValuePatch_Value{}}, Meta: &acpv2.StructPatch{Op: &acpv2.StructPatch_Value{}}},
		&acpv2.ToolCallUpdate{ToolCallId: "c", Content: contentPatch(
			&acpv2.ToolCallContent{},
			&acpv2.ToolCallContent{Item: &acpv2.ToolCallContent_Content{Content: &acpv2.ContentBlock{}}},
			&acpv2.ToolCallContent{Item: &acpv2.ToolCallContent_Diff{Diff: &acpv2.Diff{}}},
			&acpv2.ToolCallContent{Item: &acpv2.ToolCallContent_Terminal{Terminal: &acpv2.Terminal{}}},
			&acpv2.ToolCallContent{Item: &acpv2.ToolCallContent_Unknown{Unknown: &structpb.Struct{}}},
		)},
		&acpv2.ToolCallUpdate{ToolCallId: "c", Content: contentPatch(nil)},
		&acpv2.ToolCallUpdate{ToolCallId: "c", Content: contentPatch(&acpv2.ToolCallContent{Item: &acpv2.ToolCallContent_Diff{}})},
		&acpv2.ToolCallUpdate{ToolCallId: "c", Content: contentPatch(&acpv2.ToolCallContent{Item: &acpv2.ToolCallContent_Content{}})},
		&acpv2.ToolCallUpdate{ToolCallId: "c", Content: contentPatch(&acpv2.ToolCallContent{Item: &acpv2.ToolCallContent_Content{
			Content: &acpv2.ContentBlock{Block: &acpv2.ContentBlock_Text{}}}})},
		&acpv2.ToolCallUpdate{ToolCallId: "c", Locations: &acpv2.ToolCallLocationPatch{Op: &acpv2.ToolCallLocationPatch_Value{
			Value: &acpv2.ToolCallLocationList{Items: []*acpv2.ToolCallLocation{{}, nil}}}}},
		&acpv2.ToolCallContentChunk{ToolCallId: "c", Content: &acpv2.ToolCallContent{}},
		&acpv2.ContentChunk{Content: &acpv2.ContentBlock{}},
	)
	return out
}

// long is text whose field lengths take more than one byte.
var long = strings.Repeat("0123456789abcdef", 10)

func contentPatch(items ...*acpv2.ToolCallContent) *acpv2.ToolCallContentPatch {
	return &acpv2.ToolCallContentPatch{Op: &acpv2.ToolCallContentPatch_Value{Value: &acpv2.ToolCallContentList{Items: items}}}
}

// appendUpdate's encoding of an update decodes to it, and is proto.Marshal's
// where map order does not enter.
func TestUpdateBodyIsProtoMarshal(t *testing.T) {
	for i, m := range bodyCases(t) {
		got, err := appendUpdate([]byte("prefix"), m)
		if err != nil || !bytes.HasPrefix(got, []byte("prefix")) {
			t.Fatalf("case %d: %v", i, err)
		}
		got = got[len("prefix"):]
		back := m.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(got, back); err != nil || !proto.Equal(back, m) {
			t.Fatalf("case %d (%T): decodes to %v (%v), want %v", i, m, back, err, m)
		}
		if manyEntries(m.ProtoReflect()) {
			continue // maps of several members: proto.Marshal's order is random
		}
		if want, _ := proto.Marshal(m); !bytes.Equal(got, want) {
			t.Fatalf("case %d (%T): %x, proto.Marshal %x", i, m, got, want)
		}
	}
}

// What proto.Marshal refuses, appendUpdate refuses; what it does not
// encode itself it leaves to proto.Marshal.
func TestUpdateBodyRefusals(t *testing.T) {
	if _, err := appendUpdate(nil, &acpv2.ToolCallUpdate{ToolCallId: "bad \xff"}); err == nil {
		t.Fatal("an invalid UTF-8 id encoded")
	}
	bad := &acpv2.ContentChunk{Meta: &structpb.Struct{Fields: map[string]*structpb.Value{"k": structpb.NewStringValue("\xff")}}}
	if _, err := appendUpdate(nil, bad); err == nil {
		t.Fatal("an invalid UTF-8 _meta value encoded")
	}
	odd := &acpv2.ToolCallContentChunk{ToolCallId: "c", Meta: &structpb.Struct{Fields: map[string]*structpb.Value{"k": nil}}}
	got, err := appendUpdate(nil, odd)
	want, werr := proto.Marshal(odd)
	if (err == nil) != (werr == nil) || !bytes.Equal(got, want) {
		t.Fatalf("a nil Struct value: %x (%v), proto.Marshal %x (%v)", got, err, want, werr)
	}
	text := func(s string) *acpv2.ContentBlock {
		return &acpv2.ContentBlock{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: s}}}
	}
	item := func(c *acpv2.ContentBlock) *acpv2.ToolCallContent {
		return &acpv2.ToolCallContent{Item: &acpv2.ToolCallContent_Content{Content: c}}
	}
	bad8 := "bad \xff"
	for i, m := range []proto.Message{
		&acpv2.ToolCallUpdate{ToolCallId: "c", Title: &acpv2.StringPatch{Op: &acpv2.StringPatch_Value{Value: bad8}}},
		&acpv2.ToolCallUpdate{ToolCallId: "c", Content: contentPatch(item(text(bad8)))},
		&acpv2.ToolCallUpdate{ToolCallId: "c", Content: contentPatch(&acpv2.ToolCallContent{Item: &acpv2.ToolCallContent_Diff{Diff: &acpv2.Diff{NewText: &bad8}}})},
		&acpv2.ToolCallUpdate{ToolCallId: "c", Content: contentPatch(&acpv2.ToolCallContent{Item: &acpv2.ToolCallContent_Terminal{Terminal: &acpv2.Terminal{TerminalId: bad8}}})},
		&acpv2.ToolCallUpdate{ToolCallId: "c", Locations: &acpv2.ToolCallLocationPatch{Op: &acpv2.ToolCallLocationPatch_Value{
			Value: &acpv2.ToolCallLocationList{Items: []*acpv2.ToolCallLocation{{Path: bad8}}}}}},
		&acpv2.ToolCallContentChunk{ToolCallId: "c", Content: item(text(long + bad8))},
		&acpv2.ContentChunk{Content: text(bad8)},
		&acpv2.ContentChunk{Content: &acpv2.ContentBlock{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Meta: bad.Meta}}}},
	} {
		if _, err := appendUpdate(nil, m); err == nil {
			t.Errorf("case %d: invalid UTF-8 encoded: %v", i, m)
		}
	}
	// Unknown fields in a content item or block: proto.Marshal encodes
	// them.
	withUnknown := func(m proto.Message) {
		m.ProtoReflect().SetUnknown([]byte{0x98, 0x06, 0x01})
	}
	block := text("x")
	withUnknown(block.GetText())
	inner := item(text("y"))
	withUnknown(inner)
	loc := &acpv2.ToolCallLocation{Path: "/p"}
	withUnknown(loc)
	for i, m := range []proto.Message{
		&acpv2.ContentChunk{Content: block},
		&acpv2.ToolCallContentChunk{ToolCallId: "c", Content: inner},
		&acpv2.ToolCallUpdate{ToolCallId: "c", Content: contentPatch(item(block), inner), Locations: &acpv2.ToolCallLocationPatch{
			Op: &acpv2.ToolCallLocationPatch_Value{Value: &acpv2.ToolCallLocationList{Items: []*acpv2.ToolCallLocation{loc}}}}},
	} {
		got, err := appendUpdate(nil, m)
		want, werr := proto.Marshal(m)
		if err != nil || werr != nil || !bytes.Equal(got, want) {
			t.Errorf("case %d, unknown fields: %x (%v), proto.Marshal %x (%v)", i, got, err, want, werr)
		}
	}
	unknown := &acpv2.ToolCallUpdate{ToolCallId: "c"}
	unknown.ProtoReflect().SetUnknown([]byte{0x98, 0x06, 0x01})
	if got, err := appendUpdate(nil, unknown); err != nil || !bytes.HasSuffix(got, []byte{0x98, 0x06, 0x01}) {
		t.Fatalf("unknown fields: %x, %v", got, err)
	}
}

// manyEntries reports whether m holds a map of more than one entry.
func manyEntries(m protoreflect.Message) bool {
	found := false
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			found = v.Map().Len() > 1
			v.Map().Range(func(_ protoreflect.MapKey, e protoreflect.Value) bool {
				found = found || fd.MapValue().Message() != nil && manyEntries(e.Message())
				return !found
			})
		case fd.IsList() && fd.Message() != nil:
			for i := range v.List().Len() {
				found = found || manyEntries(v.List().Get(i).Message())
			}
		case fd.Message() != nil:
			found = manyEntries(v.Message())
		}
		return !found
	})
	return found
}

// FuzzUpdateBody: appendUpdate's encoding of any update the decoder makes
// decodes to it, and it fails where proto.Marshal does.
func FuzzUpdateBody(f *testing.F) {
	for _, js := range bodyJSON {
		f.Add([]byte(js), uint8(0))
		f.Add([]byte(js), uint8(1))
	}
	f.Fuzz(func(t *testing.T, data []byte, ver uint8) {
		u, err := acpjson.DecodeUpdate(data, acpjson.Version(1+ver%2))
		if err != nil {
			return
		}
		um := u.ProtoReflect()
		fd := um.WhichOneof(updateOneof)
		if fd == nil || fd.Message() == nil {
			return
		}
		m := um.Get(fd).Message().Interface()
		got, err := appendUpdate(nil, m)
		_, werr := proto.Marshal(m)
		if (err == nil) != (werr == nil) {
			t.Fatalf("%s: appendUpdate %v, proto.Marshal %v", data, err, werr)
		}
		if err != nil {
			return
		}
		back := m.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(got, back); err != nil || !proto.Equal(back, m) {
			t.Fatalf("%s: decodes to %v (%v), want %v", data, back, err, m)
		}
	})
}

// BenchmarkAppendUpdate encodes the updates of a tool call's life in the
// shapes the bench's agent sends: a content chunk, an update with an
// output item, one with a diff, a message chunk.
func BenchmarkAppendUpdate(b *testing.B) {
	text := strings.Repeat(long, 2)
	var msgs []proto.Message
	for _, js := range []string{
		`{"sessionUpdate":"tool_call_content_chunk","toolCallId":"call_1","content":{"type":"content","content":{"type":"text","text":"` + text + `"}},"_meta":{"bench":{"n":5,"t":"17"}}}`,
		`{"sessionUpdate":"tool_call_update","toolCallId":"call_1","content":[{"type":"content","content":{"type":"text","text":"` + text + `"}}],"_meta":{"bench":{"n":5,"t":"17"}}}`,
		`{"sessionUpdate":"tool_call_update","toolCallId":"call_1","status":"completed","content":[{"type":"diff","path":"/p/config.go","oldText":"` + text + text + `","newText":"` + text + text + `"}],"rawOutput":{"ok":true,"linesChanged":12}}`,
		`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"` + long + `"},"_meta":{"bench":{"n":3,"t":"17"}}}`,
	} {
		u, err := acpjson.DecodeUpdate([]byte(js), acpjson.V2)
		if err != nil {
			b.Fatal(err)
		}
		m := u.ProtoReflect()
		msgs = append(msgs, m.Get(m.WhichOneof(updateOneof)).Message().Interface())
	}
	b.ReportAllocs()
	var buf []byte
	for b.Loop() {
		for _, m := range msgs {
			var err error
			if buf, err = appendUpdate(buf[:0], m); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BodyOf encodes the message of every event variant, the commonest told
// apart without reflection, as proto.Marshal encodes it, and names its
// field; an event without a variant has no body. A variant whose message
// is nil encodes as the empty message, as proto.Marshal has it.
func TestBodyOfEveryVariant(t *testing.T) {
	t.Parallel()
	text := &acpv2.ContentBlock{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: "x\ty"}}}
	title := &acpv2.StringPatch{Op: &acpv2.StringPatch_Value{Value: "read"}}
	filled := map[string]proto.Message{
		"tool_call_update":        &acpv2.ToolCallUpdate{ToolCallId: "c", Title: title},
		"tool_call_content_chunk": &acpv2.ToolCallContentChunk{ToolCallId: "c"},
		"agent_message_chunk":     &acpv2.ContentChunk{Content: text},
		"agent_thought_chunk":     &acpv2.ContentChunk{Content: text},
		"tool_call":               &acpv2.ToolCall{ToolCallId: "c", Title: "read"},
	}
	fields := eventOneof.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.Message() == nil {
			continue
		}
		for _, filledIn := range []bool{false, true} {
			ev := &acpv2.SessionEvent{Seq: 3}
			msg := ev.ProtoReflect().NewField(fd)
			if m, ok := filled[string(fd.Name())]; ok && filledIn {
				msg = protoreflect.ValueOfMessage(m.ProtoReflect())
			}
			ev.ProtoReflect().Set(fd, msg)
			bd := BodyOf(ev)
			want, err := proto.Marshal(msg.Message().Interface())
			if err != nil {
				t.Fatal(err)
			}
			if !bd.room || bd.field != fd.Number() || !bytes.Equal(bd.Bytes(), want) {
				t.Errorf("%s (filled in %v): body %x, field %d; want %x, field %d", fd.Name(), filledIn, bd.Bytes(), bd.field, want, fd.Number())
			}
		}
	}
	// A variant set to a nil message: the type switch and reflection agree.
	for _, ev := range []*acpv2.SessionEvent{
		{Event: &acpv2.SessionEvent_ToolCallUpdate{}},
		{Event: &acpv2.SessionEvent_AgentMessageChunk{}},
	} {
		if bd := BodyOf(ev); bd.field == 0 || len(bd.Bytes()) != 0 {
			t.Errorf("%v: body %x, field %d; want the empty message's", ev, bd.Bytes(), bd.field)
		}
	}
	if bd := BodyOf(&acpv2.SessionEvent{Seq: 1}); bd.b != nil || bd.field != 0 {
		t.Errorf("an event without a variant has a body: %+v", bd)
	}
}

// Every field of every event reaches the event's encoding: the body
// (appendUpdate, which lists the fields of the commonest updates by hand)
// and the head written before it decode to the event, for events
// that set each field the descriptors name, so that a field added to the
// proto fails here until body.go encodes it, rather than being dropped
// from every stored and streamed event.
func TestEventEncodingKeepsEveryField(t *testing.T) {
	t.Parallel()
	for _, v := range protofill.Variants(&acpv2.SessionEvent{}) {
		ev := v.(*acpv2.SessionEvent)
		msg, num := eventMessage(ev)
		if num == 0 {
			continue // no event field: Numbered marshals it
		}
		bd := BodyOf(ev)
		if bd.b == nil {
			t.Fatalf("%v: no body", ev)
		}
		back := msg.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(bd.Bytes(), back); err != nil || !proto.Equal(back, msg) {
			t.Fatalf("appendUpdate (internal/encoded/body.go) loses %v of %v (%v): encode the field there, or leave its message to proto.Marshal",
				protofill.Lost(msg, back), msg, err)
		}
		wire, ok := withBodyIn(ev, bd.field, bd.b)
		if !ok {
			t.Fatalf("%v: no head", ev)
		}
		got := &acpv2.SessionEvent{}
		if err := proto.Unmarshal(wire, got); err != nil || !proto.Equal(got, ev) {
			t.Fatalf("withBodyIn (internal/encoded/head.go, head) loses %v of %v (%v): encode the field there", protofill.Lost(ev, got), ev, err)
		}
	}
}

// Numbered makes each event's encoding of its body where it has one, in
// the body's room, and marshals the others whole, counting them; an event
// that does not encode is made all the same, without bytes, and named by
// the error. Each Event has its event's seq and kind.
func TestNumbered(t *testing.T) {
	t.Parallel()
	text := &acpv2.ContentBlock{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: "x"}}}
	chunk := &acpv2.SessionEvent{Seq: 1, Event: &acpv2.SessionEvent_AgentMessageChunk{AgentMessageChunk: &acpv2.ContentChunk{Content: text}}}
	call := &acpv2.SessionEvent{Seq: 2, Event: &acpv2.SessionEvent_ToolCall{ToolCall: &acpv2.ToolCall{ToolCallId: "c"}}}
	ended := &acpv2.SessionEvent{Seq: 3, Event: &acpv2.SessionEvent_TurnEnded{TurnEnded: &acpv2.TurnEnded{StopReason: "end_turn"}}}
	bad := &acpv2.SessionEvent{Seq: 4, Event: &acpv2.SessionEvent_TurnEnded{TurnEnded: &acpv2.TurnEnded{StopReason: "\xff"}}}
	callWire, err := proto.Marshal(call.GetToolCall())
	if err != nil {
		t.Fatal(err)
	}
	chunkBody := BodyOf(chunk)
	room := chunkBody.b
	events := []*acpv2.SessionEvent{chunk, call, ended, bad}
	got, marshalled, err := Numbered(events, []Body{chunkBody, callBody(callWire, false, nil)})
	if marshalled != 2 || err == nil || !strings.Contains(err.Error(), "event 4") {
		t.Fatalf("marshalled %d, err %v; want the last two marshalled, the fourth refused", marshalled, err)
	}
	for i, e := range got[:3] {
		back := &acpv2.SessionEvent{}
		if err := proto.Unmarshal(e.Proto(), back); err != nil || !proto.Equal(back, events[i]) {
			t.Errorf("event %d decodes to %v (%v)", i+1, back, err)
		}
		if want := Kind(events[i].ProtoReflect().WhichOneof(eventOneof).Number()); e.Seq() != uint64(i+1) || e.Kind() != want {
			t.Errorf("event %d: seq %d, kind %v; want kind %v", i+1, e.Seq(), e.Kind(), want)
		}
	}
	if p := got[0].Proto(); &p[len(p)-1] != &room[len(room)-1] {
		t.Error("the first event's encoding is not in its body's room")
	}
	if got[3].Proto() != nil || got[3].Seq() != 4 {
		t.Errorf("the event that does not encode: %x, seq %d", got[3].Proto(), got[3].Seq())
	}
}

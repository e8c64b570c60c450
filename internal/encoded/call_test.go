package encoded_test

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/acp-gateway/acp-gateway/gateway/merge"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/encoded"
)

// Patches and items, as the updates that make tool calls carry them.
func strVal(s string) *acpv2.StringPatch {
	return &acpv2.StringPatch{Op: &acpv2.StringPatch_Value{Value: s}}
}
func valueVal(v *structpb.Value) *acpv2.ValuePatch {
	return &acpv2.ValuePatch{Op: &acpv2.ValuePatch_Value{Value: v}}
}
func metaVal(s *structpb.Struct) *acpv2.StructPatch {
	return &acpv2.StructPatch{Op: &acpv2.StructPatch_Value{Value: s}}
}
func loc(path string, line uint32) *acpv2.ToolCallLocation {
	return &acpv2.ToolCallLocation{Path: path, Line: &line}
}
func contentVal(items ...*acpv2.ToolCallContent) *acpv2.ToolCallContentPatch {
	return &acpv2.ToolCallContentPatch{Op: &acpv2.ToolCallContentPatch_Value{Value: &acpv2.ToolCallContentList{Items: items}}}
}
func locVal(items ...*acpv2.ToolCallLocation) *acpv2.ToolCallLocationPatch {
	return &acpv2.ToolCallLocationPatch{Op: &acpv2.ToolCallLocationPatch_Value{Value: &acpv2.ToolCallLocationList{Items: items}}}
}
func textItem(s string) *acpv2.ToolCallContent {
	return &acpv2.ToolCallContent{Item: &acpv2.ToolCallContent_Content{Content: &acpv2.ContentBlock{
		Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{Text: s}}}}}
}

// encode returns the encoding Calls.Body makes of tc, failing the test
// when it makes none.
func encode(t *testing.T, c *encoded.Calls, tc *acpv2.ToolCall, parts *encoded.Parts) []byte {
	t.Helper()
	b := c.Body(tc, parts).Bytes()
	if b == nil {
		t.Fatalf("no encoding of %v", tc)
	}
	return b
}

// fieldRecords returns the records of field num in a ToolCall's encoding.
func fieldRecords(t *testing.T, wire []byte, num protowire.Number) [][]byte {
	t.Helper()
	var out [][]byte
	for len(wire) > 0 {
		n, typ, tagLen := protowire.ConsumeTag(wire)
		if tagLen < 0 {
			t.Fatalf("bad tag: %v", protowire.ParseError(tagLen))
		}
		valLen := protowire.ConsumeFieldValue(n, typ, wire[tagLen:])
		if valLen < 0 {
			t.Fatalf("bad field %d: %v", n, protowire.ParseError(valLen))
		}
		if n == num {
			out = append(out, wire[:tagLen+valLen])
		}
		wire = wire[tagLen+valLen:]
	}
	return out
}

// shuffledValue returns an object of eight members, whose map entries
// proto.Marshal writes in a new random order each time.
func shuffledValue(t *testing.T) *structpb.Value {
	t.Helper()
	input := map[string]any{}
	for i := range 8 {
		input[fmt.Sprint("key", i)] = fmt.Sprint("value ", i)
	}
	raw, err := structpb.NewValue(input)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// The next version of a tool call reuses the encoding of the fields it
// shares with the one before: rawInput's map entries, which proto.Marshal
// writes in a new random order each time, stay in the same order across
// updates that leave rawInput alone, and the content items chunks appended
// before stay as they were.
func TestCallsReuseUnchangedFields(t *testing.T) {
	t.Parallel()
	raw := shuffledValue(t)
	s, c := merge.New(), &encoded.Calls{}
	first, err := s.ApplyUpdate(&acpv2.ToolCallUpdate{ToolCallId: "c", Title: strVal("Edit"), RawInput: valueVal(raw)})
	if err != nil {
		t.Fatal(err)
	}
	wire := encode(t, c, first, nil)
	input0 := fieldRecords(t, wire, 7)
	var items [][]byte
	for i := range 5 {
		var tc *acpv2.ToolCall
		if i%2 == 0 {
			tc, err = s.ApplyChunk(&acpv2.ToolCallContentChunk{ToolCallId: "c", Content: textItem(fmt.Sprint("chunk ", i))})
		} else {
			tc, err = s.ApplyUpdate(&acpv2.ToolCallUpdate{ToolCallId: "c", Status: strVal(fmt.Sprint("step ", i))})
		}
		if err != nil {
			t.Fatal(err)
		}
		wire = encode(t, c, tc, nil)
		if got := fieldRecords(t, wire, 7); len(got) != 1 || !bytes.Equal(got[0], input0[0]) {
			t.Fatalf("update %d: rawInput encoded again", i)
		}
		got := fieldRecords(t, wire, 5)
		for j, it := range items {
			if !bytes.Equal(got[j], it) {
				t.Fatalf("update %d: content item %d encoded again", i, j)
			}
		}
		items = got
		back := &acpv2.ToolCall{}
		if err := proto.Unmarshal(wire, back); err != nil || !proto.Equal(back, tc) {
			t.Fatalf("update %d: decodes to %v (%v)", i, back, err)
		}
	}
}

// A tool call proto.Marshal refuses (a string that is not UTF-8) is
// refused by Calls.Body too.
func TestCallsRefuseWhatProtoRefuses(t *testing.T) {
	t.Parallel()
	s := merge.New()
	tc, err := s.ApplyUpdate(&acpv2.ToolCallUpdate{ToolCallId: "c", Title: strVal("bad \xff")})
	if err != nil {
		t.Fatal(err)
	}
	if _, want := proto.Marshal(tc); want == nil {
		t.Fatal("proto.Marshal took invalid UTF-8")
	}
	if b := new(encoded.Calls).Body(tc, nil).Bytes(); b != nil {
		t.Fatal("Calls.Body encoded a title that is not UTF-8")
	}
}

// Calls.Body takes the encodings of the new values from the update that
// brought them: rawInput's map entries come in the order of the update's own
// encoding (a fresh marshal shuffles them), and so does a chunk's item.
func TestCallsTakeTheUpdatesParts(t *testing.T) {
	t.Parallel()
	raw := shuffledValue(t)
	messageOf := func(record []byte) []byte {
		_, _, n := protowire.ConsumeTag(record)
		v, _ := protowire.ConsumeBytes(record[n:])
		return v
	}
	for round := range 5 {
		s, calls := merge.New(), &encoded.Calls{}
		u := &acpv2.ToolCallUpdate{ToolCallId: "c", RawInput: valueVal(raw)}
		_, uw, wire := applyWire(t, s, calls, u)
		inUpdate := messageOf(fieldRecords(t, messageOf(fieldRecords(t, uw, 7)[0]), 2)[0])
		if got := messageOf(fieldRecords(t, wire, 7)[0]); !bytes.Equal(got, inUpdate) {
			t.Fatalf("round %d: rawInput encoded again, not taken from the update", round)
		}

		c := &acpv2.ToolCallContentChunk{ToolCallId: "c", Content: &acpv2.ToolCallContent{
			Item: &acpv2.ToolCallContent_Content{Content: &acpv2.ContentBlock{Block: &acpv2.ContentBlock_Text{Text: &acpv2.TextContent{
				Text: "out", Meta: raw.GetStructValue()}}}}}}
		cw, err := proto.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		tc, err := s.ApplyChunk(c)
		if err != nil {
			t.Fatal(err)
		}
		wire = encode(t, calls, tc, encoded.ChunkParts(c, cw))
		if got := messageOf(fieldRecords(t, wire, 5)[0]); !bytes.Equal(got, messageOf(fieldRecords(t, cw, 2)[0])) {
			t.Fatalf("round %d: the chunk's item encoded again, not taken from the chunk", round)
		}
	}
}

// A tool call of many content items and locations, more than the parts
// kept inline: each version decodes to the call, and the next reuses
// every item's and location's record of the one before (their _meta
// maps would come in a new order if marshalled again).
func TestCallsManyParts(t *testing.T) {
	t.Parallel()
	meta := shuffledValue(t).GetStructValue()
	var items []*acpv2.ToolCallContent
	for i := range 6 {
		item := textItem(fmt.Sprint("item ", i))
		item.Meta = meta
		items = append(items, item)
	}
	var locs []*acpv2.ToolCallLocation
	for i := range 4 {
		l := loc(fmt.Sprint("/p", i), uint32(i))
		l.Meta = meta
		locs = append(locs, l)
	}
	s, c := merge.New(), &encoded.Calls{}
	var prev []byte
	for i, u := range []*acpv2.ToolCallUpdate{
		{ToolCallId: "c", Content: contentVal(items...), Locations: locVal(locs...),
			RawInput: valueVal(structpb.NewStringValue("in")), RawOutput: valueVal(structpb.NewBoolValue(true)), Meta: metaVal(meta)},
		{ToolCallId: "c", Status: strVal("completed")},
		{ToolCallId: "c", Title: strVal("t")},
	} {
		tc, _, wire := applyWire(t, s, c, u)
		back := &acpv2.ToolCall{}
		if err := proto.Unmarshal(wire, back); err != nil || !proto.Equal(back, tc) {
			t.Fatalf("version %d decodes to %v (%v), want %v", i, back, err, tc)
		}
		for _, num := range []protowire.Number{5, 6, 7, 8, 14} {
			if got, want := fieldRecords(t, wire, num), fieldRecords(t, prev, num); prev != nil && !slices.EqualFunc(got, want, bytes.Equal) {
				t.Fatalf("version %d: field %d encoded again, not reused", i, num)
			}
		}
		prev = wire
	}
}

// applyWire applies u to s, and returns the call, u's encoding and the
// call's, made by c with u's parts.
func applyWire(t *testing.T, s *merge.State, c *encoded.Calls, u *acpv2.ToolCallUpdate) (tc *acpv2.ToolCall, uw, wire []byte) {
	t.Helper()
	uw, err := proto.Marshal(u)
	if err != nil {
		t.Fatal(err)
	}
	if tc, err = s.ApplyUpdate(u); err != nil {
		t.Fatal(err)
	}
	return tc, uw, encode(t, c, tc, encoded.UpdateParts(u, uw))
}

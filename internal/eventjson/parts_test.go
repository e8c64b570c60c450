package eventjson

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

var toolCallDesc = (&acpv2.ToolCall{}).ProtoReflect().Descriptor()

// sameAsMarshal fails the test unless MarshalReusing's JSON and error are
// Marshal's, byte for byte, and returns its parts.
func sameAsMarshal(t *testing.T, m proto.Message, of protoreflect.MessageDescriptor, prev *Parts) *Parts {
	t.Helper()
	want, wantErr := Marshal(m)
	segs, parts, err := MarshalReusing(m, of, prev)
	got := bytes.Join(segs, nil)
	if fmt.Sprint(err) != fmt.Sprint(wantErr) || !bytes.Equal(got, want) {
		t.Fatalf("MarshalReusing gives %s (%v), Marshal %s (%v)", got, err, want, wantErr)
	}
	return parts
}

// Every message of the other tests, written by parts at its top and at a
// tool call, with no parts before, with its own (every part reused) and
// with a copy's (none reused), is written as Marshal writes it.
func TestMarshalReusingIsMarshal(t *testing.T) {
	var msgs []proto.Message
	msgs = append(msgs, tableEvents(t)...)
	for _, m := range goMessages() {
		msgs = append(msgs, m)
	}
	for _, m := range fallbackMessages(t) {
		msgs = append(msgs, m)
	}
	for _, m := range msgs {
		ofs := []protoreflect.MessageDescriptor{toolCallDesc}
		if m != nil {
			ofs = append(ofs, m.ProtoReflect().Descriptor())
		}
		for _, of := range ofs {
			parts := sameAsMarshal(t, m, of, nil)
			sameAsMarshal(t, m, of, parts)
			if m != nil && m.ProtoReflect().IsValid() {
				sameAsMarshal(t, proto.Clone(m), of, parts)
			}
		}
	}
}

// randomText returns a string of up to n bytes with characters JSON
// escapes and some that are not ASCII.
func randomText(r *rand.Rand, n int) string {
	const alphabet = "abc xyz\"\\\n\t\x01\x1f/<>&é日😀\u2028"
	runes := []rune(alphabet)
	var b strings.Builder
	for b.Len() < n {
		b.WriteRune(runes[r.IntN(len(runes))])
	}
	return b.String()
}

// randomValue returns a JSON value of every kind, nested up to depth.
func randomValue(r *rand.Rand, depth int) *structpb.Value {
	k := r.IntN(6)
	if depth <= 0 {
		k %= 4
	}
	switch k {
	case 0:
		return structpb.NewNullValue()
	case 1:
		return structpb.NewBoolValue(r.IntN(2) == 0)
	case 2:
		return structpb.NewNumberValue([]float64{0, -1, 0.1, 1e21, 1e-7, r.NormFloat64() * 1e6}[r.IntN(6)])
	case 3:
		return structpb.NewStringValue(randomText(r, r.IntN(40)))
	case 4:
		return structpb.NewStructValue(randomStruct(r, depth-1))
	default:
		l := &structpb.ListValue{}
		for range r.IntN(4) {
			l.Values = append(l.Values, randomValue(r, depth-1))
		}
		return structpb.NewListValue(l)
	}
}

func randomStruct(r *rand.Rand, depth int) *structpb.Struct {
	s := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for range r.IntN(5) {
		s.Fields[randomText(r, 6)] = randomValue(r, depth)
	}
	return s
}

// randomItem returns a content item of each kind, with _meta at times.
func randomItem(r *rand.Rand) *acpv2.ToolCallContent {
	item := &acpv2.ToolCallContent{}
	switch r.IntN(4) {
	case 0:
		item.Item = &acpv2.ToolCallContent_Content{Content: &acpv2.ContentBlock{Block: &acpv2.ContentBlock_Text{
			Text: &acpv2.TextContent{Text: randomText(r, r.IntN(300))}}}}
	case 1:
		item.Item = &acpv2.ToolCallContent_Diff{Diff: &acpv2.Diff{Path: proto.String(randomText(r, 20)),
			OldText: proto.String(randomText(r, r.IntN(600))), NewText: proto.String(randomText(r, r.IntN(600)))}}
	case 2:
		item.Item = &acpv2.ToolCallContent_Terminal{Terminal: &acpv2.Terminal{TerminalId: randomText(r, 8)}}
	default:
		item.Item = &acpv2.ToolCallContent_Unknown{Unknown: randomStruct(r, 2)}
	}
	if r.IntN(3) == 0 {
		item.Meta = randomStruct(r, 1)
	}
	return item
}

// nextVersion returns a version of c after a random change, sharing
// every message it did not change with c, as merged calls do.
func nextVersion(r *rand.Rand, c *acpv2.ToolCall) *acpv2.ToolCall {
	n := &acpv2.ToolCall{ToolCallId: c.ToolCallId, Title: c.Title, Kind: c.Kind, Status: c.Status,
		Content: c.Content, Locations: c.Locations, RawInput: c.RawInput, RawOutput: c.RawOutput,
		Meta: c.Meta, Extra: c.Extra}
	switch r.IntN(9) {
	case 0:
		n.Status = randomText(r, 10)
	case 1, 2: // a chunk
		n.Content = append(c.Content[:len(c.Content):len(c.Content)], randomItem(r))
	case 3:
		n.Content = nil
		for range r.IntN(4) {
			n.Content = append(n.Content, randomItem(r))
		}
	case 4:
		n.Locations = nil
		for range r.IntN(3) {
			l := &acpv2.ToolCallLocation{Path: randomText(r, 12)}
			if r.IntN(2) == 0 {
				l.Line = proto.Uint32(r.Uint32())
			}
			n.Locations = append(n.Locations, l)
		}
	case 5:
		n.RawInput = randomValue(r, 3)
	case 6:
		n.RawOutput = randomValue(r, 3)
	case 7:
		n.Meta = randomStruct(r, 2)
	default:
		n.Extra = randomStruct(r, 1)
	}
	if r.IntN(8) == 0 {
		n.Title = randomText(r, 16)
	}
	if r.IntN(30) == 0 {
		n.Title = "not UTF-8 \xff" // left to protojson, until the next title
	}
	return n
}

// Randomised versions of tool calls, each made from the one before by a
// change and sharing the rest, are written as Marshal writes them, whichever
// version's parts are reused: the one before, the first, one after.
func TestMarshalReusingVersions(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 11))
	for range 50 {
		call := &acpv2.ToolCall{ToolCallId: "c"}
		var versions []*acpv2.SessionEvent
		for i := range 40 {
			call = nextVersion(r, call)
			versions = append(versions, &acpv2.SessionEvent{Seq: uint64(i + 1), Event: &acpv2.SessionEvent_ToolCall{ToolCall: call}})
		}
		var all []*Parts
		var prev *Parts
		for _, ev := range versions {
			prev = sameAsMarshal(t, ev, toolCallDesc, prev)
			all = append(all, prev)
		}
		for i, ev := range versions {
			sameAsMarshal(t, ev, toolCallDesc, all[r.IntN(len(all))])
			sameAsMarshal(t, ev, toolCallDesc, all[min(i+1, len(all)-1)])
		}
	}
}

// The parts a version shares with the one before are the JSON written
// before, not written again; those it changed are written.
func TestMarshalReusingCopiesSharedParts(t *testing.T) {
	meta := &structpb.Struct{Fields: map[string]*structpb.Value{"n": structpb.NewNumberValue(1)}}
	first := &acpv2.ToolCall{ToolCallId: "c", Status: "pending",
		Content:  []*acpv2.ToolCallContent{{Item: &acpv2.ToolCallContent_Terminal{Terminal: &acpv2.Terminal{TerminalId: "a"}}}},
		RawInput: structpb.NewStringValue("in"), Meta: meta}
	_, parts, err := MarshalReusing(first, toolCallDesc, nil)
	if err != nil || parts.Len() != 3 {
		t.Fatalf("parts %d (%v), want the item, rawInput and _meta", parts.Len(), err)
	}
	// Mark each part's JSON, as if written differently before.
	marked := &Parts{of: parts.of}
	for i, p := range parts.parts {
		p.json = fmt.Appendf(nil, `{"marked":%d}`, i)
		marked.parts = append(marked.parts, p)
	}
	next := &acpv2.ToolCall{ToolCallId: "c", Status: "completed",
		Content:  append(first.Content[:1:1], &acpv2.ToolCallContent{Item: &acpv2.ToolCallContent_Terminal{Terminal: &acpv2.Terminal{TerminalId: "b"}}}),
		RawInput: first.RawInput, Meta: &structpb.Struct{}}
	segs, _, err := MarshalReusing(next, toolCallDesc, marked)
	got := bytes.Join(segs, nil)
	want := `{"toolCallId":"c","status":"completed","content":[{"marked":0},{"terminal":{"terminalId":"b"}}],"rawInput":{"marked":1},"meta":{}}`
	if err != nil || string(got) != want {
		t.Fatalf("got %s (%v), want %s", got, err, want)
	}
}

package eventjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// rawInput is a tool call's input of every kind of JSON value: nested
// lists and objects, null, booleans, numbers that protojson writes in
// either form, and strings that need escapes, or look as if they did.
const rawInput = `{
	"command": "go test -run 'Test\"Quoted\"' ./...",
	"path": "C:\\Users\\dev\\file.go",
	"controls": "\u0000\u0001\b\f\n\r\t\u001f\u007f end",
	"separators": "line\u2028para\u2029",
	"text": "ünïcödé 日本語 😀 \ufffd <tag> & 'single'",
	"": "empty key",
	"numbers": [0, -0, 1, -1, 0.1, 1e21, 1e-7, 1e-6, 123456789012345678, 9007199254740993, 1.7976931348623157e308, 5e-324, -2.5e-10, 1e20, 999999999999999999999],
	"nested": {"list": [[], {}, [null, true, false], {"z": {"y": [1, "2", {"x": null}]}}], "null": null},
	"flags": [true, false],
	"esc\"aped\\key\n": "v"
}`

// tableMessages are messages of each kind the gateway sends, written as
// protojson reads them, with their names for failures.
var tableMessages = []struct {
	name string
	msg  proto.Message
	js   string
}{
	{"agent message chunk", &acpv2.SessionEvent{}, `{"seq":"1","time":"2026-01-02T03:04:05Z","agentMessageChunk":{"content":{"text":{"text":"hello, world"}},"messageId":"","meta":{"b":1,"a":[true,null,"s"]}}}`},
	{"user message chunk, image", &acpv2.SessionEvent{}, `{"seq":"2","time":"2026-01-02T03:04:05.678Z","userMessageChunk":{"content":{"image":{"data":"aGVsbG8=","mimeType":"image/png","uri":"","annotations":{"audience":["user","assistant"],"lastModified":"","priority":0}}}}}`},
	{"thought chunk, resource link", &acpv2.SessionEvent{}, `{"seq":"3","time":"2026-01-02T03:04:05.678900Z","agentThoughtChunk":{"content":{"resourceLink":{"name":"n","uri":"file:///x","title":"","description":"d","mimeType":"text/plain","size":"0"}},"messageId":"m1"}}`},
	{"resource link, negative size", &acpv2.SessionEvent{}, `{"seq":"4","time":"2026-01-02T03:04:05.000000001Z","agentThoughtChunk":{"content":{"resourceLink":{"name":"n","uri":"u","size":"-9223372036854775808","annotations":{"priority":-1.5e-300}}}}}`},
	{"tool call update, patches", &acpv2.SessionEvent{}, `{"seq":"5","toolCallUpdate":{"toolCallId":"t1","title":{"value":"Edit"},"kind":{"clear":null},"status":{"value":""},"content":{"value":{"items":[{"content":{"text":{"text":"out"}}},{"diff":{"path":"a.go","oldText":"","newText":"x"}}]}},"locations":{"clear":null},"rawInput":{"value":` + rawInput + `},"rawOutput":{"clear":null},"meta":{"value":{}},"extra":{}}}`},
	{"tool call update, empty patches", &acpv2.SessionEvent{}, `{"seq":"6","toolCallUpdate":{"toolCallId":"t1","title":{},"content":{"value":{}},"locations":{"value":{"items":[{"path":"p","line":0}]}},"rawInput":{"value":null},"rawOutput":{"value":"text"},"meta":{"clear":null}}}`},
	{"tool call content chunk", &acpv2.SessionEvent{}, `{"seq":"7","toolCallContentChunk":{"toolCallId":"t2","content":{"terminal":{"terminalId":"term"},"meta":{"k":[]}}}}`},
	{"plan", &acpv2.SessionEvent{}, `{"seq":"8","plan":{"entries":[{"content":"step 1","priority":"high","status":"pending"},{}]}}`},
	{"plan update, items", &acpv2.SessionEvent{}, `{"seq":"9","planUpdate":{"plan":{"items":{"planId":"p","entries":[{"content":"c"}]}}}}`},
	{"plan update, unknown", &acpv2.SessionEvent{}, `{"seq":"10","planUpdate":{"plan":{"unknown":{"kind":"future","n":3}}}}`},
	{"available commands", &acpv2.SessionEvent{}, `{"seq":"11","availableCommandsUpdate":{"availableCommands":[{"name":"web","description":"Search","input":{"hint":"query"}},{"name":"plain"}]}}`},
	{"current mode", &acpv2.SessionEvent{}, `{"seq":"12","currentModeUpdate":{"currentModeId":"code"}}`},
	{"config options", &acpv2.SessionEvent{}, `{"seq":"13","configOptionUpdate":{"configOptions":[{"id":"a","name":"A","category":"","type":"bool","currentValue":false},{"id":"b","currentValue":0},{"id":"c","currentValue":null},{"id":"d","currentValue":"s"},{"id":"e","currentValue":[1,{"x":[]}]},{"id":"f","currentValue":{}}]}}`},
	{"session info", &acpv2.SessionEvent{}, `{"seq":"14","sessionInfoUpdate":{"title":{"value":"T"},"updatedAt":{"clear":null}}}`},
	{"usage", &acpv2.SessionEvent{}, `{"seq":"15","usageUpdate":{"used":"0","size":"18446744073709551615","cost":{"amount":-0,"currency":"USD"},"inputTokens":"12","outputTokens":"0"}}`},
	{"usage, special doubles", &acpv2.SessionEvent{}, `{"seq":"16","usageUpdate":{"cost":{"amount":"NaN"}}}`},
	{"usage, infinite cost", &acpv2.SessionEvent{}, `{"seq":"17","usageUpdate":{"cost":{"amount":"-Infinity","meta":{"i":1e21}}}}`},
	{"user message", &acpv2.SessionEvent{}, `{"seq":"18","userMessage":{"messageId":"m","content":{"value":{"items":[{"text":{"text":"hi"}},{"audio":{"data":"AAAA","mimeType":"audio/wav"}}]}}}}`},
	{"agent message, cleared", &acpv2.SessionEvent{}, `{"seq":"19","agentMessage":{"messageId":"m","content":{"clear":null}}}`},
	{"agent thought", &acpv2.SessionEvent{}, `{"seq":"20","agentThought":{"content":{"value":{"items":[]}}}}`},
	{"state update", &acpv2.SessionEvent{}, `{"seq":"21","stateUpdate":{"state":"idle","stopReason":""}}`},
	{"terminal update", &acpv2.SessionEvent{}, `{"seq":"22","terminalUpdate":{"terminalId":"t","command":{"value":"ls"},"cwd":{"clear":null},"output":{"value":{"text":"a\nb"}},"exitStatus":{"clear":null}}}`},
	{"terminal output", &acpv2.SessionEvent{}, `{"seq":"23","terminalOutputChunk":{"terminalId":"t","data":"\u001b[31mred\u001b[0m\r\n\ttab"}}`},
	{"unknown update", &acpv2.SessionEvent{}, `{"seq":"24","unknown":{"sessionUpdate":"future_kind","body":{"a":1}}}`},
	{"tool call", &acpv2.SessionEvent{}, `{"seq":"25","time":"0001-01-01T00:00:00Z","toolCall":{"toolCallId":"t3","title":"Run","kind":"execute","status":"in_progress","content":[{"content":{"text":{"text":"output"}}},{"diff":{"path":"main.go","oldText":"a","newText":"b"}},{"terminal":{"terminalId":"x"}},{"unknown":{"u":true}}],"locations":[{"path":"main.go","line":42},{"path":"other.go"}],"rawInput":` + rawInput + `,"rawOutput":"done","meta":{"m":1},"extra":{"e":"x"}}}`},
	{"tool call, list input", &acpv2.SessionEvent{}, `{"seq":"26","time":"9999-12-31T23:59:59.999999999Z","toolCall":{"toolCallId":"t4","rawInput":[1,2,3],"rawOutput":false}}`},
	{"permission request", &acpv2.SessionEvent{}, `{"seq":"27","permissionRequest":{"requestId":"r","toolCall":{"toolCallId":"t"},"preview":{"toolCallId":"t","title":"x"},"options":[{"optionId":"o","name":"Allow","kind":"allow_once"}],"title":"May I?","meta":{}}}`},
	{"permission resolved", &acpv2.SessionEvent{}, `{"seq":"28","permissionResolved":{"requestId":"r","outcome":{"selectedOptionId":"o"}}}`},
	{"permission cancelled", &acpv2.SessionEvent{}, `{"seq":"29","permissionResolved":{"requestId":"r","outcome":{"cancelled":false}}}`},
	{"turn started", &acpv2.SessionEvent{}, `{"seq":"30","turnStarted":{"prompt":[{"text":{"text":"do it"}},{"resource":{"textResource":{"uri":"u","text":"t","mimeType":""},"annotations":{}}},{"resource":{"blobResource":{"uri":"u","blob":"AAE="}}},{"unknown":{}}]}}`},
	{"turn ended", &acpv2.SessionEvent{}, `{"seq":"31","turnEnded":{"stopReason":"end_turn","reason":"STOP_REASON_END_TURN"}}`},
	{"turn ended, unknown reason", &acpv2.SessionEvent{}, `{"seq":"32","turnEnded":{"reason":99,"error":"boom"}}`},
	{"snapshot", &acpv2.SessionEvent{}, `{"seq":"33","snapshot":{"sessionId":"s","toolCalls":[{"toolCallId":"t","rawInput":{"a":[]}}],"agent":"claude","cwd":"/w","lastSeq":"18446744073709551615","createdAt":"1970-01-01T00:00:00.100Z","state":"ready"}}`},
	{"state changed", &acpv2.SessionEvent{}, `{"seq":"34","time":"1969-12-31T23:59:59.999Z","stateChanged":{"state":"closed","detail":"bye"}}`},
	{"empty tool call", &acpv2.SessionEvent{}, `{"toolCall":{}}`},
	{"seq only", &acpv2.SessionEvent{}, `{"seq":"18446744073709551615"}`},
	{"empty event", &acpv2.SessionEvent{}, `{}`},
	{"watch response", &acpv2.WatchResponse{}, `{"event":{"seq":"1","turnEnded":{}},"heartbeat":"2026-05-06T07:08:09.123456789Z"}`},
	{"prompt response", &acpv2.PromptResponse{}, `{"heartbeat":"2026-05-06T07:08:09.120Z"}`},
	{"get session", &acpv2.GetSessionResponse{}, `{"session":{"sessionId":"s","lastSeq":"7","toolCalls":[{"toolCallId":"t","content":[{"diff":{"newText":""}}]}]}}`},
	{"list sessions", &acpv2.ListSessionsResponse{}, `{"sessions":[{"sessionId":"a","createdAt":"2026-01-01T00:00:00.000001Z"},{}]}`},
	{"set config option", &acpv2.SetConfigOptionRequest{}, `{"sessionId":"s","configId":"c","boolean":false}`},
	{"config options response", &acpv2.SetConfigOptionResponse{}, `{"configOptions":[{"id":"x","currentValue":1.5}]}`},
	{"prompt request", &acpv2.PromptRequest{}, `{"sessionId":"s","prompt":[{"text":{"text":"x","annotations":{"priority":"Infinity"}}}]}`},
	{"session update", &acpv2.SessionUpdate{}, `{"toolCallContentChunk":{"toolCallId":"t"}}`},
	{"empty response", &acpv2.CancelResponse{}, `{}`},
	{"struct", &structpb.Struct{}, `{"k":{"n":[1,"x"]}}`},
	{"value", &structpb.Value{}, `"just a string"`},
	{"list value", &structpb.ListValue{}, `[null,{}]`},
	{"timestamp", &timestamppb.Timestamp{}, `"2000-02-29T12:00:00.5Z"`},
}

// tableEvents decodes tableMessages.
func tableEvents(t testing.TB) []proto.Message {
	t.Helper()
	msgs := make([]proto.Message, len(tableMessages))
	for i, tm := range tableMessages {
		m := tm.msg.ProtoReflect().New().Interface()
		if err := protojson.Unmarshal([]byte(tm.js), m); err != nil {
			t.Fatalf("%s: %v", tm.name, err)
		}
		msgs[i] = m
	}
	return msgs
}

// compact is b without the spaces between its tokens, which protojson
// adds at random.
func compact(t testing.TB, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		t.Fatalf("not JSON: %v: %s", err, b)
	}
	return out.Bytes()
}

// matchesProtojson fails the test unless Marshal and MarshalAppend give
// what protojson does for m: the same JSON value, and the same bytes but
// for spacing; or the same error.
func matchesProtojson(t testing.TB, m proto.Message) []byte {
	t.Helper()
	want, wantErr := protojson.MarshalOptions{}.Marshal(m)
	got, err := Marshal(m)
	if (err != nil) != (wantErr != nil) || err != nil && err.Error() != wantErr.Error() {
		t.Fatalf("error %v, protojson's %v", err, wantErr)
	}
	appended, appendErr := MarshalAppend([]byte("prefix"), m)
	if (appendErr != nil) != (wantErr != nil) {
		t.Fatalf("MarshalAppend: error %v, protojson's %v", appendErr, wantErr)
	}
	if wantErr != nil {
		return nil
	}
	if !bytes.Equal(appended, append([]byte("prefix"), got...)) {
		t.Fatalf("MarshalAppend gives %s, Marshal %s", appended, got)
	}
	if !bytes.Equal(compact(t, got), compact(t, want)) {
		t.Fatalf("bytes differ:\n got %s\nwant %s", got, compact(t, want))
	}
	return got
}

// Each message is written as protojson writes it, without protojson's
// help, and reads back as itself.
func TestTableMatchesProtojson(t *testing.T) {
	for i, m := range tableEvents(t) {
		t.Run(tableMessages[i].name, func(t *testing.T) {
			got := matchesProtojson(t, m)
			if fast, ok := appendFast(nil, m); !ok || !bytes.Equal(fast, got) {
				t.Fatalf("left to protojson (%v), or not what Marshal gives: %s", ok, fast)
			}
			back := m.ProtoReflect().New().Interface()
			if err := protojson.Unmarshal(got, back); err != nil || !proto.Equal(back, m) && !hasNaN(got) {
				t.Fatalf("does not read back as itself (%v): %s", err, got)
			}
		})
	}
}

// hasNaN reports a message with a NaN double, which is never proto.Equal
// to itself.
func hasNaN(b []byte) bool { return bytes.Contains(b, []byte(`"NaN"`)) }

// Values the JSON above cannot give, or not without protojson's rounding,
// made in Go.
func TestGoValuesMatchProtojson(t *testing.T) {
	for name, m := range goMessages() {
		t.Run(name, func(t *testing.T) {
			matchesProtojson(t, m)
			if _, ok := appendFast(nil, m); !ok {
				t.Fatal("left to protojson")
			}
		})
	}
}

// goMessages are the messages of TestGoValuesMatchProtojson, by name.
func goMessages() map[string]proto.Message {
	ts := func(s int64, n int32) *acpv2.SessionEvent {
		return &acpv2.SessionEvent{Time: &timestamppb.Timestamp{Seconds: s, Nanos: n}}
	}
	cost := func(amount float64) *acpv2.SessionEvent {
		return &acpv2.SessionEvent{Event: &acpv2.SessionEvent_UsageUpdate{UsageUpdate: &acpv2.UsageUpdate{
			Used: proto.Uint64(0), Size: proto.Uint64(math.MaxUint64), Cost: &acpv2.Cost{Amount: amount}}}}
	}
	number := func(n float64) *acpv2.SessionEvent {
		return &acpv2.SessionEvent{Event: &acpv2.SessionEvent_ToolCall{ToolCall: &acpv2.ToolCall{
			RawInput: structpb.NewNumberValue(n), RawOutput: structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewNumberValue(-n)}})}}}
	}
	return map[string]proto.Message{
		"zero time":          ts(0, 0),
		"milliseconds":       ts(1700000000, 5e8),
		"microseconds":       ts(1700000000, 123456000),
		"nanoseconds":        ts(1700000000, 1),
		"before 1970":        ts(-1, 999999999),
		"first second":       ts(minTimestampSeconds, 0),
		"last nanosecond":    ts(maxTimestampSeconds, 999999999),
		"leap day":           ts(951782400, 1000),
		"negative zero cost": cost(math.Copysign(0, -1)),
		"tiny cost":          cost(math.SmallestNonzeroFloat64),
		"huge cost":          cost(math.MaxFloat64),
		"infinite cost":      cost(math.Inf(1)),
		"NaN cost":           cost(math.NaN()),
		"zero":               number(0),
		"negative zero":      number(math.Copysign(0, -1)),
		"1e21":               number(1e21),
		"just below 1e21":    number(math.Nextafter(1e21, 0)),
		"1e-6":               number(1e-6),
		"just below 1e-6":    number(math.Nextafter(1e-6, 0)),
		"1e-7":               number(1e-7),
		"2^53+2":             number(1<<53 + 2),
		"0.1":                number(0.1),
		"unknown enum": &acpv2.SessionEvent{Event: &acpv2.SessionEvent_TurnEnded{TurnEnded: &acpv2.TurnEnded{
			Reason: acpv2.StopReason(-3)}}},
		"optional zeros": &acpv2.SessionEvent{Event: &acpv2.SessionEvent_ToolCall{ToolCall: &acpv2.ToolCall{
			Locations: []*acpv2.ToolCallLocation{{Line: proto.Uint32(0)}, {Line: proto.Uint32(math.MaxUint32)}},
			Content: []*acpv2.ToolCallContent{{Item: &acpv2.ToolCallContent_Diff{Diff: &acpv2.Diff{
				Path: proto.String(""), OldText: proto.String(""), NewText: proto.String("")}}}}}}},
		"empty messages": &acpv2.SessionEvent{Time: &timestamppb.Timestamp{}, Event: &acpv2.SessionEvent_StateChanged{StateChanged: &acpv2.SessionStateChanged{}}},
		"unknown fields": withUnknown(&acpv2.SessionEvent{Seq: 3}),
	}
}

// withUnknown gives m a field its descriptor does not have.
func withUnknown(m proto.Message) proto.Message {
	m.ProtoReflect().SetUnknown([]byte{0xf8, 0x06, 0x01}) // field 111, varint 1
	return m
}

// What protojson refuses, or writes in a way of its own, is left to it:
// the output or the error is protojson's.
func TestLeftToProtojson(t *testing.T) {
	for name, m := range fallbackMessages(t) {
		t.Run(name, func(t *testing.T) {
			if _, ok := appendFast(nil, m); ok {
				t.Fatal("written here, not by protojson")
			}
			want, wantErr := protojson.Marshal(m)
			got, err := Marshal(m)
			if fmt.Sprint(err) != fmt.Sprint(wantErr) || !bytes.Equal(got, want) {
				t.Fatalf("got %s (%v), protojson %s (%v)", got, err, want, wantErr)
			}
			appended, err := MarshalAppend([]byte("prefix"), m)
			if want != nil {
				want = append([]byte("prefix"), want...)
			}
			if fmt.Sprint(err) != fmt.Sprint(wantErr) || !bytes.Equal(appended, want) {
				t.Fatalf("MarshalAppend: got %s (%v), protojson %s (%v)", appended, err, want, wantErr)
			}
		})
	}
}

// fallbackMessages are the messages of TestLeftToProtojson, by name.
func fallbackMessages(t testing.TB) map[string]proto.Message {
	bad := "bad \xff UTF-8"
	input := func(v *structpb.Value) *acpv2.SessionEvent {
		return &acpv2.SessionEvent{Seq: 1, Event: &acpv2.SessionEvent_ToolCall{ToolCall: &acpv2.ToolCall{ToolCallId: "t", RawInput: v}}}
	}
	object := func(fields map[string]*structpb.Value) *structpb.Value {
		return structpb.NewStructValue(&structpb.Struct{Fields: fields})
	}
	at := func(s int64, n int32) *acpv2.SessionEvent {
		return &acpv2.SessionEvent{Seq: 1, Time: &timestamppb.Timestamp{Seconds: s, Nanos: n}}
	}
	anyMsg, err := anypb.New(&acpv2.TurnEnded{StopReason: "x"})
	if err != nil {
		t.Fatal(err)
	}
	return map[string]proto.Message{
		"string not UTF-8": &acpv2.SessionEvent{Event: &acpv2.SessionEvent_StateChanged{StateChanged: &acpv2.SessionStateChanged{State: bad}}},
		"key not UTF-8":    input(object(map[string]*structpb.Value{bad: structpb.NewNullValue()})),
		"value not UTF-8":  input(object(map[string]*structpb.Value{"k": structpb.NewStringValue(bad)})),
		"NaN":              input(structpb.NewNumberValue(math.NaN())),
		"infinity":         input(structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewNumberValue(math.Inf(-1))}})),
		"no kind":          input(object(map[string]*structpb.Value{"k": {}})),
		"nil kind":         input(&structpb.Value{Kind: (*structpb.Value_BoolValue)(nil)}),
		"nil value":        input(object(map[string]*structpb.Value{"k": nil})),
		"nil struct":       input(&structpb.Value{Kind: &structpb.Value_StructValue{}}),
		"nil list":         input(&structpb.Value{Kind: &structpb.Value_ListValue{}}),
		"nil in list":      input(structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{nil}})),
		"nil element": &acpv2.SessionEvent{Event: &acpv2.SessionEvent_ToolCall{ToolCall: &acpv2.ToolCall{
			Content: []*acpv2.ToolCallContent{nil}}}},
		"year 0":           at(minTimestampSeconds-1, 0),
		"year 10000":       at(maxTimestampSeconds+1, 0),
		"negative nanos":   at(0, -1),
		"a second's nanos": at(0, 1e9),
		"too many nanos":   at(0, 1e9+1),
		"nil message":      nil,
		"typed nil":        (*acpv2.SessionEvent)(nil),
		"any":              anyMsg,
		"duration":         durationpb.New(1500),
		"wrapper":          wrapperspb.Int64(5),
		"field mask":       &fieldmaskpb.FieldMask{Paths: []string{"a.b"}},
		"empty":            &emptypb.Empty{},
	}
}

// Escapes are protojson's: quotes, backslashes and control characters
// only, a control character without a short form as \u00XX in lower case.
func TestStringEscapes(t *testing.T) {
	var all strings.Builder
	for c := range 0x80 {
		all.WriteByte(byte(c))
	}
	all.WriteString("\u2028\u2029\ufffd😀")
	e := encoder{}
	if !e.str(all.String()) {
		t.Fatal("a valid string refused")
	}
	want := `"\u0000\u0001\u0002\u0003\u0004\u0005\u0006\u0007\b\t\n\u000b\f\r\u000e\u000f` +
		`\u0010\u0011\u0012\u0013\u0014\u0015\u0016\u0017\u0018\u0019\u001a\u001b\u001c\u001d\u001e\u001f` +
		` !\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_` + "`" +
		"abcdefghijklmnopqrstuvwxyz{|}~\x7f\u2028\u2029\ufffd😀\""
	if string(e.b) != want {
		t.Fatalf("got  %s\nwant %s", e.b, want)
	}
	// Each ASCII character at each place in a run of eight, and next to
	// another: the runs passed over at once hide none.
	for c := range 0x80 {
		for at := range 17 {
			s := strings.Repeat("a", at) + string(rune(c)) + strings.Repeat("é", 9-at/2) + string(rune(c))
			got, err := Marshal(structpb.NewStringValue(s))
			want, wantErr := protojson.Marshal(structpb.NewStringValue(s))
			if err != nil || wantErr != nil || string(got) != string(want) {
				t.Fatalf("%q: got %s (%v), protojson %s (%v)", s, got, err, want, wantErr)
			}
		}
	}
	for _, s := range []string{"\xff", "a\xc3", "\xed\xa0\x80" /* a surrogate */, "ok\xf4\x90\x80\x80", "12345678\xff"} {
		if e.b = nil; e.str(s) {
			t.Fatalf("%q written: %s", s, e.b)
		}
	}
}

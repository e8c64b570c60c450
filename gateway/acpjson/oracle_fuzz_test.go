package acpjson

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// decoderSeeds are updates in the shapes agents send most, and near misses
// of every kind: members of the wrong shape, unknown members and variants,
// discriminators out of place or given twice, depths at the cap.
var decoderSeeds = []string{
	`{"sessionUpdate":"tool_call_update","toolCallId":"call_1","title":"Edit config.go","kind":"edit","status":"pending","locations":[{"path":"/p/config.go","line":42}],"rawInput":{"file_path":"/p/config.go","old_string":"a\n","new_string":"b\n"},"_meta":{"bench":{"n":1,"t":"17"}}}`,
	`{"sessionUpdate":"tool_call","toolCallId":"call_1","title":"Edit","kind":"edit","status":"pending","locations":[{"path":"/p","line":1}],"rawInput":{"x":[1,2,null]}}`,
	`{"sessionUpdate":"tool_call_update","toolCallId":"call_1","status":"in_progress","_meta":{"bench":{"n":2}}}`,
	`{"sessionUpdate":"tool_call_update","toolCallId":"call_1","content":[{"type":"content","content":{"type":"text","text":"out"}}]}`,
	`{"sessionUpdate":"tool_call_update","toolCallId":"call_1","status":"completed","content":[{"type":"diff","path":"/p","oldText":"a","newText":"b"}],"rawOutput":{"ok":true,"linesChanged":12}}`,
	`{"sessionUpdate":"tool_call_update","toolCallId":"c","title":null,"kind":null,"status":null,"content":null,"locations":null,"rawInput":null,"rawOutput":null,"_meta":null}`,
	`{"sessionUpdate":"tool_call_update","toolCallId":"c","content":[],"locations":[]}`,
	`{"sessionUpdate":"tool_call_update","toolCallId":"c","content":[{"type":"terminal","terminalId":"t1","_meta":{"k":1}}]}`,
	`{"sessionUpdate":"tool_call_update","toolCallId":"c","content":[{"type":"diff","path":null,"newText":"b"}]}`,
	`{"sessionUpdate":"tool_call_content_chunk","toolCallId":"call_1","content":{"type":"content","content":{"type":"text","text":"chunk","_meta":{"a":"b"}},"_meta":{"c":2}},"_meta":{"bench":{"n":5}}}`,
	`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hello"},"messageId":"m1","_meta":{"bench":{"n":3}}}`,
	`{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"hmm"}}`,
	`{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":null}}`,
	// Near misses.
	`{"sessionUpdate":"tool_call_update","toolCallId":"c","title":5}`,
	`{"sessionUpdate":"tool_call_update","toolCallId":"","status":"x"}`,
	`{"sessionUpdate":"tool_call_update","toolCallId":"c","custom":1}`,
	`{"sessionUpdate":"tool_call_update","toolCallId":"c","locations":[{"path":"/p","line":-1}]}`,
	`{"sessionUpdate":"tool_call_update","toolCallId":"c","locations":[{"path":"/p","line":1.5}]}`,
	`{"sessionUpdate":"tool_call_update","toolCallId":"c","content":[{"type":"content","content":{"type":"image","data":"x","mimeType":"image/png"}}]}`,
	`{"sessionUpdate":"tool_call_update","toolCallId":"c","content":[{"type":"content","content":{"type":"text","text":"x","annotations":{"priority":1}}}]}`,
	`{"sessionUpdate":"tool_call_update","toolCallId":"c","content":[{"type":"weird"}]}`,
	`{"sessionUpdate":"tool_call_update","toolCallId":"c","content":{"type":"diff"}}`,
	`{"sessionUpdate":"tool_call_update","toolCallId":"c","content":[{"type":"diff","changes":[{"operation":"modify","path":"/p"}],"patch":{"format":"git_patch","text":"x"}}]}`,
	`{"sessionUpdate":"tool_call_update","toolCallId":"c","content":[{"type":"diff","path":"/p","newText":"b","changes":[]}]}`,
	`{"sessionUpdate":"tool_call_content_chunk","toolCallId":"c","content":{"type":"diff","changes":[{"operation":"add","path":"/p"}]}}`,
	`{"sessionUpdate":"tool_call_update","toolCallId":"c","_meta":[1]}`,
	`{"sessionUpdate":"tool_call_content_chunk","toolCallId":"c"}`,
	`{"sessionUpdate":"tool_call_content_chunk","content":{"type":"terminal","terminalId":"t"}}`,
	`{"sessionUpdate":"agent_message_chunk","content":"text"}`,
	`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"},"extra":true}`,
	`{"sessionUpdate":"agent_message_chunk","messageId":7,"content":{"type":"text","text":"x"}}`,
	// As deep as the decoders take, and one level deeper.
	deepUpdate(MaxDepth), deepUpdate(MaxDepth + 1),
	`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"},"_meta":` + nested(MaxDepth-1, "null") + `}`,
	`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"},"_meta":` + nested(MaxDepth, "null") + `}`,
}

// moreSeeds are updates whose members come in other orders, twice, or of
// shapes the decoder reads again from their bytes.
var moreSeeds = []string{
	`{"sessionUpdate":"tool_call_update","toolCallId":"c","toolCallId":"d"}`,
	`{"toolCallId":"c","sessionUpdate":"tool_call_update","status":"x"}`,
	`{"sessionUpdate":"tool_call_update","sessionUpdate":"tool_call","toolCallId":"c","title":null}`,
	`{"sessionUpdate":"tool_call_update","toolCallId":"c","rawInput":{"a":[1,2.5,"x",null,true,{"b":{}}],"a":1e400},"_meta":{"k":{"k":[]}}}`,
	`{"sessionUpdate":"tool_call_update","toolCallId":"c","rawInput":"x","rawOutput":"\u00e9","title":"t\n"}`,
	`{"sessionUpdate":"tool_call_update","toolCallId":"c","title":"a","title":5}`,
	`{"sessionUpdate":"tool_call_update","toolCallId":"c","title":5,"title":"a"}`,
	`{"sessionUpdate":"tool_call_update","toolCallId":"c","content":[{"type":"content","content":{"type":"text","text":"a","_meta":null}},{"type":"diff","path":"/p","oldText":null,"newText":"b","_meta":{"x":1}},{"type":"terminal","terminalId":null}],"locations":[{"path":"/p","line":0},{"line":null,"_meta":{}},{}]}`,
	`{"sessionUpdate":"tool_call_update","toolCallId":"c","content":[{"content":{"type":"text","text":"a"},"type":"content"},{"path":"/p","type":"diff"}],"locations":[{"path":"/p","path":"/q"}]}`,
	`{"sessionUpdate":"tool_call_update","toolCallId":"c","content":[{"type":"content","type":"diff"},{"type":"diff","path":"/p","path":null},{"type":"content","content":null},{"type":"content"},{"type":"terminal","terminalId":"t","content":{}}]}`,
	`{"sessionUpdate":"tool_call_update","toolCallId":"c","locations":[{"path":"/p","line":-1},{"line":1.5},{"line":4294967296},{"line":"7"},{"path":7},{"_meta":[]}]}`,
	`{"sessionUpdate":"tool_call_content_chunk","toolCallId":"c","content":{"type":"content","content":{"text":"a","type":"text"}}}`,
	`{"sessionUpdate":"tool_call_content_chunk","toolCallId":"c","content":{"type":"content","content":{"type":"text","text":"a","text":"b"}}}`,
	`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":null,"_meta":{"k":[1]}}}`,
	`{"sessionUpdate":"agent_message_chunk","content":{"type":"image","data":"AA","mimeType":"image/png"}}`,
	`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"a","annotations":null}}`,
	`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"a","annotations":{"audience":["user"],"priority":0.5,"lastModified":"x"}}}`,
	`{"sessionUpdate":"agent_message_chunk","content":{"type":"resource","resource":{"uri":"file:///a","blob":"AA"}}}`,
	`{"sessionUpdate":"agent_message_chunk","content":{"type":"resource","resource":{"uri":"file:///a","text":"t"}}}`,
	`{"sessionUpdate":"agent_message_chunk","content":{"type":"resource","resource":null}}`,
	`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"a"`,
	`{"sessionUpdate":"plan","entries":[{"content":"a","priority":"high","status":"pending"}]}`,
	`{"sessionUpdate":"usage_update","used":5,"size":10,"cost":{"amount":1.5,"currency":"USD"}}`,
	`{"sessionUpdate":"usage_update","used":-5}`,
	`{"sessionUpdate":"config_option_update","configOptions":[{"configId":"m","name":"Model","type":"select","currentValue":"x"}]}`,
	`{"sessionUpdate":"session_info_update","title":null,"updatedAt":"2026"}`,
	`{"sessionUpdate":"_custom","x":[1]}`,
	`{"sessionUpdate":5}`,
	`{"type":"tool_call","toolCall":{"id":"x","content":"T","kind":"read_file","location":{"path":"/p"}}}`,
	`{"type":"usage","usage":{"used":3}}`,
	`{"type":"weird","a":1}`,
	`{"a":1}`,
	`[1]`,
	`{"sessionUpdate":"tool_call_update"} x`,
	"{\"sessionUpdate\":\"tool_call_update\",\"toolCallId\":\"bad \xff\",\"title\":\"\\ud800\"}",
}

// allSeeds are every seed and every golden input, with its version.
func allSeeds(tb testing.TB) (seeds []string, versions []uint8) {
	for _, s := range append(decoderSeeds, moreSeeds...) {
		seeds, versions = append(seeds, s, s), append(versions, 0, 1)
	}
	files, _ := filepath.Glob("testdata/golden/*.json")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			tb.Fatal(err)
		}
		var cases []struct {
			Version int             `json:"version"`
			Input   json.RawMessage `json:"input"`
		}
		if err := json.Unmarshal(data, &cases); err != nil {
			tb.Fatal(err)
		}
		for _, c := range cases {
			seeds, versions = append(seeds, string(c.Input)), append(versions, uint8(c.Version))
		}
	}
	return seeds, versions
}

// checkOracle decodes data with the decoder and with the oracle: both
// refuse it, or both give the same update.
func checkOracle(t *testing.T, data []byte, v Version) {
	t.Helper()
	got := &acpv2.SessionUpdate{}
	err := Decode(data, got, v)
	want := &acpv2.SessionUpdate{}
	werr := oracleDecode(data, want, v)
	if (err == nil) != (werr == nil) {
		t.Fatalf("v%d: %s\ndecoder: %v\noracle:  %v", v, data, err, werr)
	}
	if err != nil {
		if !semantic(err) {
			t.Fatalf("v%d: %s: error %T %v, not an *Error", v, data, err, err)
		}
		return
	}
	if !proto.Equal(got, want) {
		t.Fatalf("v%d: %s\ndecoder: %v\noracle:  %v", v, data, got, want)
	}
}

func TestDecoderMatchesOracle(t *testing.T) {
	t.Parallel()
	seeds, versions := allSeeds(t)
	for i, s := range seeds {
		checkOracle(t, []byte(s), Version(1+versions[i]%2))
	}
}

// FuzzDecoderMatchesOracle: the decoder decodes every document as the
// generic descriptor-driven decoder (oracle_test.go) does, and refuses
// what it refuses.
func FuzzDecoderMatchesOracle(f *testing.F) {
	seeds, versions := allSeeds(f)
	for i, s := range seeds {
		f.Add([]byte(s), versions[i])
	}
	f.Fuzz(func(t *testing.T, data []byte, ver uint8) {
		checkOracle(t, data, Version(1+ver%2))
	})
}

// notificationOf wraps an update in a session/update notification.
func notificationOf(update string) []byte {
	return []byte(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":` + update + `}}`)
}

// FuzzNotificationMatchesOracle: a notification's update decodes as the
// oracle decodes the update alone (kept whole when it refuses it).
func FuzzNotificationMatchesOracle(f *testing.F) {
	seeds, versions := allSeeds(f)
	for i, s := range seeds {
		f.Add(notificationOf(s), versions[i])
	}
	f.Fuzz(func(t *testing.T, data []byte, ver uint8) {
		v := Version(1 + ver%2)
		n, ok := DecodeNotification(data, v)
		if !ok {
			return
		}
		var env struct {
			Params struct {
				Update json.RawMessage `json:"update"`
			} `json:"params"`
		}
		if err := json.Unmarshal(data, &env); err != nil {
			t.Fatalf("v%d: DecodeNotification took what is not JSON: %s", v, data)
		}
		want := &acpv2.SessionUpdate{}
		werr := oracleDecode(env.Params.Update, want, v)
		if werr != nil {
			want = KeepUnknown(env.Params.Update)
		}
		if (n.Err == nil) != (werr == nil) || !proto.Equal(n.Update, want) {
			t.Fatalf("v%d: %s\ndecoder: %v %v\noracle:  %v %v", v, data, n.Err, n.Update, werr, want)
		}
	})
}

// TestTablesCoverEveryField: every field of every ACP message has a table
// entry the decoder can write, so a field added to the proto is decoded
// with no new code, or this fails.
func TestTablesCoverEveryField(t *testing.T) {
	t.Parallel()
	n := 0
	for name, tb := range tables {
		if tb.in.desc.ParentFile().Path() == acpv2.File_acp_v2_session_service_proto.Path() {
			continue // the gateway's own API, which ACP JSON never holds
		}
		fields := tb.in.desc.Fields()
		for i := 0; i < fields.Len(); i++ {
			fd := fields.Get(i)
			s := slotOf(fd)
			if s.kind == kUnsupported {
				t.Errorf("%s.%s: the decoder has no way to write a %v field", name, fd.Name(), fd.Kind())
			}
			if s.kind == kMessage && s.sub == nil {
				t.Errorf("%s.%s: no table for %s", name, fd.Name(), fd.Message().FullName())
			}
			n++
		}
	}
	if n < 100 {
		t.Fatalf("only %d fields", n)
	}
}

// TestTableWritesMatchProtoreflect: a value the decoder writes at a table
// entry's offset is the field protoreflect sets, for every scalar and message
// field of every ACP message.
func TestTableWritesMatchProtoreflect(t *testing.T) {
	t.Parallel()
	for name, tb := range tables {
		for _, e := range tb.entries {
			if e.list || e.oneof != nil {
				continue
			}
			direct, viaReflect := tb.newMessage(), tb.newMessage()
			m := reflectMessage(tb, viaReflect)
			var v protoreflect.Value
			var js string
			switch e.kind {
			case kString:
				v, js = protoreflect.ValueOfString("x"), `"x"`
			case kBool:
				v, js = protoreflect.ValueOfBool(true), `true`
			case kUint32:
				v, js = protoreflect.ValueOfUint32(7), `7`
			case kUint64:
				v, js = protoreflect.ValueOfUint64(7), `7`
			case kInt64:
				v, js = protoreflect.ValueOfInt64(7), `7`
			case kDouble:
				v, js = protoreflect.ValueOfFloat64(7), `7`
			default:
				continue
			}
			m.Set(e.fd, v)
			r := getReader([]byte(js), MaxDepth)
			err := decoder{version: V2}.scalar(r, &e.slot, unsafe.Add(direct, e.off))
			putReader(r)
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(reflectMessage(tb, direct).Interface(), m.Interface()) {
				t.Errorf("%s.%s: the write at offset %d is not the field", name, e.fd.Name(), e.off)
			}
		}
	}
}

// sampleJSON is a JSON value that an entry of slot s takes.
func sampleJSON(s slot) string {
	if s.list {
		s.list = false
		return "[" + sampleJSON(s) + "]"
	}
	switch s.kind {
	case kString:
		return `"x"`
	case kBool:
		return `true`
	case kUint32, kUint64, kInt64, kDouble:
		return `7`
	case kMessage:
		if s.sub.value != nil { // a tri-state wrapper
			return sampleJSON(s.sub.value.slot)
		}
		if s.sub.items != nil { // a list message
			return sampleJSON(s.sub.items.slot)
		}
		return requiredJSON(s.sub)
	}
	return `{"k":1}` // google.protobuf.Value and Struct
}

// requiredJSON is an object of t's required members.
func requiredJSON(t *table) string {
	members := map[string]json.RawMessage{}
	for _, r := range t.required {
		members[r.key] = json.RawMessage(sampleJSON(r.slot))
	}
	b, _ := json.Marshal(members)
	return string(b)
}

// TestDecoderFillsEveryField: every member of every ACP message, given
// a value of its shape, is decoded into its field, not kept in extra. A
// field added to the proto is decoded with no new code, or this fails.
func TestDecoderFillsEveryField(t *testing.T) {
	t.Parallel()
	n := 0
	for name, tb := range tables {
		if tb.in.desc.ParentFile().Path() == acpv2.File_acp_v2_session_service_proto.Path() || tb.in.union != nil || tb.value != nil {
			continue
		}
		for _, e := range tb.entries {
			members := map[string]json.RawMessage{e.key: json.RawMessage(sampleJSON(e.slot))}
			for _, r := range tb.required {
				members[r.key] = json.RawMessage(sampleJSON(r.slot))
			}
			data, err := json.Marshal(members)
			if err != nil {
				t.Fatal(err)
			}
			m := reflectMessage(tb, tb.newMessage())
			if err := Decode(data, m.Interface(), V2); err != nil {
				t.Errorf("%s: %s: %v", name, data, err)
				continue
			}
			if !m.Has(e.fd) {
				t.Errorf("%s: %s: field %s not set", name, data, e.fd.Name())
			}
			if tb.in.extra != nil && m.Has(tb.in.extra) {
				t.Errorf("%s: %s: kept in extra", name, data)
			}
			n++
		}
	}
	if n < 80 {
		t.Fatalf("only %d members", n)
	}
}

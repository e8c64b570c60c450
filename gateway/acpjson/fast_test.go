package acpjson

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// fastSeeds are updates in the shapes the fast path takes, and near
// misses it must leave to the generic decoder.
var fastSeeds = []string{
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

// FuzzFastPathMatchesGeneric: wherever the fast path decodes an update,
// the generic decoder decodes the same message from it.
func FuzzFastPathMatchesGeneric(f *testing.F) {
	for _, s := range fastSeeds {
		f.Add([]byte(s), uint8(0))
		f.Add([]byte(s), uint8(1))
	}
	files, _ := filepath.Glob("testdata/golden/*.json")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		var cases []struct {
			Version int             `json:"version"`
			Input   json.RawMessage `json:"input"`
		}
		if err := json.Unmarshal(data, &cases); err != nil {
			f.Fatal(err)
		}
		for _, c := range cases {
			f.Add([]byte(c.Input), uint8(c.Version))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, ver uint8) {
		checkFastPath(t, data, Version(1+ver%2))
	})
}

// checkFastPath decodes data both ways, when the fast path takes it.
func checkFastPath(t *testing.T, data []byte, v Version) bool {
	t.Helper()
	obj, err := parseObject(data)
	if err != nil {
		return false
	}
	tag, _ := obj["sessionUpdate"].(string)
	fast := (&decoder{version: v}).fastUpdate(tag, obj)
	if fast == nil {
		return false
	}
	obj, _ = parseObject(data) // the generic decoder may modify what it reads
	generic := &acpv2.SessionUpdate{}
	if err := (&decoder{version: v, generic: true}).sessionUpdate(obj, generic); err != nil {
		t.Fatalf("v%d: the fast path decoded what the generic decoder refuses (%v): %s", v, err, data)
	}
	if !proto.Equal(fast, generic) {
		t.Fatalf("v%d: %s\nfast:    %v\ngeneric: %v", v, data, fast, generic)
	}
	return true
}

// The fast path takes the updates agents send most, in both versions.
func TestFastPathTakesCommonUpdates(t *testing.T) {
	for i, s := range fastSeeds[:13] {
		for _, v := range []Version{V1, V2} {
			if !checkFastPath(t, []byte(s), v) {
				t.Errorf("seed %d, v%d: left to the generic decoder: %s", i, v, s)
			}
		}
	}
}

// notificationOf wraps an update in a session/update notification.
func notificationOf(update string) []byte {
	return []byte(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":` + update + `}}`)
}

// FuzzDirectMatchesParsed: DecodeNotification gives the same notification
// whether the direct path takes the update or the update is parsed first.
func FuzzDirectMatchesParsed(f *testing.F) {
	for _, s := range fastSeeds {
		f.Add(notificationOf(s), uint8(0))
		f.Add(notificationOf(s), uint8(1))
	}
	f.Add(notificationOf(`{"sessionUpdate":"tool_call_update","toolCallId":"c","toolCallId":"d"}`), uint8(1))
	f.Add(notificationOf(`{"toolCallId":"c","sessionUpdate":"tool_call_update","status":"x"}`), uint8(1))
	f.Add(notificationOf(`{"sessionUpdate":"tool_call_update","toolCallId":"c","rawInput":{"a":[1,2.5,"x",null,true,{"b":{}}],"a":1e400},"_meta":{"k":{"k":[]}}}`), uint8(1))
	f.Add(notificationOf(`{"sessionUpdate":"tool_call_update","toolCallId":"c","rawInput":[1,`), uint8(1))
	// Strings where the direct path reads them, and where no string goes.
	f.Add(notificationOf(`{"sessionUpdate":"tool_call_update","toolCallId":"c","rawInput":"x","rawOutput":"\u00e9","title":"t\n"}`), uint8(0))
	f.Add(notificationOf(`{"sessionUpdate":"tool_call_update","toolCallId":"c","_meta":"m"}`), uint8(1))
	f.Add(notificationOf(`{"sessionUpdate":"tool_call_content_chunk","toolCallId":"c","content":"x"}`), uint8(1))
	f.Add(notificationOf(`{"sessionUpdate":"agent_message_chunk","messageId":"","content":{"type":"text","text":"x"}}`), uint8(1))
	f.Add(notificationOf(`{"sessionUpdate":"agent_message_chunk","toolCallId":"c","content":{"type":"text","text":"x"}}`), uint8(1))
	// Content items, blocks and locations that the direct path parses
	// itself, and those it leaves to the fast path's functions.
	for _, u := range []string{
		`{"sessionUpdate":"tool_call_update","toolCallId":"c","content":[{"type":"content","content":{"type":"text","text":"a","_meta":null}},{"type":"diff","path":"/p","oldText":null,"newText":"b","_meta":{"x":1}},{"type":"terminal","terminalId":null}],"locations":[{"path":"/p","line":0},{"line":null,"_meta":{}},{}]}`,
		`{"sessionUpdate":"tool_call_update","toolCallId":"c","content":[{"content":{"type":"text","text":"a"},"type":"content"},{"path":"/p","type":"diff"}],"locations":[{"path":"/p","path":"/q"}]}`,
		`{"sessionUpdate":"tool_call_update","toolCallId":"c","content":[{"type":"content","type":"diff"},{"type":"diff","path":"/p","path":null},{"type":"content","content":null},{"type":"content"},{"type":"terminal","terminalId":"t","content":{}}]}`,
		`{"sessionUpdate":"tool_call_update","toolCallId":"c","locations":[{"path":"/p","line":-1},{"line":1.5},{"line":4294967296},{"line":"7"},{"path":7},{"_meta":[]}]}`,
		`{"sessionUpdate":"tool_call_content_chunk","toolCallId":"c","content":{"type":"content","content":{"text":"a","type":"text"}}}`,
		`{"sessionUpdate":"tool_call_content_chunk","toolCallId":"c","content":{"type":"content","content":{"type":"text","text":"a","text":"b"}}}`,
		`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":null,"_meta":{"k":[1]}}}`,
		`{"sessionUpdate":"agent_message_chunk","content":{"type":"image","data":"AA","mimeType":"image/png"}}`,
		`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"a","annotations":null}}`,
		`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"a"`,
	} {
		f.Add(notificationOf(u), uint8(1))
	}
	f.Fuzz(func(t *testing.T, data []byte, ver uint8) {
		v := Version(1 + ver%2)
		direct, ok1 := decodeNotification(data, v, true)
		parsed, ok2 := decodeNotification(data, v, false)
		if ok1 != ok2 || direct.SessionID != parsed.SessionID || (direct.Err == nil) != (parsed.Err == nil) || !proto.Equal(direct.Update, parsed.Update) {
			t.Fatalf("v%d: %s\ndirect: %v %q %v %v\nparsed: %v %q %v %v", v, data,
				ok1, direct.SessionID, direct.Err, direct.Update, ok2, parsed.SessionID, parsed.Err, parsed.Update)
		}
	})
}

// The direct path takes the updates agents send most, in both versions.
func TestDirectPathTakesCommonUpdates(t *testing.T) {
	for i, s := range fastSeeds[:13] {
		for _, v := range []Version{V1, V2} {
			_, _, decoded, ok := parseNotification(notificationOf(s), v, true)
			if !ok || decoded == nil {
				t.Errorf("seed %d, v%d: left to the parsed path: %s", i, v, s)
			}
		}
	}
}

// The direct path parses the common content items, blocks and locations
// straight into their messages, rather than leaving them to the fast
// path's functions, so that FuzzDirectMatchesParsed compares the two.
func TestDirectPartsTakeCommonShapes(t *testing.T) {
	for _, c := range []struct {
		parse func(p *parser) bool
		json  string
	}{
		{(*parser).takesItem, `{"type":"content","content":{"type":"text","text":"out\n"}}`},
		{(*parser).takesItem, `{"type":"content","content":{"type":"text","text":"x","_meta":{"a":1}},"_meta":null}`},
		{(*parser).takesItem, `{"type":"diff","path":"/p","oldText":"a","newText":"b"}`},
		{(*parser).takesItem, `{"type":"diff","path":"/p","oldText":null,"newText":"b","_meta":{}}`},
		{(*parser).takesItem, `{"type":"terminal","terminalId":"t1"}`},
		{(*parser).takesBlock, `{"type":"text","text":"hello"}`},
		{(*parser).takesLocation, `{"path":"/p/config.go","line":42}`},
		{(*parser).takesLocation, `{"line":null,"path":"/p","_meta":{"k":"v"}}`},
	} {
		p := getParser([]byte(c.json))
		if !c.parse(p) || p.i != len(p.data) {
			t.Errorf("the direct path leaves %s to the fast path", c.json)
		}
		putParser(p)
	}
}

func (p *parser) takesItem() bool {
	_, ok := retry(p, p.directToolCallContent)
	return ok
}

func (p *parser) takesBlock() bool {
	_, ok := retry(p, p.directContentBlock)
	return ok
}

func (p *parser) takesLocation() bool {
	_, ok := retry(p, p.directLocation)
	return ok
}

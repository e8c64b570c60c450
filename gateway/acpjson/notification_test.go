package acpjson

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// envelopes wrap an update (%u) in session/update notifications that
// DecodeNotification takes, with the session id each one carries.
var envelopes = []struct{ line, sid string }{
	{`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":%u}}`, "s1"},
	{` { "params" : { "update" : %u , "sessionId" : "s2" } , "method" : "session/update" , "jsonrpc" : "2.0" } ` + "\r", "s2"},
	{`{"method":"session/update","params":{"update":%u}}`, ""},
	{`{"jsonrpc":"2.0","method":"session\/update","params":{"sessionId":null,"_meta":{"a":[1]},"update":%u,"other":"x"}}`, ""},
	{`{"jsonrpc":2,"method":"session/update","params":{"sessionId":"\u00e9","update":%u}}`, "é"},
}

func wrap(envelope string, update []byte) []byte {
	return []byte(strings.Replace(envelope, "%u", string(update), 1))
}

// checkNotification checks that DecodeNotification of update in each
// envelope gives what DecodeUpdate, falling back to KeepUnknown, gives of
// the update alone: the agent's read path before the one-pass decode.
func checkNotification(t *testing.T, update []byte, v Version) {
	t.Helper()
	want, werr := DecodeUpdate(update, v)
	if werr != nil {
		want = KeepUnknown(update)
	}
	for _, e := range envelopes {
		line := wrap(e.line, update)
		n, ok := DecodeNotification(line, v)
		if !json.Valid(update) {
			// Spliced into the envelope, update may still make a valid
			// line, of another meaning.
			if ok && !json.Valid(line) {
				t.Fatalf("DecodeNotification took %q, which is not JSON", line)
			}
			continue
		}
		if !ok {
			if testutil.Nesting(t, update) <= MaxDepth {
				t.Fatalf("DecodeNotification refused %q", line)
			}
			continue
		}
		if n.SessionID != e.sid {
			t.Fatalf("%q: session id %q, want %q", line, n.SessionID, e.sid)
		}
		if (n.Err == nil) != (werr == nil) || n.Err != nil && n.Err.Error() != werr.Error() {
			t.Fatalf("%q: error %v, want %v", line, n.Err, werr)
		}
		if !proto.Equal(n.Update, want) {
			t.Fatalf("%q (v%d):\n got %v\nwant %v", line, v, n.Update, want)
		}
	}
}

func goldenInputs(t testing.TB) (inputs [][]byte, versions []Version) {
	files, err := filepath.Glob("testdata/golden/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var cases []struct {
			Version   int
			Input, V2 json.RawMessage
		}
		if err := json.Unmarshal(data, &cases); err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			inputs = append(inputs, c.Input)
			versions = append(versions, Version(c.Version))
			if c.V2 != nil {
				inputs = append(inputs, c.V2)
				versions = append(versions, V2)
			}
		}
	}
	return inputs, versions
}

var notificationSeeds = []string{
	`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}`,
	`{"sessionUpdate":"tool_call","toolCallId":"c1","title":"t","status":null,"content":null}`,
	`{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":null}`,
	`{"sessionUpdate":"tool_call_update"}`,    // does not decode: kept whole
	`{"sessionUpdate":5}`,                     // does not decode: kept whole
	`{"type":"tool_call","toolCall":"x"}`,     // does not decode: kept whole
	`{"sessionUpdate":"_vendor","x":[1,2]}`,   // unknown
	`null`, `"text"`, `[1,{"a":2}]`, `12.5e3`, // not objects: kept under "update"
	`{"a":1,"a":2,"sessionUpdate":"plan","entries":[]}`,
	`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"\ud800 \xff"}}`,
	`{"sessionUpdate":`, // not JSON
}

func TestDecodeNotificationMatchesDecodeUpdate(t *testing.T) {
	t.Parallel()
	inputs, versions := goldenInputs(t)
	for i, in := range inputs {
		checkNotification(t, in, versions[i])
		checkNotification(t, in, 3-versions[i]) // and as the other version
	}
	for _, s := range notificationSeeds {
		checkNotification(t, []byte(s), V1)
		checkNotification(t, []byte(s), V2)
	}
}

func TestDecodeNotificationLeavesTheRest(t *testing.T) {
	t.Parallel()
	const u = `{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}`
	for _, line := range []string{
		// Requests, with an id, even a null one.
		`{"jsonrpc":"2.0","id":0,"method":"session/update","params":{"sessionId":"s","update":` + u + `}}`,
		`{"jsonrpc":"2.0","id":null,"method":"session/update","params":{"sessionId":"s","update":` + u + `}}`,
		`{"jsonrpc":"2.0","ID":"x","method":"session/update","params":{"sessionId":"s","update":` + u + `}}`,
		// Other methods and messages.
		`{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s","update":` + u + `}}`,
		`{"jsonrpc":"2.0","method":5,"params":{"sessionId":"s","update":` + u + `}}`,
		`{"jsonrpc":"2.0","id":3,"result":{"sessionId":"s","update":` + u + `}}`,
		`{"jsonrpc":"2.0","method":"session/update","result":null,"params":{"update":` + u + `}}`,
		`{"jsonrpc":"2.0","Method":"session/update","params":{"sessionId":"s","update":` + u + `}}`,
		`{"jsonrpc":"2.0","method":"session/update","meta":{},"params":{"sessionId":"s","update":` + u + `}}`,
		// Members twice.
		`{"jsonrpc":"2.0","method":"session/update","method":"session/update","params":{"update":` + u + `}}`,
		`{"jsonrpc":"2.0","jsonrpc":"2.0","method":"session/update","params":{"update":` + u + `}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"update":` + u + `},"params":{"update":` + u + `}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"update":` + u + `,"update":` + u + `}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"a","sessionId":"b","update":` + u + `}}`,
		// Params that are not plainly {sessionId, update}.
		`{"jsonrpc":"2.0","method":"session/update"}`,
		`{"jsonrpc":"2.0","method":"session/update","params":null}`,
		`{"jsonrpc":"2.0","method":"session/update","params":[` + u + `]}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s"}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":1,"update":` + u + `}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":{},"update":` + u + `}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"SessionId":"s","update":` + u + `}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","Update":` + u + `}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"ſessionId":"s","update":` + u + `}}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"UPDATE":{},"update":` + u + `}}`,
		// Not one JSON object.
		`{"jsonrpc":"2.0","method":"session/update","params":{"update":` + u + `}} x`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"update":` + u + `}}{}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"update":` + u + `}`,
		`{"jsonrpc":"2.0","method":"session/update","params":{"update":` + u + `},}`,
		`[{"jsonrpc":"2.0","method":"session/update","params":{"update":` + u + `}}]`,
		`"session/update"`, ``, `not JSON`,
	} {
		if n, ok := DecodeNotification([]byte(line), V2); ok {
			t.Errorf("DecodeNotification took %s: %v", line, n)
		}
	}
}

// FuzzDecodeNotification: for any update, the one-pass decode of a
// notification is DecodeUpdate of its update, with KeepUnknown's fallback.
func FuzzDecodeNotification(f *testing.F) {
	inputs, versions := goldenInputs(f)
	for i, in := range inputs {
		f.Add(in, uint8(versions[i]))
	}
	for _, s := range notificationSeeds {
		f.Add([]byte(s), uint8(1))
	}
	f.Fuzz(func(t *testing.T, update []byte, ver uint8) {
		checkNotification(t, update, Version(1+ver%2))
	})
}

package agentsim_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
)

func TestScriptJSONRoundTrip(t *testing.T) {
	t.Parallel()
	s := agentsim.Script{
		ProtocolVersion: 2,
		LoadSession:     true,
		AuthMethods:     []string{"api-key"},
		Startup:         []agentsim.Step{{Raw: "garbage"}, {Stderr: "hello"}, {Sleep: agentsim.Duration(50 * time.Millisecond)}},
		Turns: []agentsim.Turn{
			{
				Steps: []agentsim.Step{
					{Update: raw(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"{{cwd}}"}}`)},
					{Permission: &agentsim.Permission{
						ToolCall: raw(`{"toolCallId":"c1"}`),
						Options:  raw(`[{"optionId":"a","name":"A","kind":"allow_once"}]`),
						Allowed:  []agentsim.Step{{ReadFile: "{{cwd}}/a"}},
						Rejected: []agentsim.Step{{WriteFile: &agentsim.WriteFile{Path: "/b", Content: "c"}}},
					}},
					{Hang: true},
				},
				StopReason: "max_tokens",
			},
			{Steps: []agentsim.Step{{Exit: ptr(0)}, {Exit: ptr(3)}}},
		},
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{
		`"protocolVersion":2`, `"loadSession":true`, `"authMethods":["api-key"]`, `"sleep":"50ms"`,
		`"stopReason":"max_tokens"`, `"readFile":"{{cwd}}/a"`, `"writeFile":{"path":"/b","content":"c"}`,
		`"toolCall":{"toolCallId":"c1"}`, `"exit":0`, `"hang":true`, `"raw":"garbage"`, `"stderr":"hello"`,
	} {
		if !strings.Contains(string(b), key) {
			t.Errorf("JSON lacks %s: %s", key, b)
		}
	}
	var back agentsim.Script
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, s) {
		t.Errorf("round trip changed the script:\n got %+v\nwant %+v", back, s)
	}
}

func TestDurationJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{in: `"50ms"`, want: 50 * time.Millisecond},
		{in: `"1.5s"`, want: 1500 * time.Millisecond},
		{in: `1000000`, want: time.Millisecond},
		{in: `null`},
		{in: `"soon"`, wantErr: true},
		{in: `true`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			var st agentsim.Step
			err := json.Unmarshal([]byte(`{"sleep":`+tt.in+`}`), &st)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error = %v, wantErr %v", err, tt.wantErr)
			}
			if err == nil && time.Duration(st.Sleep) != tt.want {
				t.Errorf("sleep = %v, want %v", st.Sleep, tt.want)
			}
		})
	}
}

func ExampleScript() {
	var s agentsim.Script
	err := json.Unmarshal([]byte(`{
		"protocolVersion": 1,
		"turns": [{"steps": [
			{"update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}},
			{"sleep": "20ms"},
			{"readFile": "{{cwd}}/README.md"}
		], "stopReason": "end_turn"}]
	}`), &s)
	fmt.Println(err, s.Validate(), len(s.Turns[0].Steps), s.Turns[0].Steps[1].Sleep)
	// Output: <nil> <nil> 3 20ms
}

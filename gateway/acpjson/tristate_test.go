package acpjson_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

type state int

const (
	omitted state = iota
	cleared
	valued
)

func (s state) String() string { return [...]string{"omitted", "null", "value"}[s] }

// patchState names the state of a tri-state wrapper from its generated Go
// API: a nil wrapper is omitted, one holding a value is set, and one holding
// neither is a clear.
func patchState(isNil, hasValue bool) state {
	switch {
	case isNil:
		return omitted
	case hasValue:
		return valued
	}
	return cleared
}

func toolCallUpdate(t *testing.T, js string, v acpjson.Version) *acpv2.ToolCallUpdate {
	t.Helper()
	u, err := acpjson.DecodeUpdate([]byte(js), v)
	if err != nil {
		t.Fatalf("decode %s: %v", js, err)
	}
	tcu := u.GetToolCallUpdate()
	if tcu == nil {
		t.Fatalf("decode %s: not a tool_call_update: %v", js, u)
	}
	return tcu
}

// fieldStates returns the state of every patch field of u.
func fieldStates(u *acpv2.ToolCallUpdate) map[string]state {
	return map[string]state{
		"title":     patchState(u.Title == nil, isStringValue(u.GetTitle())),
		"kind":      patchState(u.Kind == nil, isStringValue(u.GetKind())),
		"status":    patchState(u.Status == nil, isStringValue(u.GetStatus())),
		"content":   patchState(u.Content == nil, u.GetContent().GetValue() != nil),
		"locations": patchState(u.Locations == nil, u.GetLocations().GetValue() != nil),
		"rawInput":  patchState(u.RawInput == nil, u.GetRawInput().GetValue() != nil),
		"rawOutput": patchState(u.RawOutput == nil, u.GetRawOutput().GetValue() != nil),
		"_meta":     patchState(u.Meta == nil, u.GetMeta().GetValue() != nil),
	}
}

func isStringValue(p *acpv2.StringPatch) bool {
	_, ok := p.GetOp().(*acpv2.StringPatch_Value)
	return ok
}

func TestTriStatePerField(t *testing.T) {
	t.Parallel()
	values := map[string]string{
		"title":     `"T"`,
		"kind":      `"read"`,
		"status":    `"completed"`,
		"content":   `[{"type":"terminal","terminalId":"t"}]`,
		"locations": `[{"path":"/a"}]`,
		"rawInput":  `{"a":1}`,
		"rawOutput": `"out"`,
		"_meta":     `{"m":1}`,
	}
	for field, value := range values {
		for _, tc := range []struct {
			member  string
			version acpjson.Version
			want    state
		}{
			{"", acpjson.V2, omitted},
			{`,"` + field + `":null`, acpjson.V2, cleared},
			{`,"` + field + `":` + value, acpjson.V2, valued},
			{"", acpjson.V1, omitted},
			{`,"` + field + `":null`, acpjson.V1, omitted}, // v1: null is unchanged
			{`,"` + field + `":` + value, acpjson.V1, valued},
		} {
			t.Run(field+"/"+tc.want.String()+"/v"+string(rune('0'+tc.version)), func(t *testing.T) {
				t.Parallel()
				js := `{"sessionUpdate":"tool_call_update","toolCallId":"c1"` + tc.member + `}`
				states := fieldStates(toolCallUpdate(t, js, tc.version))
				for f, s := range states {
					want := omitted
					if f == field {
						want = tc.want
					}
					if s != want {
						t.Errorf("%s: field %s is %v, want %v", js, f, s, want)
					}
				}
			})
		}
	}
}

func TestEmptyArrayIsAValueThatClears(t *testing.T) {
	t.Parallel()
	for _, v := range []acpjson.Version{acpjson.V1, acpjson.V2} {
		u := toolCallUpdate(t, `{"sessionUpdate":"tool_call_update","toolCallId":"c1","content":[],"locations":[]}`, v)
		if u.GetContent().GetValue() == nil || len(u.GetContent().GetValue().GetItems()) != 0 {
			t.Errorf("v%d content [] decoded as %v", v, u.GetContent())
		}
		if u.GetLocations().GetValue() == nil || len(u.GetLocations().GetValue().GetItems()) != 0 {
			t.Errorf("v%d locations [] decoded as %v", v, u.GetLocations())
		}
	}
}

func TestEncodeV1BestEffort(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, v2, v1 string
	}{
		{"scalar clears dropped",
			`{"sessionUpdate":"tool_call_update","toolCallId":"c1","title":null,"kind":null,"status":"failed","rawInput":null,"rawOutput":null,"_meta":null}`,
			`{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"failed"}`},
		{"collection clears sent as []",
			`{"sessionUpdate":"tool_call_update","toolCallId":"c1","content":null,"locations":null}`,
			`{"sessionUpdate":"tool_call_update","toolCallId":"c1","content":[],"locations":[]}`},
		{"values kept",
			`{"sessionUpdate":"tool_call_update","toolCallId":"c1","title":"T","content":[{"type":"diff","path":"/a","newText":"b"}],"rawInput":{"x":[1]}}`,
			`{"sessionUpdate":"tool_call_update","toolCallId":"c1","title":"T","content":[{"type":"diff","path":"/a","newText":"b"}],"rawInput":{"x":[1]}}`},
		{"item plan becomes a v1 plan",
			`{"sessionUpdate":"plan_update","plan":{"type":"items","planId":"p","entries":[{"content":"a","priority":"low","status":"pending"}]}}`,
			`{"sessionUpdate":"plan","entries":[{"content":"a","priority":"low","status":"pending"}]}`},
		{"config option id named as v1 does",
			`{"sessionUpdate":"config_option_update","configOptions":[{"configId":"m","name":"M","type":"boolean","currentValue":true}]}`,
			`{"sessionUpdate":"config_option_update","configOptions":[{"id":"m","name":"M","type":"boolean","currentValue":true}]}`},
		{"session info clear survives (v1 has it)",
			`{"sessionUpdate":"session_info_update","title":null}`,
			`{"sessionUpdate":"session_info_update","title":null}`},
		{"unknown kept whole",
			`{"sessionUpdate":"_x","a":1}`,
			`{"sessionUpdate":"_x","a":1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u, err := acpjson.DecodeUpdate([]byte(tc.v2), acpjson.V2)
			if err != nil {
				t.Fatal(err)
			}
			got, err := acpjson.EncodeUpdate(u, acpjson.V1)
			if err != nil {
				t.Fatal(err)
			}
			if !testutil.JSONEqual(t, got, []byte(tc.v1)) {
				t.Fatalf("got  %s\nwant %s", got, tc.v1)
			}
		})
	}
}

func TestEncodeV1NoForm(t *testing.T) {
	t.Parallel()
	for _, js := range []string{
		`{"sessionUpdate":"tool_call_content_chunk","toolCallId":"c1","content":{"type":"terminal","terminalId":"t"}}`,
		`{"sessionUpdate":"terminal_output_chunk","terminalId":"t","data":""}`,
		`{"sessionUpdate":"state_update","state":"idle"}`,
	} {
		u, err := acpjson.DecodeUpdate([]byte(js), acpjson.V2)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := acpjson.EncodeUpdate(u, acpjson.V1); !errors.Is(err, acpjson.ErrNoV1Form) {
			t.Errorf("%s: err = %v, want ErrNoV1Form", js, err)
		}
	}
}

func TestEncodeToolCallV1(t *testing.T) {
	t.Parallel()
	tc := &acpv2.ToolCall{ToolCallId: "c1", Title: "Read", Kind: "read",
		Locations: []*acpv2.ToolCallLocation{{Path: "/a"}}}
	got, err := acpjson.EncodeToolCallV1(tc)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"sessionUpdate":"tool_call","toolCallId":"c1","title":"Read","kind":"read","locations":[{"path":"/a"}]}`
	if !testutil.JSONEqual(t, got, []byte(want)) {
		t.Fatalf("got %s want %s", got, want)
	}
}

func TestDecodeErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, js, path string }{
		{"not JSON", `{"sessionUpdate":`, ""},
		{"not an object", `[1,2]`, ""},
		{"trailing data", `{"sessionUpdate":"plan","entries":[]} {}`, ""},
		{"trailing bracket", `{"sessionUpdate":"plan","entries":[]} }`, ""},
		{"no discriminator", `{"toolCallId":"c1"}`, "sessionUpdate"},
		{"discriminator not a string", `{"sessionUpdate":5}`, "sessionUpdate"},
		{"tool call without id", `{"sessionUpdate":"tool_call_update","title":"x"}`, "toolCallId"},
		{"tool call id not a string", `{"sessionUpdate":"tool_call_update","toolCallId":7}`, "toolCallId"},
		{"chunk without content", `{"sessionUpdate":"tool_call_content_chunk","toolCallId":"c1"}`, "content"},
		{"draft tool call not an object", `{"type":"tool_call","toolCall":"x"}`, "toolCall"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := acpjson.DecodeUpdate([]byte(tc.js), acpjson.V2)
			var e *acpjson.Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v, want *acpjson.Error", err)
			}
			if e.Path != tc.path {
				t.Fatalf("path = %q, want %q (%v)", e.Path, tc.path, err)
			}
		})
	}
}

func TestKeepUnknownKeepsWhatDoesNotDecode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, tag, body string }{
		{`{"sessionUpdate":"tool_call_update","title":"no id"}`, "tool_call_update", `{"sessionUpdate":"tool_call_update","title":"no id"}`},
		{`{"toolCallId":"c1"}`, "", `{"toolCallId":"c1"}`},
		{`[1,2]`, "", `{"update":[1,2]}`},
	} {
		if _, err := acpjson.DecodeUpdate([]byte(tc.in), acpjson.V2); err == nil {
			t.Fatalf("%s decodes; the case is moot", tc.in)
		}
		u := acpjson.KeepUnknown([]byte(tc.in))
		if u.GetUnknown().GetSessionUpdate() != tc.tag {
			t.Errorf("%s: tag %q, want %q", tc.in, u.GetUnknown().GetSessionUpdate(), tc.tag)
		}
		body, err := u.GetUnknown().GetBody().MarshalJSON()
		if err != nil || !testutil.JSONEqual(t, body, []byte(tc.body)) {
			t.Errorf("%s: body %s, want %s", tc.in, body, tc.body)
		}
	}
	if acpjson.KeepUnknown([]byte(`{not json`)) != nil {
		t.Error("KeepUnknown of non-JSON should be nil")
	}
}

func TestEveryWireValueMapsToItsNamesake(t *testing.T) {
	t.Parallel()
	type family struct {
		wires []string
		of    func(string) fmt.Stringer
	}
	for name, f := range map[string]family{
		"ToolKind": {[]string{"read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"},
			func(w string) fmt.Stringer { return acpjson.ToolKind(w) }},
		"ToolCallStatus": {[]string{"pending", "in_progress", "completed", "failed", "cancelled"},
			func(w string) fmt.Stringer { return acpjson.ToolCallStatus(w) }},
		"StopReason": {[]string{"end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"},
			func(w string) fmt.Stringer { return acpjson.StopReason(w) }},
		"PermissionOptionKind": {[]string{"allow_once", "allow_always", "reject_once", "reject_always"},
			func(w string) fmt.Stringer { return acpjson.PermissionOptionKind(w) }},
	} {
		for _, w := range f.wires {
			if got := f.of(w).String(); !strings.HasSuffix(got, "_"+strings.ToUpper(w)) {
				t.Errorf("%s(%q) = %s", name, w, got)
			}
		}
		for w, suffix := range map[string]string{"": "_UNSPECIFIED", "_mine": "_CUSTOM", "future": "_UNKNOWN"} {
			if got := f.of(w).String(); !strings.HasSuffix(got, suffix) {
				t.Errorf("%s(%q) = %s, want *%s", name, w, got, suffix)
			}
		}
	}
}

package acpjson

import (
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// nested is a JSON value of levels nested objects (or arrays, every other
// level), innermost holding leaf.
func nested(levels int, leaf string) string {
	var open, close strings.Builder
	for i := range levels {
		if i%2 == 0 {
			open.WriteString(`{"k":`)
		} else {
			open.WriteString(`[1,`)
		}
	}
	for i := levels - 1; i >= 0; i-- {
		if i%2 == 0 {
			close.WriteString(`}`)
		} else {
			close.WriteString(`]`)
		}
	}
	return open.String() + leaf + close.String()
}

// deepUpdate is a tool_call_update levels deep, the update object being
// level 1: its rawInput holds the rest.
func deepUpdate(levels int) string {
	return `{"sessionUpdate":"tool_call_update","toolCallId":"c","status":"completed","rawInput":` + nested(levels-1, `"leaf"`) + `}`
}

// Every decoder takes JSON nested MaxDepth levels deep and refuses one
// level more, so that no update they make nests deeper than protobuf
// reads back (an event of rawInput 6,000 or 9,900 levels deep was stored
// and streamed, and then failed to decode: Watch and GetSession answered
// internal for its session for good).
func TestDepthCap(t *testing.T) {
	t.Parallel()
	for _, levels := range []int{1, 2, MaxDepth - 1, MaxDepth, MaxDepth + 1, MaxDepth + 2, 1000, 6000, 9900} {
		over := levels > MaxDepth
		if levels == 1 {
			levels = 2 // the update object and its rawInput's scalar
		}
		doc := []byte(deepUpdate(levels))
		if got := testutil.Nesting(t, doc); got != levels {
			t.Fatalf("deepUpdate(%d) nests %d levels", levels, got)
		}
		for _, v := range []Version{V1, V2} {
			u, err := DecodeUpdate(doc, v)
			switch {
			case over && err == nil:
				t.Fatalf("%d levels, v%d: DecodeUpdate took it", levels, v)
			case over && !strings.Contains(err.Error(), "nested more than 64 levels deep"):
				t.Fatalf("%d levels, v%d: error %q does not say what is wrong", levels, v, err)
			case !over && err != nil:
				t.Fatalf("%d levels, v%d: %v", levels, v, err)
			case !over:
				checkReadBack(t, u)
			}
			// The one-pass decode takes what DecodeUpdate takes, and
			// leaves the rest to it.
			n, ok := DecodeNotification(notificationOf(string(doc)), v)
			if ok == over || ok && (n.Err != nil || !proto.Equal(n.Update, u)) {
				t.Fatalf("%d levels, v%d: DecodeNotification = %v, %v (err %v)", levels, v, n.Update, ok, n.Err)
			}
		}
		// What DecodeUpdate refuses is kept, within the cap.
		kept := KeepUnknown(doc)
		checkReadBack(t, kept)
		if d := structLevels(kept.GetUnknown().GetBody()); d > MaxDepth {
			t.Fatalf("%d levels: KeepUnknown kept %d levels", levels, d)
		}
		if over {
			checkClippedText(t, doc, kept.GetUnknown().GetBody())
		}
	}
}

// checkReadBack checks that u, as an event holds it, decodes from its
// encoding with protobuf's default limits.
func checkReadBack(t *testing.T, u *acpv2.SessionUpdate) {
	t.Helper()
	b, err := proto.Marshal(u)
	if err != nil {
		t.Fatal(err)
	}
	back := &acpv2.SessionUpdate{}
	if err := proto.Unmarshal(b, back); err != nil {
		t.Fatalf("a decoded update does not read back: %v", err)
	}
	if !proto.Equal(back, u) {
		t.Fatal("a decoded update reads back changed")
	}
}

// structLevels is how deep s nests JSON arrays and objects, s itself
// being level 1.
func structLevels(s *structpb.Struct) int {
	var value func(v *structpb.Value) int
	fields := func(s *structpb.Struct) int {
		n := 0
		for _, v := range s.GetFields() {
			n = max(n, value(v))
		}
		return n + 1
	}
	value = func(v *structpb.Value) int {
		switch k := v.GetKind().(type) {
		case *structpb.Value_StructValue:
			return fields(k.StructValue)
		case *structpb.Value_ListValue:
			n := 0
			for _, e := range k.ListValue.GetValues() {
				n = max(n, value(e))
			}
			return n + 1
		}
		return 0
	}
	return fields(s)
}

// checkClippedText checks that body, KeepUnknown's of doc, holds what
// lies deeper than MaxDepth as JSON text: put back in place, it gives doc.
func checkClippedText(t *testing.T, doc []byte, body *structpb.Struct) {
	t.Helper()
	var unclip func(v any) any
	unclip = func(v any) any {
		switch x := v.(type) {
		case string:
			var inner any
			if strings.HasPrefix(x, "{") || strings.HasPrefix(x, "[") {
				if json.Unmarshal([]byte(x), &inner) == nil {
					return inner
				}
			}
		case map[string]any:
			for k, e := range x {
				x[k] = unclip(e)
			}
		case []any:
			for i, e := range x {
				x[i] = unclip(e)
			}
		}
		return v
	}
	var want any
	if err := json.Unmarshal(doc, &want); err != nil {
		t.Fatal(err)
	}
	got := unclip(body.AsMap())
	if !deepEqualJSON(t, got, want) {
		t.Fatalf("KeepUnknown lost what lay deeper than MaxDepth")
	}
}

// deepEqualJSON compares two values by their JSON.
func deepEqualJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(ja) == string(jb)
}

// The other documents the gateway decodes from agents, and stores, have
// the same cap.
func TestDepthCapOtherDocuments(t *testing.T) {
	t.Parallel()
	deep := nested(MaxDepth, "1") // one level more than each document takes
	for name, decode := range map[string]func(string) error{
		"permission request meta": func(inner string) error {
			_, err := DecodePermissionRequest([]byte(`{"toolCall":{"toolCallId":"c"},"options":[],"_meta":`+inner+`}`), V1)
			return err
		},
		"permission request tool call": func(inner string) error {
			_, err := DecodePermissionRequest([]byte(`{"options":[],"toolCall":{"toolCallId":"c","rawInput":`+inner+`}}`), V1)
			return err
		},
		"config options": func(inner string) error {
			return Decode([]byte(`{"configOptions":[],"_meta":`+inner+`}`), &acpv2.ConfigOptionUpdate{}, V2)
		},
	} {
		if err := decode(deep); err == nil || !strings.Contains(err.Error(), "nested more than") {
			t.Errorf("%s %d levels deep: %v, want refused", name, MaxDepth+1, err)
		}
		shallow := nested(MaxDepth-2, "1")
		if err := decode(shallow); err != nil {
			t.Errorf("%s %d levels deep: %v", name, MaxDepth, err)
		}
	}
}

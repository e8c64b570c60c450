package acpjson_test

import (
	"encoding/json"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
)

// A v2 diff's changes and patch are typed fields, not extra members,
// whichever decoder takes the update: the agent's one-pass read of the
// whole line (which leaves v2 diffs to the generic decoder) and
// DecodeUpdate alike. v1's whole texts stay where they were.
func TestV2DiffIsTyped(t *testing.T) {
	t.Parallel()
	patch := "diff --git a/w/a.go b/w/a.go\n--- a/w/a.go\n+++ b/w/a.go\n@@ -1 +1 @@\n-x\n+y\n"
	for _, tc := range []struct {
		name, item string
		want       *acpv2.Diff
	}{
		{
			name: "changes and patch",
			item: `{"type":"diff","changes":[{"operation":"modify","path":"/w/a.go","fileType":"text","mimeType":"text/x-go"},{"operation":"move","oldPath":"/w/o","path":"/w/n","_meta":{"k":"v"},"similarity":90}],"patch":{"format":"git_patch","text":` + quote(patch) + `}}`,
			want: &acpv2.Diff{
				Changes: []*acpv2.DiffChange{
					{Operation: "modify", Path: proto.String("/w/a.go"), FileType: proto.String("text"), MimeType: proto.String("text/x-go")},
					{Operation: "move", Path: proto.String("/w/n"), OldPath: proto.String("/w/o"),
						Meta: jsonStruct(t, `{"k":"v"}`), Extra: jsonStruct(t, `{"similarity":90}`)},
				},
				Patch: &acpv2.DiffPatch{Format: "git_patch", Text: patch},
			},
		},
		{
			name: "changes alone",
			item: `{"type":"diff","changes":[{"operation":"delete","path":"/w/gone"}],"patch":null}`,
			want: &acpv2.Diff{Changes: []*acpv2.DiffChange{{Operation: "delete", Path: proto.String("/w/gone")}}},
		},
		{
			name: "v1 whole texts",
			item: `{"type":"diff","path":"/w/a","oldText":"x","newText":"y"}`,
			want: &acpv2.Diff{Path: proto.String("/w/a"), OldText: proto.String("x"), NewText: proto.String("y")},
		},
	} {
		update := `{"sessionUpdate":"tool_call_update","toolCallId":"c1","content":[` + tc.item + `]}`
		line := `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":` + update + `}}`
		n, ok := acpjson.DecodeNotification([]byte(line), acpjson.V2)
		if !ok || n.Err != nil {
			t.Fatalf("%s: DecodeNotification: %v %v", tc.name, ok, n.Err)
		}
		u, err := acpjson.DecodeUpdate([]byte(update), acpjson.V2)
		if err != nil {
			t.Fatal(err)
		}
		for how, got := range map[string]*acpv2.SessionUpdate{"DecodeNotification": n.Update, "DecodeUpdate": u} {
			items := got.GetToolCallUpdate().GetContent().GetValue().GetItems()
			if len(items) != 1 || items[0].GetExtra() != nil || !proto.Equal(items[0].GetDiff(), tc.want) {
				t.Fatalf("%s: %s decoded %v, want the diff %v", tc.name, how, items, tc.want)
			}
		}
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

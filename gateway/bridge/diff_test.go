package bridge

import (
	"encoding/json"
	"testing"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// item decodes one tool-call content item of ACP v2 JSON.
func item(t *testing.T, js string) *acpv2.ToolCallContent {
	t.Helper()
	c := &acpv2.ToolCallContent{}
	if err := acpjson.Decode([]byte(js), c, acpjson.V2); err != nil {
		t.Fatal(err)
	}
	return c
}

// encodeItems writes items as a JSON array in version v.
func encodeItems(t *testing.T, items []*acpv2.ToolCallContent, v acpjson.Version) []byte {
	t.Helper()
	var out []json.RawMessage
	for _, it := range items {
		js, err := acpjson.Encode(it, v)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, js)
	}
	b, _ := json.Marshal(out)
	return b
}

const (
	addPatch = "diff --git a/w/new.txt b/w/new.txt\nnew file mode 100644\nindex 0000000..3b18e51\n--- /dev/null\n+++ b/w/new.txt\n@@ -0,0 +1,2 @@\n+hello\n+world\n\\ No newline at end of file\n"
	modPatch = "diff --git a/w/a.go b/w/a.go\nindex 1..2 100644\n--- a/w/a.go\n+++ b/w/a.go\n@@ -1,2 +1,2 @@\n package a\n-x\n+y\n"
)

// A v1 editor gets a v2 diff as v1 can carry it: an added file whose
// whole text the git patch holds as a v1 diff; other changes, and patch
// sections that are not whole texts, as text; v1 members, when the agent
// sent them too, as they are.
func TestV1ContentFromV2Diffs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, item, want string }{
		{
			name: "added file and modified file",
			item: `{"type":"diff","changes":[{"operation":"add","path":"/w/new.txt"},{"operation":"modify","path":"/w/a.go"}],` +
				`"patch":{"format":"git_patch","text":` + quote(addPatch+modPatch) + `},"_meta":{"m":1}}`,
			want: `[{"type":"diff","path":"/w/new.txt","newText":"hello\nworld","_meta":{"m":1}},` +
				`{"type":"content","content":{"type":"text","text":` + quote("modify /w/a.go\n\n```diff\n"+modPatch+"```\n") + `},"_meta":{"m":1}}]`,
		},
		{
			name: "changes without a patch",
			item: `{"type":"diff","changes":[{"operation":"move","oldPath":"/w/o","path":"/w/n"},{"operation":"delete","path":"/w/gone"}]}`,
			want: `[{"type":"content","content":{"type":"text","text":"move /w/o -> /w/n\ndelete /w/gone\n"}}]`,
		},
		{
			name: "another patch format",
			item: `{"type":"diff","changes":[{"operation":"add","path":"/w/n"}],"patch":{"format":"_svn","text":"Index: n"}}`,
			want: `[{"type":"content","content":{"type":"text","text":` + quote("add /w/n\n\n```diff\nIndex: n\n```\n") + `}}]`,
		},
		{
			name: "both versions' members",
			item: `{"type":"diff","path":"/w/a","oldText":"x","newText":"y","changes":[{"operation":"modify","path":"/w/a"}]}`,
			want: `[{"type":"diff","path":"/w/a","oldText":"x","newText":"y"}]`,
		},
		{
			name: "a v1 diff",
			item: `{"type":"diff","path":"/w/a","newText":"y"}`,
			want: `[{"type":"diff","path":"/w/a","newText":"y"}]`,
		},
	} {
		items, _ := v1Content([]*acpv2.ToolCallContent{item(t, tc.item)})
		if got := encodeItems(t, items, acpjson.V1); !testutil.JSONEqual(t, got, []byte(tc.want)) {
			t.Errorf("%s: got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}

// A v2 editor gets a v1 diff with the changes v2 requires, beside its v1
// members; a v2 diff as it is.
func TestV2ContentFromV1Diffs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ item, want string }{
		{`{"type":"diff","path":"/w/a","oldText":"x","newText":"y"}`,
			`[{"type":"diff","path":"/w/a","oldText":"x","newText":"y","changes":[{"operation":"modify","path":"/w/a"}]}]`},
		{`{"type":"diff","path":"/w/n","newText":"y"}`,
			`[{"type":"diff","path":"/w/n","newText":"y","changes":[{"operation":"add","path":"/w/n"}]}]`},
		{`{"type":"diff","changes":[{"operation":"delete","path":"/w/a"}]}`,
			`[{"type":"diff","changes":[{"operation":"delete","path":"/w/a"}]}]`},
	} {
		items, _ := v2Content([]*acpv2.ToolCallContent{item(t, tc.item)})
		if got := encodeItems(t, items, acpjson.V2); !testutil.JSONEqual(t, got, []byte(tc.want)) {
			t.Errorf("%s: got %s\nwant %s", tc.item, got, tc.want)
		}
	}
}

// A v2 permission request about a command reaches a v1 editor as a
// made-up execute tool call carrying the command and the description, and
// a v2 editor with its description and subject.
func TestPermissionParamsOfACommand(t *testing.T) {
	t.Parallel()
	desc := "It cleans the build."
	pr := &acpv2.PermissionRequest{
		RequestId:   "r1",
		Title:       "Clean?",
		Description: &desc,
		Subject: &acpv2.PermissionSubject{Subject: &acpv2.PermissionSubject_Command{Command: &acpv2.CommandSubject{
			Command: "rm -rf build", Cwd: "/w"}}},
		Options: []*acpv2.PermissionOption{{OptionId: "y", Name: "Yes", Kind: "allow_once"}},
	}
	for v, want := range map[acpjson.Version]string{
		acpjson.V1: `{"sessionId":"s","options":[{"optionId":"y","name":"Yes","kind":"allow_once"}],"toolCall":{"toolCallId":"permission-r1","title":"Clean?","kind":"execute",` +
			`"content":[{"type":"content","content":{"type":"text","text":"It cleans the build."}}],"rawInput":{"command":"rm -rf build","cwd":"/w"}}}`,
		acpjson.V2: `{"sessionId":"s","options":[{"optionId":"y","name":"Yes","kind":"allow_once"}],"title":"Clean?","description":"It cleans the build.",` +
			`"subject":{"type":"command","command":"rm -rf build","cwd":"/w"}}`,
	} {
		b := &bridge{}
		got, err := b.permissionParams(&session{id: "s", conv: newConverter(v)}, pr)
		if err != nil {
			t.Fatal(err)
		}
		if !testutil.JSONEqual(t, got, []byte(want)) {
			t.Errorf("v%d: got %s\nwant %s", v, got, want)
		}
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

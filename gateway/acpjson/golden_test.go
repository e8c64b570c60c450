package acpjson_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/acp-gateway/acp-gateway/gateway/acpjson"
	acpv2 "github.com/acp-gateway/acp-gateway/gen/acp/v2"
	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// goldenCase is one vector in testdata/golden: an update as an agent of
// Version sends it, and its v2 form (the input itself when V2 is absent).
type goldenCase struct {
	Name    string          `json:"name"`
	Source  string          `json:"source"`
	Version int             `json:"version"`
	Input   json.RawMessage `json:"input"`
	V2      json.RawMessage `json:"v2"`
}

func loadGolden(t testing.TB) []goldenCase {
	t.Helper()
	files, err := filepath.Glob("testdata/golden/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	var all []goldenCase
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var cases []goldenCase
		if err := json.Unmarshal(data, &cases); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for i := range cases {
			cases[i].Name = filepath.Base(f) + "/" + cases[i].Name
		}
		all = append(all, cases...)
	}
	return all
}

func TestGoldenDecodeEncodeV2(t *testing.T) {
	t.Parallel()
	for _, c := range loadGolden(t) {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			want := c.V2
			if want == nil {
				want = c.Input
			}
			u, err := acpjson.DecodeUpdate(c.Input, acpjson.Version(c.Version))
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			got, err := acpjson.EncodeUpdate(u, acpjson.V2)
			if err != nil {
				t.Fatalf("encode: %v", err)
			}
			if !testutil.JSONEqual(t, got, want) {
				t.Fatalf("v2 JSON differs\n got: %s\nwant: %s", got, want)
			}

			// The v2 form is a fixed point: v2 JSON -> proto -> v2 JSON.
			u2, err := acpjson.DecodeUpdate(want, acpjson.V2)
			if err != nil {
				t.Fatalf("decode v2 form: %v", err)
			}
			again, err := acpjson.EncodeUpdate(u2, acpjson.V2)
			if err != nil {
				t.Fatalf("encode v2 form: %v", err)
			}
			if !testutil.JSONEqual(t, again, want) {
				t.Fatalf("v2 round trip differs\n got: %s\nwant: %s", again, want)
			}

			// What clients receive is proto JSON and proto binary: both must
			// carry the update without loss.
			pj, err := protojson.Marshal(u)
			if err != nil {
				t.Fatal(err)
			}
			var fromJSON acpv2.SessionUpdate
			if err := protojson.Unmarshal(pj, &fromJSON); err != nil {
				t.Fatalf("protojson: %v\n%s", err, pj)
			}
			bin, err := proto.Marshal(u)
			if err != nil {
				t.Fatal(err)
			}
			var fromBin acpv2.SessionUpdate
			if err := proto.Unmarshal(bin, &fromBin); err != nil {
				t.Fatal(err)
			}
			for name, m := range map[string]*acpv2.SessionUpdate{"proto JSON": &fromJSON, "proto binary": &fromBin} {
				out, err := acpjson.EncodeUpdate(m, acpjson.V2)
				if err != nil {
					t.Fatal(err)
				}
				if !testutil.JSONEqual(t, out, want) {
					t.Fatalf("after %s the v2 JSON differs\n got: %s\nwant: %s", name, out, want)
				}
			}
		})
	}
}

func TestGoldenSeedsPresent(t *testing.T) {
	t.Parallel()
	// Every JSON example of the seed documents is a vector; losing the file
	// must not pass silently.
	n := 0
	for _, c := range loadGolden(t) {
		if c.Source != "" {
			n++
		}
	}
	if n < 10 {
		t.Fatalf("only %d seed vectors; testdata/golden/seeds.json lost some", n)
	}
}

func TestEncodeIsCompact(t *testing.T) {
	t.Parallel()
	u, err := acpjson.DecodeUpdate([]byte(`{"sessionUpdate":"tool_call_update","toolCallId":"c1","title":"x"}`), acpjson.V2)
	if err != nil {
		t.Fatal(err)
	}
	out, err := acpjson.EncodeUpdate(u, acpjson.V2)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, []byte(`{"sessionUpdate":"tool_call_update","toolCallId":"c1","title":"x"}`)) {
		t.Fatalf("got %s", out)
	}
}

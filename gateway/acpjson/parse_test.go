package acpjson

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/acp-gateway/acp-gateway/internal/testutil"
)

// checkParse checks the fast parser against encoding/json on data.
func checkParse(t *testing.T, data []byte) {
	t.Helper()
	fast, ok := parseFast(data)
	valid := json.Valid(data)
	switch {
	case ok && !valid:
		t.Fatalf("fast parser accepts what encoding/json refuses: %q -> %#v", data, fast)
	case ok:
		want, _, err := parseStd(data)
		if err != nil || !reflect.DeepEqual(fast, want) {
			t.Fatalf("%q: fast parser gives %#v, encoding/json %#v (%v)", data, fast, want, err)
		}
	case valid && testutil.Nesting(t, data) <= MaxDepth:
		t.Fatalf("fast parser gives up on valid JSON %q", data)
	}
	// parseJSON, whichever parser answers, gives what encoding/json alone does.
	v, trailing, deep, err := parseJSON(data)
	wv, wtrailing, werr := parseStd(data)
	if !reflect.DeepEqual(v, wv) || trailing != wtrailing || (err == nil) != (werr == nil) || err != nil && err.Error() != werr.Error() {
		t.Fatalf("%q: parseJSON = %#v, %v, %v; encoding/json alone %#v, %v, %v", data, v, trailing, err, wv, wtrailing, werr)
	}
	// It tells a value nested deeper than MaxDepth.
	if want := werr == nil && levels(wv) > MaxDepth; deep != want {
		t.Fatalf("%q: parseJSON says deep %v; its value is %d levels deep", data, deep, levels(wv))
	}
}

// levels is how deep a parsed value nests arrays and objects.
func levels(v any) int {
	n := 0
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			n = max(n, levels(e))
		}
	case []any:
		for _, e := range x {
			n = max(n, levels(e))
		}
	default:
		return 0
	}
	return n + 1
}

var parseSeeds = []string{
	``, ` `, `{}`, `[]`, `[[]]`, `{"a":{}}`, ` {"a" : [1, 2.5, -3e+2, 0, -0, 1E-7, true, false, null, "x"]} `,
	`"plain"`, `"esc \" \\ \/ \b \f \n \r \t"`, `"\u00e9\u65e5"`, `"ünï 日本 😀"`,
	`"\ud83d\ude00"`, `"\ud800"`, `"\udc00"`, `"\ud800\u0041"`, `"\udc00\ud800"`, `"\ud800\ud800\udc00"`, `"\ud800\u12"`,
	"\"bad \xff\xfe utf8\"", "\"surrogate bytes \xed\xa0\x80\"", "\"replacement \xef\xbf\xbd\"", "\"ctl \x01\"", "\"del \x7f\"",
	`"\x"`, `"\u12g4"`, `"unterminated`, `"\`,
	`01`, `1.`, `.5`, `-`, `+1`, `1e`, `1e+`, `--1`, `1.5.3`, `0x10`, `1 2`, `1x`, `[1x]`, `[01]`, `-01`, `123456789012345678901234567890`,
	`[1,]`, `[,1]`, `{"a":1,}`, `{"a" 1}`, `{"a":1 "b":2}`, `{a:1}`, `{"a":1}{"b":2}`, `{"a":1} x`, `[1] ]`, `{"a":}`, `{,}`,
	`nul`, `truex`, `true false`, `[true"a"]`, `{"a":1,"a":2}`, `{"":0}`, "\ufeff{}", "{\"a\":\x00}", `{"sessionUpdate":"tool_call","toolCallId":"c"}`,
	strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth),
	strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1),
	strings.Repeat(`{"a":`, 10001) + "1" + strings.Repeat("}", 10001),
}

func TestParseMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, s := range parseSeeds {
		checkParse(t, []byte(s))
	}
	files, _ := filepath.Glob("testdata/golden/*.json")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		checkParse(t, data)
		var cases []struct{ Input, V2 json.RawMessage }
		if err := json.Unmarshal(data, &cases); err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			checkParse(t, c.Input)
			checkParse(t, c.V2)
		}
	}
}

// FuzzParse: the fast parser accepts only valid JSON, decodes it exactly as
// encoding/json does, and leaves parseJSON's results unchanged.
func FuzzParse(f *testing.F) {
	for _, s := range parseSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkParse(t, data)
	})
}

package acpjson

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
)

// protoSeeds are JSON values for protoValue, valid and not.
var protoSeeds = []string{
	`null`, `true`, `false`, `0`, `-0`, `7`, `-12.5e3`, `1e400`, `-1e400`, `1e-400`, `123456789012345678901234567890`,
	`""`, `"plain"`, `"tool_call"`, `"esc\"aped\n\u00e9\ud83d\ude00"`, "\"bad \xff utf-8\"", `"lone \ud800 surrogate"`,
	`[]`, `[1,"a",null,true,[],{}]`, `[[1,[2,[3]]],{"a":[{"b":null}]}]`,
	`{}`, `{"a":1,"b":"x","c":{"d":[false]}}`, `{"a":1,"a":{"b":2}}`, "{\"k\xff\":1}",
	// Refused.
	`[1,`, `[1 2]`, `{"a"}`, `{"a":}`, `tru`, `nul`, `falsey`, `-`, `01`, `1.`, `"open`, `[`, `{`, `]`, ``,
	strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1),
}

// checkProtoValue checks protoValue against toValue of the parser's
// generic value.
func checkProtoValue(t *testing.T, data []byte) {
	t.Helper()
	p := getParser(data)
	got, ok := p.protoValue()
	if ok {
		p.ws()
		ok = p.i == len(p.data)
	}
	if len(p.vals) != 0 {
		t.Fatalf("%q: protoValue left %d list elements behind", data, len(p.vals))
	}
	putParser(p)
	v, wantOK := parseFast(data)
	if ok != wantOK {
		t.Fatalf("%q: protoValue ok %v, value ok %v", data, ok, wantOK)
	}
	if ok && !proto.Equal(got, toValue(v)) {
		t.Fatalf("%q: protoValue gives %v, toValue %v", data, got, toValue(v))
	}
}

func TestProtoValueMatchesToValue(t *testing.T) {
	for _, s := range protoSeeds {
		checkProtoValue(t, []byte(s))
	}
}

func FuzzProtoValue(f *testing.F) {
	for _, s := range protoSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(checkProtoValue)
}

// A parser's cache of member names gives each name as parsed, however
// many names share its slots, and leaves long names out.
func TestParserNames(t *testing.T) {
	p := new(parser)
	for round := range 3 {
		for i := range 200 {
			name := fmt.Sprintf("k%d", i) + strings.Repeat("x", i%40)
			if got := p.name([]byte(name)); got != name {
				t.Fatalf("round %d: name(%q) = %q", round, name, got)
			}
		}
	}
	b := []byte("reused")
	first := p.name(b)
	copy(b, "REUSED")
	if first != "reused" || p.name(b) != "REUSED" {
		t.Fatalf("names share the parsed bytes: %q, %q", first, p.name(b))
	}
}

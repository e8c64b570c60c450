package acpjson

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
)

// readerSeeds are JSON documents, valid and not, for the reader.
var readerSeeds = []string{
	``, ` `, `{}`, `[]`, `[[]]`, `{"a":{}}`, ` {"a" : [1, 2.5, -3e+2, 0, -0, 1E-7, true, false, null, "x"]} `,
	`"plain"`, `"esc \" \\ \/ \b \f \n \r \t"`, `"\u00e9\u65e5"`, `"ünï 日本 😀"`,
	`"\ud83d\ude00"`, `"\ud800"`, `"\udc00"`, `"\ud800\u0041"`, `"\udc00\ud800"`, `"\ud800\ud800\udc00"`, `"\ud800\u12"`,
	"\"bad \xff\xfe utf8\"", "\"surrogate bytes \xed\xa0\x80\"", "\"replacement \xef\xbf\xbd\"", "\"ctl \x01\"", "\"del \x7f\"",
	`"\x"`, `"\u12g4"`, `"unterminated`, `"\`,
	`01`, `1.`, `.5`, `-`, `+1`, `1e`, `1e+`, `--1`, `1.5.3`, `0x10`, `1 2`, `1x`, `[1x]`, `[01]`, `-01`, `123456789012345678901234567890`, `1e400`, `-1e400`, `1e-400`,
	`[1,]`, `[,1]`, `{"a":1,}`, `{"a" 1}`, `{"a":1 "b":2}`, `{a:1}`, `{"a":1}{"b":2}`, `{"a":1} x`, `[1] ]`, `{"a":}`, `{,}`, `[1 2]`, `{"a"}`, `{"a":1]`, `[1}`,
	`nul`, `truex`, `true false`, `[true"a"]`, `{"a":1,"a":2}`, `{"":0}`, "\ufeff{}", "{\"a\":\x00}", "{\"k\xff\":1}",
	strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth),
	strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1),
	strings.Repeat(`{"a":`, 10001) + "1" + strings.Repeat("}", 10001),
}

// checkReader reads data as one value into a google.protobuf Value: the
// reader takes exactly the documents encoding/json takes, no deeper than
// MaxDepth, and reads them as toValue makes encoding/json's values.
func checkReader(t *testing.T, data []byte) {
	t.Helper()
	r := getReader(data, MaxDepth)
	got, err := r.value()
	ok := err == nil && r.end()
	putReader(r)
	want, trailing, werr := parseStd(data)
	wantOK := werr == nil && !trailing && !deeper(want, MaxDepth)
	if ok != wantOK {
		t.Fatalf("%q: the reader takes it %v (%v), encoding/json %v (%v)", data, ok, err, wantOK, werr)
	}
	if ok && !proto.Equal(got, toValue(want)) {
		t.Fatalf("%q: the reader gives %v, encoding/json %v", data, got, toValue(want))
	}
}

func TestReaderMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, s := range readerSeeds {
		checkReader(t, []byte(s))
	}
	seeds, _ := allSeeds(t)
	for _, s := range seeds {
		checkReader(t, []byte(s))
	}
}

// FuzzReader: the reader takes only valid JSON and reads it as
// encoding/json does.
func FuzzReader(f *testing.F) {
	for _, s := range readerSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(checkReader)
}

// A reader's cache of member names gives each name as read, however many
// names share its slots, and leaves long names out.
func TestReaderNames(t *testing.T) {
	r := new(reader)
	for round := range 3 {
		for i := range 200 {
			name := strings.Repeat("x", i%40) + string(rune('a'+i%26)) + strings.Repeat("k", i/26)
			if got := r.key([]byte(name)); got != name {
				t.Fatalf("round %d: key(%q) = %q", round, name, got)
			}
		}
	}
	b := []byte("reused")
	first := r.key(b)
	copy(b, "REUSED")
	if first != "reused" || r.key(b) != "REUSED" {
		t.Fatalf("names share the read bytes: %q, %q", first, r.key(b))
	}
}

package bridge

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
)

// TestLineStreamRefusesWhatItCannotRead: a line over the limit, or one
// that is not JSON, gets the editor a JSON-RPC error with a null id, and
// the lines after it are read.
func TestLineStreamRefusesWhatItCannotRead(t *testing.T) {
	t.Parallel()
	const limit = 16
	atLimit := `{"a":"` + strings.Repeat("x", limit-8) + `"}`
	lines := []string{
		atLimit + "\r\n", // the limit, with CRLF: read
		`{"a":"` + strings.Repeat("x", limit-7) + `"}` + "\n", // one byte over
		`"` + strings.Repeat("x", 200<<10) + `"` + "\n",       // over the read buffer
		"not JSON\n",
		"\n",
		`{"b":1}`, // the last line, with no end
	}
	var out bytes.Buffer
	s := newLineStream(strings.NewReader(strings.Join(lines, "")), &out, limit)
	var got []string
	for {
		var m json.RawMessage
		if err := s.ReadObject(&m); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("read: %v", err)
			}
			break
		}
		got = append(got, string(m))
	}
	if want := []string{atLimit, `{"b":1}`}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("read %q, want %q", got, want)
	}
	var codes []int
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var m map[string]any
		err := json.Unmarshal([]byte(l), &m)
		if id, ok := m["id"]; err != nil || !ok || id != nil {
			t.Fatalf("the editor got %q, want an error with a null id", l)
		}
		code, _ := m["error"].(map[string]any)["code"].(float64)
		codes = append(codes, int(code))
	}
	if want := []int{-32600, -32600, -32700}; len(codes) != len(want) || codes[0] != want[0] || codes[1] != want[1] || codes[2] != want[2] {
		t.Errorf("the editor got errors %v, want %v", codes, want)
	}
}

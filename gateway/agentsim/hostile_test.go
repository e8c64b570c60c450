package agentsim_test

import (
	"context"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
)

func TestFlood(t *testing.T) {
	t.Parallel()
	const n = 500
	h := start(t, oneTurn(
		agentsim.Step{Flood: &agentsim.Flood{Count: n, Update: msg("u{{n}} in {{cwd}}")}},
		agentsim.Step{Update: msg("after")},
	), clientConfig{})
	h.initialize()
	id := h.newSession("/w")
	if got := h.run(id); got != "end_turn" {
		t.Errorf("stopReason = %q", got)
	}
	got := texts(h.allUpdates())
	if len(got) != n+1 || got[n] != "after" {
		t.Fatalf("got %d updates ending %q, want %d then \"after\"", len(got), got[len(got)-1], n)
	}
	for i, text := range got[:n] {
		if want := "u" + strconv.Itoa(i+1) + " in /w"; text != want {
			t.Fatalf("update %d = %q, want %q", i, text, want)
		}
	}
}

func TestFloodStopsWhenCancelled(t *testing.T) {
	t.Parallel()
	h := start(t, oneTurn(agentsim.Step{Flood: &agentsim.Flood{Count: 1 << 30, Update: msg("x")}}), clientConfig{})
	h.initialize()
	id := h.newSession("/w")
	pp := h.prompt(id)
	h.waitUpdates(10)
	h.notify("session/cancel", map[string]string{"sessionId": id})
	if got := pp.wait(t); got != "cancelled" {
		t.Fatalf("stopReason = %q, want cancelled", got)
	}
}

func TestLongLineAndRawBytes(t *testing.T) {
	t.Parallel()
	r := startRaw(t, oneTurn(agentsim.Step{LongLine: 5000}, agentsim.Step{LongLine: 1}, agentsim.Step{RawBytes: []byte("{\"a\":\"\xff\xfe\"}")}))
	r.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}`)
	r.next()
	r.send(`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/w","mcpServers":[]}}`)
	r.next()
	r.send(`{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"sim-session-1","prompt":[]}}`)
	long, short, rawBytes := r.next(), r.next(), r.next()
	if len(long) != 5000 || !json.Valid([]byte(long)) || !strings.Contains(long, `"method":"session/update"`) {
		t.Errorf("long line of %d bytes, want a 5000-byte session/update: %.200s", len(long), long)
	}
	if !json.Valid([]byte(short)) || !strings.Contains(short, `"text":""`) {
		t.Errorf("shortest long line %q, want an empty text chunk", short)
	}
	if rawBytes != "{\"a\":\"\xff\xfe\"}" {
		t.Errorf("raw bytes line %q", rawBytes)
	}
}

func TestHostileStepsValidate(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		step agentsim.Step
		want string
	}{
		"negative flood":   {agentsim.Step{Flood: &agentsim.Flood{Count: -1, Update: msg("x")}}, "flood.count"},
		"flood not object": {agentsim.Step{Flood: &agentsim.Flood{Count: 1, Update: raw(`"x"`)}}, "flood.update"},
		"negative line":    {agentsim.Step{LongLine: -1}, "longLine"},
		"raw bytes lines":  {agentsim.Step{RawBytes: []byte("a\nb")}, "rawBytes: must be one line"},
		"two actions":      {agentsim.Step{LongLine: 10, RawBytes: []byte("x")}, "does more than one thing"},
	} {
		err := agentsim.Serve(context.Background(), strings.NewReader(""), io.Discard, oneTurn(tc.step), nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Serve = %v, want an error containing %q", name, err, tc.want)
		}
	}
	// RawBytes that are not UTF-8 survive the script's JSON.
	s := oneTurn(agentsim.Step{RawBytes: []byte{0xff, 'a'}})
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back agentsim.Script
	if err := json.Unmarshal(b, &back); err != nil || string(back.Turns[0].Steps[0].RawBytes) != "\xffa" {
		t.Fatalf("round trip of raw bytes: %q, %v", back.Turns[0].Steps[0].RawBytes, err)
	}
}

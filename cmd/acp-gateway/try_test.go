package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/kballard/go-shellquote"

	"github.com/acp-gateway/acp-gateway/gateway/agentsim"
	"github.com/acp-gateway/acp-gateway/gateway/bridge"
)

// elicitingAgent is `--agent elicit=...` for an agent that asks a form
// (a required name, an age, a yes-or-no, a size of two, tags of two) and
// then a url, whose message holds a terminal escape, and reports each
// answer as a message ("elicit <action> <content>").
func elicitingAgent(t *testing.T) string {
	t.Helper()
	cmd, err := agentsim.Command(agentsim.Script{ProtocolVersion: 2, Turns: []agentsim.Turn{{Steps: []agentsim.Step{
		{Elicit: json.RawMessage(`{"mode":"form","message":"Your details","requestedSchema":{"type":"object","properties":{` +
			`"name":{"type":"string"},"age":{"type":"integer"},"tea":{"type":"boolean"},` +
			`"size":{"type":"string","enum":["s","m"]},"tags":{"type":"array","items":{"type":"string","enum":["a","b"]}},` +
			`"note":{"type":"string"}},"required":["name"]}}`)},
		{Elicit: json.RawMessage(`{"mode":"url","message":"Log in\u001b[2J","url":"https://example.com/login","elicitationId":"e-1"}`)},
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	return "elicit=" + shellquote.Join(cmd...)
}

// try asks a form's properties by their type, again until an answer fits
// (a whole number, a required name, one of an enum), leaves an optional
// one empty, and accepts with what was entered; it shows a url
// elicitation's URL and declines it as told. The agent's escape sequence
// does not reach the terminal.
func TestTryAnswersElicitationsOnTheTerminal(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, exited := startServe(t, ctx, "--agent", elicitingAgent(t))
	// accept; age, name, note, size, tags, tea (by name); then decline.
	input := "a\n3.5\n36\n\nAda\n\nxl\nm\na, b\nyes\nd\n"
	var out, asked bytes.Buffer
	ask := &asker{in: bufio.NewReader(strings.NewReader(input)), interactive: true, ask: &asked}
	if err := runTry(ctx, bridge.NewClient(http.DefaultClient, "http://"+addr, ""), "elicit", "", "hi", jsonPrinter{&out}, ask); err != nil {
		t.Fatalf("try: %v\n%s", err, out.String())
	}
	for _, want := range []string{`with accept`, `elicit accept {\"age\":36,\"name\":\"Ada\",\"size\":\"m\",\"tags\":[\"a\",\"b\"],\"tea\":true}`,
		`with decline`, `"text":"elicit decline"`, `0 elicitations waiting`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("try's output lacks %s:\n%s", want, out.String())
		}
	}
	for _, want := range []string{"Your details", "age (a whole number): ", "want a whole number", "name (text, required): ",
		"name is required", "note (text): ", "size (one of s, m): ", "want one of s, m", "tags (comma-separated, of a, b): ",
		"tea (yes or no): ", "open https://example.com/login"} {
		if !strings.Contains(asked.String(), want) {
			t.Errorf("the questions lack %q:\n%s", want, asked.String())
		}
	}
	if strings.Contains(asked.String(), "\x1b") {
		t.Errorf("the agent's escape sequence reached the terminal: %q", asked.String())
	}
	stopServe(t, cancel, exited)
}

// Without a terminal on stdin, try declines every elicitation without
// reading it, and the turn ends.
func TestTryDeclinesElicitationsWithoutATerminal(t *testing.T) {
	// Not parallel: it sets the command's stdin.
	old := stdin
	stdin = strings.NewReader("a\nAda\n")
	defer func() { stdin = old }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, exited := startServe(t, ctx, "--agent", elicitingAgent(t))
	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"try", "--json", "--url", "http://" + addr, "--agent", "elicit"}, &out, &errOut); code != 0 {
		t.Fatalf("try exited %d: %s", code, errOut.String())
	}
	if n := strings.Count(out.String(), "with decline: stdin is not a terminal"); n != 2 {
		t.Errorf("%d elicitations declined for want of a terminal, want 2:\n%s", n, out.String())
	}
	if n := strings.Count(out.String(), `"text":"elicit decline"`); n != 2 {
		t.Errorf("the agent got %d declines, want 2:\n%s", n, out.String())
	}
	if errOut.Len() != 0 {
		t.Errorf("try asked without a terminal: %q", errOut.String())
	}
	stopServe(t, cancel, exited)
}

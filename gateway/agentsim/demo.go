package agentsim

import (
	"bytes"
	"encoding/json"
	"time"
)

// Demo returns the built-in demo script: protocol version 1, no session
// loading, and one turn (played by every prompt) that shows off the
// protocol in about three seconds, with short pauses so a person watching
// the stream sees it live.
//
// The turn streams a thought and a sentence in pieces, a three-entry plan
// that is updated as work progresses, a "read" tool call that completes with
// text content, an "edit" tool call with a diff that asks for permission
// (allowed: it completes; rejected: it fails and the agent says so), an
// "execute" tool call whose output streams as tool_call_update messages with
// growing content arrays before it completes, and a closing summary. Its
// paths are under the session's working directory, and it ends "end_turn".
//
// Nothing of it is real: no file is read or written and no command runs.
// Its first message says so ([DemoDisclaimer]), and its last says again
// that the contents, the edit and the output were made up, so that nobody
// takes the tour for work done on their project.
func Demo() Script {
	const (
		short  = Duration(100 * time.Millisecond)
		medium = Duration(150 * time.Millisecond)
		long   = Duration(200 * time.Millisecond)
	)
	sleep := func(d Duration) Step { return Step{Sleep: d} }
	say := func(text string) Step { return Step{Update: textChunk("agent_message_chunk", text)} }
	think := func(text string) Step { return Step{Update: textChunk("agent_thought_chunk", text)} }
	update := func(v any) Step { return Step{Update: mustJSON(v)} }
	plan := func(s1, s2, s3 string) Step {
		return update(obj{
			{"sessionUpdate", "plan"},
			{"entries", []obj{
				{{"content", "Read README.md to learn about the project"}, {"priority", "high"}, {"status", s1}},
				{{"content", "Add a greeting to hello.go"}, {"priority", "medium"}, {"status", s2}},
				{{"content", "Run the tests"}, {"priority", "low"}, {"status", s3}},
			}},
		})
	}
	text := func(s string) obj { return obj{{"type", "content"}, {"content", obj{{"type", "text"}, {"text", s}}}} }

	const (
		readme  = cwdPlaceholder + "/README.md"
		hello   = cwdPlaceholder + "/hello.go"
		oldText = "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hello\")\n}\n"
		newText = "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hello, ACP gateway!\")\n}\n"
	)
	testOutput := []string{
		"=== RUN   TestGreeting",
		"--- PASS: TestGreeting (0.00s)",
		"PASS",
		"ok  \tdemo\t0.012s",
	}

	steps := []Step{
		say(DemoDisclaimer),
		sleep(short),
		think("The user wants a tour. I'll play a read, an edit and a command."),
		sleep(long),
		say("I'll show a file being read, "),
		sleep(short),
		say("an edit that asks your permission, "),
		sleep(short),
		say("and a command's output."),
		sleep(medium),
		plan("pending", "pending", "pending"),
		sleep(long),

		update(obj{
			{"sessionUpdate", "tool_call"},
			{"toolCallId", "demo-read"},
			{"title", "Read README.md"},
			{"kind", "read"},
			{"status", "pending"},
			{"locations", []obj{{{"path", readme}, {"line", 1}}}},
			{"rawInput", obj{{"path", readme}}},
		}),
		sleep(medium),
		update(obj{{"sessionUpdate", "tool_call_update"}, {"toolCallId", "demo-read"}, {"status", "in_progress"}}),
		sleep(long),
		update(obj{
			{"sessionUpdate", "tool_call_update"},
			{"toolCallId", "demo-read"},
			{"status", "completed"},
			{"content", []obj{text("# Demo project\n\nA tiny Go program that prints a greeting.\n")}},
		}),
		sleep(medium),
		plan("completed", "in_progress", "pending"),
		sleep(medium),

		update(obj{
			{"sessionUpdate", "tool_call"},
			{"toolCallId", "demo-edit"},
			{"title", "Edit hello.go"},
			{"kind", "edit"},
			{"status", "pending"},
			{"content", []obj{{{"type", "diff"}, {"path", hello}, {"oldText", oldText}, {"newText", newText}}}},
			{"locations", []obj{{{"path", hello}, {"line", 6}}}},
			{"rawInput", obj{{"path", hello}, {"oldText", oldText}, {"newText", newText}}},
		}),
		sleep(medium),
		{Permission: &Permission{
			ToolCall: mustJSON(obj{{"toolCallId", "demo-edit"}, {"title", "Edit hello.go"}, {"kind", "edit"}, {"status", "pending"}}),
			Options: mustJSON([]obj{
				{{"optionId", "allow-once"}, {"name", "Allow once"}, {"kind", "allow_once"}},
				{{"optionId", "allow-always"}, {"name", "Always allow edits"}, {"kind", "allow_always"}},
				{{"optionId", "reject-once"}, {"name", "Reject"}, {"kind", "reject_once"}},
			}),
			Allowed: []Step{
				update(obj{{"sessionUpdate", "tool_call_update"}, {"toolCallId", "demo-edit"}, {"status", "in_progress"}}),
				sleep(short),
				update(obj{{"sessionUpdate", "tool_call_update"}, {"toolCallId", "demo-edit"}, {"status", "completed"}}),
			},
			Rejected: []Step{
				update(obj{{"sessionUpdate", "tool_call_update"}, {"toolCallId", "demo-edit"}, {"status", "failed"}}),
				say("The edit was rejected (it would not have been written anyway: this is a script). "),
			},
		}},
		sleep(medium),
		plan("completed", "completed", "in_progress"),
		sleep(medium),

		update(obj{
			{"sessionUpdate", "tool_call"},
			{"toolCallId", "demo-exec"},
			{"title", "Run go test ./..."},
			{"kind", "execute"},
			{"status", "in_progress"},
			{"rawInput", obj{{"command", "go test ./..."}, {"cwd", cwdPlaceholder}}},
		}),
	}
	// ACP v1 has no tool_call_content_chunk: stream the output as updates
	// whose content array grows by one line each time.
	for i := range testOutput {
		content := make([]obj, 0, i+1)
		for _, line := range testOutput[:i+1] {
			content = append(content, text(line))
		}
		steps = append(steps,
			sleep(long),
			update(obj{{"sessionUpdate", "tool_call_update"}, {"toolCallId", "demo-exec"}, {"content", content}}),
		)
	}
	steps = append(steps,
		sleep(short),
		update(obj{
			{"sessionUpdate", "tool_call_update"},
			{"toolCallId", "demo-exec"},
			{"status", "completed"},
			{"rawOutput", obj{{"exitCode", 0}}},
		}),
		sleep(short),
		plan("completed", "completed", "completed"),
		sleep(medium),
		say("That is the whole script: the README, the edit to hello.go and the test output above were made up; no file was read or written and no command ran. Configure a real agent with --agent NAME=COMMAND_LINE."),
	)
	return Script{
		ProtocolVersion: 1,
		// A session outlives its demo agent (idle reaping, a gateway
		// restart): the next prompt re-attaches with session/resume.
		Resume: true,
		Turns:  []Turn{{Steps: steps, StopReason: "end_turn"}},
	}
}

// DemoDisclaimer is the demo agent's first message: it is a script.
const DemoDisclaimer = "This is the acp-gateway demo agent, a script, not an AI: it reads no file, writes nothing and runs no command. " +
	"What follows is made up, to show what a turn streams: text, a plan, tool calls, a diff, a permission request and a command's output.\n\n"

// obj is a JSON object that keeps its keys in order, so the demo's
// messages read naturally on the wire (sessionUpdate first).
type obj []field

type field struct {
	key   string
	value any
}

// MarshalJSON encodes the fields in order.
func (o obj) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(f.key)
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(f.value)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic("agentsim: " + err.Error())
	}
	return b
}

// Package agentsim is a simulated ACP agent that plays a script over stdio.
//
// The simulated agent speaks the Agent Client Protocol (JSON-RPC 2.0, one
// JSON object per line) on a reader and a writer, exactly as a real agent
// does on its stdin and stdout. It serves two purposes: it is the gateway's
// built-in demo agent (see [Demo]) and the scripted agent of the gateway's
// end-to-end tests, which pass a [Script] encoded as JSON.
//
// The agent answers initialize, authenticate, session/new, session/load,
// session/resume, session/list, session/close, session/delete (each of
// those five when its script offers it), session/prompt,
// session/set_mode and session/set_config_option, and it
// accepts the session/cancel notification. Prompt number n of a process
// (counting from 0) plays Turns[n % len(Turns)]: each [Step] sends a
// session/update, asks for permission, elicits input, sleeps, writes a raw line or a stderr
// line, calls fs/read_text_file or fs/write_text_file, exits or hangs; the
// hostile steps flood the client with updates, write a line of a given
// length, or write raw bytes that need not be UTF-8.
//
// A script in JSON looks like this:
//
//	{
//	  "protocolVersion": 1,
//	  "loadSession": false,
//	  "turns": [{
//	    "steps": [
//	      {"update": {"sessionUpdate": "agent_message_chunk",
//	                  "content": {"type": "text", "text": "hello"}}},
//	      {"sleep": "50ms"},
//	      {"permission": {"toolCall": {"toolCallId": "c1", "title": "Edit {{cwd}}/a.go"},
//	                      "allowed": [{"update": {"sessionUpdate": "tool_call_update",
//	                                              "toolCallId": "c1", "status": "completed"}}],
//	                      "rejected": [{"update": {"sessionUpdate": "tool_call_update",
//	                                               "toolCallId": "c1", "status": "failed"}}]}},
//	      {"readFile": "{{cwd}}/a.go"}
//	    ],
//	    "stopReason": "end_turn"
//	  }]
//	}
//
// The placeholder {{cwd}} stands for the working directory the client gave in
// session/new (or session/load). Inside [Step.Update], [Permission.ToolCall]
// and [Permission.Options] it is replaced by the JSON-escaped directory (no
// surrounding quotes), so it belongs inside a JSON string; in
// [Step.ReadFile] and [WriteFile.Path] it is replaced by the directory as is.
package agentsim

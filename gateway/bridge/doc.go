// Package bridge lets an ACP editor use an agent that runs behind an
// acp-gateway. It is `acp-gateway connect`: to the editor, which spawns it
// as it would spawn any ACP agent, it speaks ACP (JSON-RPC 2.0, one JSON
// object per line) on stdin and stdout, as an agent does; to the gateway it
// speaks the acp.v2 SessionService over Connect, authenticated with a
// bearer token.
//
// The mapping does not depend on stdio: [ServeMessages] serves it on any
// transport of whole JSON-RPC messages ([Messages]), which is how the
// gateway itself speaks ACP on its `/acp` endpoint (package acpnet).
//
// # Configuring Zed
//
// Add the bridge to `agent_servers` in Zed's settings.json as a custom
// agent; Zed runs the command with the arguments and talks ACP to it:
//
//	{
//	  "agent_servers": {
//	    "Claude on the team gateway": {
//	      "type": "custom",
//	      "command": "acp-gateway",
//	      "args": ["connect", "https://acp.example.com", "--agent", "claude",
//	               "--token-file", "/home/me/.config/acp-gateway/token",
//	               "--cwd", "/srv/checkouts/project"],
//	      "env": {}
//	    }
//	  }
//	}
//
// The token may come from `"env": {"ACP_GATEWAY_TOKEN": "..."}` instead of
// a file. `--cwd` names the working directory on the gateway's machine;
// without it the gateway is given the directory Zed opened, which then has
// to exist on the gateway's machine too. Zed's log of ACP messages ("dev:
// open acp logs") shows what the bridge says; the bridge's own diagnostics
// go to its stderr.
//
// # What the editor gets
//
// initialize negotiates the version the editor asks for: ACP v1 fully, and
// v2 as far as the gateway's model carries it (an editor asking for 2 or
// more gets 2, anything else 1). authMethods is empty: the bridge, not the
// editor, authenticates to the gateway. The bridge offers loadSession (v1)
// and session/list, session/resume and session/close; it offers only the
// baseline prompt content (text and resource links), since it cannot know
// what the gateway's agent accepts. `acp-gateway connect` (CheckGateway)
// first asks the gateway for its agents, and answers initialize with a
// JSON-RPC error (-32603) saying why when the gateway cannot be reached,
// refuses the token, or has no such agent.
//
//   - session/new: CreateSession with the configured agent and the editor's
//     cwd (or --cwd), and the editor's MCP servers, which the gateway
//     refuses (-32602 naming the server) unless its --mcp-allow names them
//     and its agent takes their transport; the bridge advertises every
//     transport (v1 mcpCapabilities, v2 capabilities.session.mcp) for the
//     gateway to decide. A re-attach (session/load, session/resume) keeps
//     the servers the session was created with.
//   - session/prompt: Prompt, whose events become session/update
//     notifications (message and thought chunks, plans, tool calls, mode,
//     config option, command, usage and session info updates, unknown
//     updates as the agent sent them). The prompt is answered with the
//     turn's stop reason when the turn ends; a failed turn is a JSON-RPC
//     error. A v2 editor is answered `{}` once the gateway started the turn,
//     and gets state_update `running`, `requires_action` (while a permission
//     request waits) and `idle` with the stop reason, made by the bridge from
//     the gateway's turn events (the agent's own state updates are not
//     forwarded, nor, to a v2 editor, the agent's user messages: the bridge
//     reports the prompt as the user_message). A Prompt stream the
//     gateway cuts off mid-turn (it fell behind, `aborted`, also before
//     the bridge read the turn's start; or the replicas changed hands) is
//     followed on in the session's log with Watch from the last event
//     the editor got, again after each cut, until the turn ends; the
//     bridge gives up, with the gateway's error, after 8 Watch streams
//     in a row that bring nothing.
//   - session/cancel: Cancel, also when it arrives before the gateway has
//     started the turn.
//   - Permission requests become session/request_permission requests from
//     the bridge to the editor (with ids of the bridge's own numbering, a
//     space apart from the editor's); the chosen option, or cancelled, goes
//     back with RespondPermission. A request the gateway resolves first
//     (turn cancelled, timed out, answered elsewhere) is withdrawn with
//     $/cancel_request. One the editor goes without answering is left
//     waiting, for another client or the editor back on a new connection.
//   - session/load (v1), and session/resume with `replayFrom: {"type":
//     "start"}` (v2), replay the gateway session's stored events (Watch from
//     the start, up to the last event GetSession reports) as history: the
//     prompts as the user's messages, then what the agent said and did.
//     Turns that other clients run later are not followed by `connect`;
//     with [Options.Follow] (the gateway's /acp endpoint) every session
//     the editor creates or attaches to is followed: the turns of other
//     clients reach it too (their prompts as the user's messages), and so
//     do their permission requests, withdrawn once another client answers.
//   - session/set_mode (v1) and session/set_config_option relay to SetMode
//     and SetConfigOption.
//
// When the editor closes stdin the bridge closes the gateway sessions it
// created (unless --keep-sessions) and exits 0.
//
// The gateway serves its agents' fs/* requests itself, inside the
// session's working directory on its machine, and refuses terminal/*; it
// never asks its clients to serve them. So the bridge advertises nothing
// for them and serves no fs/* of the editor's: were the gateway ever to ask
// a client, the bridge would relay those requests to the editor.
//
// # From the gateway's v2 stream to ACP v1
//
// The gateway reports tool calls as ACP v2 upsert patches (omitted field:
// unchanged, null: cleared, value: replaced) followed by the merged tool
// call. A v1 editor gets:
//
//   - a `tool_call` carrying the whole merged tool call the first time it
//     hears of an id;
//   - after that, a `tool_call_update` carrying the patch, except that a
//     patch cannot clear in v1, where null means unchanged: a cleared
//     `content` or `locations` is sent as [] (which clears in v1 too), a
//     cleared `kind` as ACP's default "other", a cleared `status` as its
//     default "pending", a cleared `title` as "", and a cleared `rawInput`,
//     `rawOutput` or `_meta` is left out (v1 has no way to say it);
//   - for a v2 `tool_call_content_chunk` (v1 cannot append), a
//     `tool_call_update` whose `content` is the whole content so far.
//
// v1's enums are closed where v2's are open: for a v1 editor a custom or
// future tool kind is "other", the status "cancelled" is "failed", a custom
// or future status is left out, a custom or future stop reason is
// "end_turn", and permission options of a custom or future kind are not
// offered (unless no other is). A v2 `plan_update` of items becomes a v1
// `plan`; v2 whole messages
// (`agent_message`, ...) become one chunk per content block; updates v1
// has no form for (terminal updates, other plan types) are not sent. A v2
// editor gets the patches as they are, a v1 `plan` as the `plan_update` of
// plan id "plan", and a made-up message id on chunks that have none.
//
// # Diffs and permission subjects
//
// v1 diffs carry whole texts (path, oldText, newText), v2 diffs `changes`
// (operations and paths) and optionally a git patch. A v1 editor gets a v2
// diff's v1 members when the agent sent them too; otherwise each added
// file whose whole text the git patch holds becomes a v1 diff without
// oldText, and what is left (modified, deleted, moved or copied files,
// whose whole texts no patch holds, and patches of other formats) one text
// item: the operations and paths, then the patch in a ```diff block. A v2
// editor gets a v1 diff with `changes` (`add` without oldText, else
// `modify`) beside its v1 members.
//
// A v2 permission request's `description` and `subject` reach a v2 editor
// as they are. A v1 editor, whose requests must name a tool call, gets for
// one that names none a made-up call (id `permission-REQUEST_ID`) titled
// with the request's title (else the command), of kind `execute` with the
// command and its cwd as rawInput for a command subject, and the
// description as its content.
package bridge

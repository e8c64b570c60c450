// elicit-agent.mjs is an ACP v1 agent on stdin/stdout (raw JSON-RPC, one
// message a line) for the /acp elicitation test: each prompt asks the
// client for a name with a form elicitation (elicitation/create), says
// what it got back as an agent_message_chunk, and ends the turn. If the
// client did not advertise form elicitation at initialize, it says so
// instead of asking.
import readline from "node:readline";

const send = (m) => process.stdout.write(JSON.stringify({ jsonrpc: "2.0", ...m }) + "\n");
const waiting = new Map();
let nextId = 0;
let formOffered = false;

function request(method, params) {
  const id = `agent-${nextId++}`;
  send({ id, method, params });
  return new Promise((resolve) => waiting.set(id, resolve));
}

function say(sessionId, text) {
  send({ method: "session/update", params: { sessionId, update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text } } } });
}

async function prompt(id, { sessionId }) {
  if (!formOffered) {
    say(sessionId, "no form elicitation offered");
  } else {
    const answer = await request("elicitation/create", {
      sessionId,
      mode: "form",
      message: "Who are you?",
      requestedSchema: { type: "object", properties: { name: { type: "string" } }, required: ["name"] },
    });
    say(sessionId, "elicit " + JSON.stringify(answer.result ?? answer.error));
  }
  send({ id, result: { stopReason: "end_turn" } });
}

for await (const line of readline.createInterface({ input: process.stdin })) {
  const m = JSON.parse(line);
  if (!m.method) {
    waiting.get(m.id)?.(m);
    waiting.delete(m.id);
    continue;
  }
  switch (m.method) {
    case "initialize":
      formOffered = m.params?.clientCapabilities?.elicitation?.form != null;
      send({ id: m.id, result: { protocolVersion: 1, agentCapabilities: { loadSession: false }, authMethods: [] } });
      break;
    case "session/new":
      send({ id: m.id, result: { sessionId: "elicit-session" } });
      break;
    case "session/prompt":
      void prompt(m.id, m.params);
      break;
    case "session/cancel":
      break;
    default:
      if (m.id !== undefined) send({ id: m.id, error: { code: -32601, message: `${m.method} not supported` } });
  }
}

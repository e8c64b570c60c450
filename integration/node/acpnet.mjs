// acpnet.mjs drives the gateway's /acp endpoint with the ACP TypeScript
// SDK's own client side (@agentclientprotocol/sdk 2.4.0, installed as
// acp-sdk-2 beside the 1.9.0 the agents use): its createWebSocketStream
// over the ws package, or its createHttpStream (Streamable HTTP), and its
// client app.
//
//   node acpnet.mjs ws|http URL TOKEN CWD [URL2]
//
// URL is the endpoint (ws://HOST:PORT/acp/AGENT or http://...); URL2,
// when given, is where the second connection goes (another replica). On one connection it
// initializes (ACP v1), creates a session, runs a turn whose permission
// request it allows, and a turn it cancels once the agent has said
// something; then it drops the connection, opens another, and loads the
// session. It prints one JSON object: the session id, the permission
// requests it was asked, the stop reasons, the updates the first
// connection saw and those session/load replayed.
import * as acp from "acp-sdk-2";
import { createHttpStream } from "acp-sdk-2/experimental/http-client";
import { createWebSocketStream } from "acp-sdk-2/experimental/ws-client";
import WebSocket from "ws";

const [transport, url, token, cwd, url2] = process.argv.slice(2);

function connect(onUpdate, onPermission, to = url) {
  const headers = { Authorization: `Bearer ${token}` };
  const stream =
    transport === "http" ? createHttpStream(to, { headers }) : createWebSocketStream(to, { WebSocket, headers });
  const app = acp
    .client({ name: "acpnet.mjs" })
    .onNotification("session/update", ({ params }) => onUpdate(params))
    .onRequest("session/request_permission", ({ params }) => onPermission(params));
  return (op) => app.connectWith(stream, op);
}

const out = { asked: [], stopReasons: [], seen: [], replayed: [] };

// The first connection.
let updated = () => {};
await connect(
  (n) => {
    out.seen.push(n.update);
    updated();
  },
  (p) => {
    out.asked.push(p.toolCall.toolCallId);
    const allow = p.options.find((o) => o.kind === "allow_once");
    return { outcome: { outcome: "selected", optionId: allow.optionId } };
  },
)(async (ctx) => {
  const init = await ctx.request("initialize", { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} });
  if (!init.agentCapabilities?.loadSession) {
    throw new Error("the gateway does not offer session/load: " + JSON.stringify(init));
  }
  const { sessionId } = await ctx.request("session/new", { cwd, mcpServers: [] });
  out.sessionId = sessionId;
  const first = await ctx.request("session/prompt", { sessionId, prompt: [{ type: "text", text: "first" }] });
  out.stopReasons.push(first.stopReason);
  // The second turn is cancelled once the agent has said something.
  const before = out.seen.length;
  const saidSomething = new Promise((resolve) => {
    updated = () => {
      if (out.seen.length > before) resolve();
    };
  });
  const second = ctx.request("session/prompt", { sessionId, prompt: [{ type: "text", text: "second" }] });
  await saidSomething;
  await ctx.notify("session/cancel", { sessionId });
  out.stopReasons.push((await second).stopReason);
});

// A new connection loads the session.
await connect(
  (n) => out.replayed.push(n.update),
  () => {
    throw new Error("asked for permission while loading");
  },
  url2 ?? url,
)(async (ctx) => {
  await ctx.request("initialize", { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} });
  await ctx.request("session/load", { sessionId: out.sessionId, cwd, mcpServers: [] });
});

process.stdout.write(JSON.stringify(out) + "\n");

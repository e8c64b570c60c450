// acpelicit.mjs answers an agent's form elicitation over the gateway's
// /acp endpoint with the ACP TypeScript SDK's own client side
// (@agentclientprotocol/sdk 2.4.0 as acp-sdk-2: createWebSocketStream over
// ws, or createHttpStream), its client app handling elicitation/create.
//
//   node acpelicit.mjs ws|http URL TOKEN CWD
//
// It initializes (ACP v1) advertising form elicitation, creates a session,
// runs one turn, accepts the elicitation with {"name": "ada"}, and prints
// one JSON object: the elicitations it was asked, what the agent said and
// the stop reason.
import * as acp from "acp-sdk-2";
import { createHttpStream } from "acp-sdk-2/experimental/http-client";
import { createWebSocketStream } from "acp-sdk-2/experimental/ws-client";
import WebSocket from "ws";

const [transport, url, token, cwd] = process.argv.slice(2);
const headers = { Authorization: `Bearer ${token}` };
const stream = transport === "http" ? createHttpStream(url, { headers }) : createWebSocketStream(url, { WebSocket, headers });
const out = { asked: [], said: [] };
const app = acp
  .client({ name: "acpelicit.mjs" })
  .onNotification("session/update", ({ params }) => {
    if (params.update.sessionUpdate === "agent_message_chunk") out.said.push(params.update.content.text);
  })
  .onRequest("elicitation/create", ({ params }) => {
    out.asked.push(params);
    return { action: "accept", content: { name: "ada" } };
  });
await app.connectWith(stream, async (ctx) => {
  await ctx.request("initialize", {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: { elicitation: { form: {} } },
  });
  const { sessionId } = await ctx.request("session/new", { cwd, mcpServers: [] });
  out.sessionId = sessionId;
  const res = await ctx.request("session/prompt", { sessionId, prompt: [{ type: "text", text: "hi" }] });
  out.stopReason = res.stopReason;
});
process.stdout.write(JSON.stringify(out) + "\n");

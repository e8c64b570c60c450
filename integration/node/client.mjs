// client.mjs streams one turn of an acp-gateway session with
// @connectrpc/connect-node, over code that protoc-gen-es generated from
// proto/ (target=js). The integration tests run it and read its stdout: one
// JSON object per line,
//
//   {"sessionId": "..."}                       the session it created
//   {"event": <SessionEvent as proto JSON>}    each event of the turn
//   {"responded": "<requestId>", "optionId": "..."}  a permission answered
//   {"done": true}                             the stream ended cleanly
//
// and on failure {"error": "..."} (exit status 1).
//
// Usage: node client.mjs GEN_DIR BASE_URL connect|grpc CWD
//
// GEN_DIR holds acp/v2/*_pb.js, or is the package name
// @acp-gateway/client: the package clients/ts, installed beside this
// script. Every permission request is answered with its first allow_once
// option.
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { toJson } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";

const [genDir, baseUrl, protocol, cwd] = process.argv.slice(2);
if (!genDir || !baseUrl || !cwd || (protocol !== "connect" && protocol !== "grpc")) {
  console.error("usage: node client.mjs GEN_DIR BASE_URL connect|grpc CWD");
  process.exit(2);
}
const print = (v) => process.stdout.write(JSON.stringify(v) + "\n");

try {
  const { SessionService, SessionEventSchema } = await import(
    genDir === "@acp-gateway/client"
      ? genDir
      : pathToFileURL(join(genDir, "acp", "v2", "session_service_pb.js")).href
  );
  const transport =
    protocol === "grpc"
      ? createGrpcTransport({ baseUrl, httpVersion: "2" })
      : createConnectTransport({ baseUrl, httpVersion: "1.1" });
  const client = createClient(SessionService, transport);
  // Everything this client does is bounded; the test bounds it too.
  const signal = AbortSignal.timeout(30_000);

  const { sessionId } = await client.createSession({ agent: "demo", cwd }, { signal });
  print({ sessionId });
  const prompt = [{ block: { case: "text", value: { text: "Show me a turn." } } }];
  for await (const res of client.prompt({ sessionId, prompt }, { signal })) {
    if (!res.event) {
      continue; // a heartbeat
    }
    print({ event: toJson(SessionEventSchema, res.event) });
    if (res.event.event.case === "permissionRequest") {
      const req = res.event.event.value;
      const option = req.options.find((o) => o.kind === "allow_once");
      if (!option) {
        throw new Error(`permission request ${req.requestId} has no allow_once option`);
      }
      await client.respondPermission({ sessionId, requestId: req.requestId, optionId: option.optionId }, { signal });
      print({ responded: req.requestId, optionId: option.optionId });
    }
  }
  print({ done: true });
} catch (err) {
  print({ error: String(err?.stack ?? err) });
  process.exit(1);
}

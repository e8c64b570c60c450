// Opens the gateway's /acp WebSocket from a page of the console's origin in
// Debian's chromium (playwright-core), as a browser app would: the token as
// the acp-gateway.bearer. subprotocol, since a browser cannot set headers
// on a WebSocket, beside "acp", which the gateway selects (a browser fails
// a handshake that selects none of its subprotocols), under the console's
// Content-Security-Policy. It
// initializes (ACP v1) and creates a session.
//
// gateway/console's Go test starts the gateway and runs this with:
//   CONSOLE_URL    the gateway's base URL, console mounted at /
//   CONSOLE_TOKEN  a bearer token the gateway accepts
//   CONSOLE_CWD    an absolute directory for the session
//   CHROMIUM       the browser (default /usr/bin/chromium)
// On success stdout is one JSON line: {protocol, protocolVersion, sessionId}.
import { env, launch, watchdog } from "./lib.mjs";

const url = env("CONSOLE_URL");
const token = env("CONSOLE_TOKEN");
const cwd = env("CONSOLE_CWD");

watchdog("acp browser test", 60_000);

const browser = await launch();
try {
  const page = await browser.newPage();
  const problems = [];
  page.on("console", (m) => {
    if (m.type() === "error" && /Content Security Policy|Refused to/i.test(m.text())) problems.push(m.text());
  });
  await page.goto(url);
  const result = await page.evaluate(
    async ({ token, cwd }) => {
      const b64 = btoa(token).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
      const ws = new WebSocket(location.origin.replace(/^http/, "ws") + "/acp/demo", ["acp", "acp-gateway.bearer." + b64]);
      const answers = new Map();
      const waiting = new Map();
      ws.onmessage = (e) => {
        const m = JSON.parse(e.data);
        if ("id" in m && !("method" in m)) {
          (waiting.get(m.id) ?? ((v) => answers.set(m.id, v)))(m);
        }
      };
      await new Promise((resolve, reject) => {
        ws.onopen = resolve;
        ws.onerror = () => reject(new Error("the WebSocket failed to open"));
      });
      const call = (id, method, params) =>
        new Promise((resolve) => {
          if (answers.has(id)) return resolve(answers.get(id));
          waiting.set(id, resolve);
          ws.send(JSON.stringify({ jsonrpc: "2.0", id, method, params }));
        });
      const init = await call(0, "initialize", { protocolVersion: 1, clientCapabilities: {} });
      const created = await call(1, "session/new", { cwd, mcpServers: [] });
      ws.close();
      return { protocol: ws.protocol, protocolVersion: init.result?.protocolVersion, sessionId: created.result?.sessionId };
    },
    { token, cwd },
  );
  if (problems.length > 0) throw new Error(problems.join("\n"));
  process.stdout.write(JSON.stringify(result) + "\n");
} catch (e) {
  console.error(`acp browser test failed: ${e.stack ?? e}`);
  process.exitCode = 1;
} finally {
  await browser.close();
}

// Drives the console in Debian's chromium (playwright-core, which never
// downloads a browser) against a running gateway with the demo agent: it
// signs in with a token, creates a session, runs a turn, allows the edit,
// cuts every stream mid-turn and checks the page resumes without duplicates
// or gaps, reloads and checks the replay renders the same, then cancels a
// second turn.
//
// gateway/console's Go test starts the gateway and runs this with:
//   CONSOLE_URL          the gateway's base URL, console mounted at /
//   CONSOLE_TOKEN        a bearer token the gateway accepts
//   CONSOLE_CWD          an absolute directory for the session
//   CONSOLE_DROP_URL     POST here closes every connection of the browser
//   CONSOLE_SCREENSHOTS  directory for console-*.png
//   CHROMIUM             the browser (default /usr/bin/chromium)
// On success the last line of stdout is JSON: {sessionId, lastSeq, reconnects}.
import assert from "node:assert/strict";
import path from "node:path";
import { env, launch, watchdog, watchProblems } from "./lib.mjs";

const url = env("CONSOLE_URL");
const tokenValue = env("CONSOLE_TOKEN");
const cwd = env("CONSOLE_CWD");
const dropURL = env("CONSOLE_DROP_URL");
const shots = env("CONSOLE_SCREENSHOTS");
const timeout = 20_000;

watchdog("browser test", 120_000);

const browser = await launch();
const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
page.setDefaultTimeout(timeout);
const problems = [];
watchProblems(page, problems);

try {
  await run();
} catch (e) {
  await page.screenshot({ path: path.join(shots, "console-failure.png"), fullPage: true }).catch(() => {});
  const text = await page.locator("body").innerText().catch(() => "");
  console.error(`browser test failed: ${e.stack ?? e}\n--- page text ---\n${text}`);
  process.exitCode = 1;
} finally {
  await browser.close();
}

async function run() {
  await page.goto(url);

  // Without a token the gateway refuses, and the page says what to do.
  await expectText("#status", /unauthenticated.*bearer token/i);
  await page.fill("#token", tokenValue);
  await page.click("#token-form button");
  await expectText("#status", /Token saved/);
  assert.equal(await page.evaluate(() => sessionStorage.getItem("acp-gateway-token")), tokenValue);

  // The agent choice comes from console/config.json.
  assert.deepEqual(await page.locator("#agent option").allTextContents(), ["demo"]);
  await page.fill("#cwd", cwd);
  await page.click("#create-form button");
  await page.locator("#session-title").filter({ hasText: /\S/ }).waitFor();
  const sessionId = await page.textContent("#session-title");
  await page.locator(`#sessions button[data-session-id="${sessionId}"]`).waitFor();
  await page.locator('#conn[data-state="live"]').waitFor();

  await page.fill("#prompt", "Show me what you can do.");
  await page.click("#send");

  // The edit asks for permission: one button per option, named and kinded.
  const choices = page.locator(".tool[data-tool-call-id=demo-edit] .permission button");
  await choices.first().waitFor();
  assert.deepEqual(
    await choices.evaluateAll((bs) => bs.map((b) => [b.firstChild.textContent, b.dataset.kind])),
    [
      ["Allow once", "allow_once"],
      ["Always allow edits", "allow_always"],
      ["Reject", "reject_once"],
    ],
  );
  assert.equal(await page.isEnabled("#cancel"), true, "Cancel is enabled during a turn");
  await page.locator("#waiting").filter({ hasText: /waiting for you/ }).waitFor();
  await page.screenshot({ path: path.join(shots, "console-permission.png") });

  // Fail the first Watch the page reopens, so it has to retry once more.
  let failWatches = 1;
  await page.route("**/acp.v2.SessionService/Watch", async (route) => {
    if (failWatches-- > 0) return route.abort("connectionreset");
    return route.continue();
  });
  await choices.filter({ hasText: "Allow once" }).click();
  await expectText(".tool[data-tool-call-id=demo-edit] .permission.done", "Answered: Allow once");

  // Cut every connection of the browser while the turn still runs (the
  // execute call streams its output for another second or so).
  const res = await fetch(dropURL, { method: "POST" });
  assert.equal(res.status, 200, "drop endpoint");
  const { dropped } = await res.json();
  assert.ok(dropped > 0, "the gateway closed the browser's connections");
  assert.equal(await page.getAttribute("body", "data-running"), "true", "the streams were cut mid-turn");

  await page.locator('.turn-end[data-stop-reason="end_turn"]').waitFor();
  await page.locator('#conn[data-state="live"]').waitFor();
  assert.ok(failWatches < 0, "the page retried the Watch the test failed");
  const reconnects = Number(await page.getAttribute("body", "data-reconnects"));
  assert.ok(reconnects >= 1, `the page reconnected (data-reconnects=${reconnects})`);
  await page.unrouteAll();
  await checkTurn(sessionId);
  assert.equal(await page.isEnabled("#cancel"), false, "Cancel is disabled after the turn");

  await page.evaluate(() => {
    document.querySelector("#transcript").scrollTop = 0;
  });
  const height = await page.evaluate(() => document.querySelector("#transcript").scrollHeight);
  await page.setViewportSize({ width: 1280, height: Math.min(2400, height + 260) });
  await page.screenshot({ path: path.join(shots, "console-turn.png") });
  await page.setViewportSize({ width: 1280, height: 900 });
  const lastSeq = await page.getAttribute("body", "data-last-seq");

  // A reload replays the session from the start: the same cards, once.
  await page.reload();
  await page.locator('.turn-end[data-stop-reason="end_turn"]').waitFor();
  await checkTurn(sessionId);
  assert.equal(await page.getAttribute("body", "data-last-seq"), lastSeq);

  // A second turn, cancelled from the page.
  await page.fill("#prompt", "Once more, please.");
  await page.click("#send");
  await page.locator('body[data-running="true"]').waitFor();
  await page.click("#cancel");
  await page.locator('.turn-end[data-stop-reason="cancelled"]').waitFor();
  assert.equal(await page.locator(".turn").count(), 2);
  assert.equal(await page.isEnabled("#send"), true, "Send is enabled again");

  assert.deepEqual(problems, []);
  const finalSeq = await page.getAttribute("body", "data-last-seq");
  console.log(JSON.stringify({ sessionId, lastSeq: finalSeq, reconnects }));
}

// checkTurn checks the rendered demo turn, with every event shown once.
async function checkTurn(sessionId) {
  assert.equal(await page.textContent("#session-title"), sessionId);
  const cards = page.locator(".tool");
  assert.deepEqual(await cards.evaluateAll((cs) => cs.map((c) => c.dataset.toolCallId)), ["demo-read", "demo-edit", "demo-exec"]);
  assert.deepEqual(await cards.locator(".title").allTextContents(), ["Read README.md", "Edit hello.go", "Run go test ./..."]);
  assert.deepEqual(await cards.evaluateAll((cs) => cs.map((c) => c.dataset.status)), ["completed", "completed", "completed"]);
  assert.deepEqual(await cards.evaluateAll((cs) => cs.map((c) => c.dataset.kind)), ["read", "edit", "execute"]);
  assert.deepEqual(await cards.locator("[data-role=status]").allTextContents(), ["completed", "completed", "completed"]);
  assert.deepEqual(await page.locator(".tool[data-tool-call-id=demo-read] .locations li").allTextContents(), [`${cwd}/README.md:1`]);
  assert.deepEqual(await page.locator(".tool[data-tool-call-id=demo-edit] .locations li").allTextContents(), [`${cwd}/hello.go:6`]);
  assert.match(await page.textContent(".tool[data-tool-call-id=demo-read] .content"), /# Demo project/);

  const diff = page.locator(".tool[data-tool-call-id=demo-edit] .diff");
  assert.equal(await diff.locator(".path").textContent(), `${cwd}/hello.go`);
  assert.deepEqual(await diff.locator(".unified .line.del .code").allTextContents(), ['-\tfmt.Println("hello")']);
  assert.deepEqual(await diff.locator(".unified .line.add .code").allTextContents(), ['+\tfmt.Println("hello, ACP gateway!")']);
  // Lines 1 and 2 fold away; 3 lines of context before the change, 1 after.
  assert.deepEqual(await diff.locator(".fold").evaluateAll((bs) => bs.map((b) => b.dataset.lines)), ["2"]);
  assert.match(await diff.locator(".sides .new pre").textContent(), /^package main\n/);

  assert.deepEqual(await page.locator(".tool[data-tool-call-id=demo-exec] .content pre.text").allTextContents(), [
    "=== RUN   TestGreeting",
    "--- PASS: TestGreeting (0.00s)",
    "PASS",
    "ok  \tdemo\t0.012s",
  ]);
  assert.match(await page.textContent(".tool[data-tool-call-id=demo-exec] .raw"), /"exitCode": 0/);

  assert.equal(await page.locator(".plan-card").count(), 1);
  const plan = page.locator(".plan-entries li");
  assert.deepEqual(await plan.locator(".entry").allTextContents(), [
    "Read README.md to learn about the project",
    "Add a greeting to hello.go",
    "Run the tests",
  ]);
  assert.deepEqual(await plan.evaluateAll((ls) => ls.map((l) => l.dataset.status)), ["completed", "completed", "completed"]);

  assert.deepEqual(await page.locator(".bubble.user .body").allTextContents(), ["Show me what you can do."]);
  assert.deepEqual(await page.locator(".bubble.thought .body").allTextContents(), [
    "The user wants a tour. I'll play a read, an edit and a command.",
  ]);
  assert.deepEqual((await page.locator(".bubble.message .body").allTextContents()).map((t) => t.trim()), [
    "This is the acp-gateway demo agent, a script, not an AI: it reads no file, writes nothing and runs no command. " +
      "What follows is made up, to show what a turn streams: text, a plan, tool calls, a diff, a permission request and a command's output.",
    "I'll show a file being read, an edit that asks your permission, and a command's output.",
    "That is the whole script: the README, the edit to hello.go and the test output above were made up; " +
      "no file was read or written and no command ran. Configure a real agent with --agent NAME=COMMAND_LINE.",
  ]);
  assert.deepEqual(await page.locator(".permission").allTextContents(), ["Answered: Allow once"]);
  assert.equal(await page.locator(".turn-end").count(), 1);
}

async function expectText(selector, text) {
  await page.locator(selector).filter({ hasText: text }).waitFor();
}

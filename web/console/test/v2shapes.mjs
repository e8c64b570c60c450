// Runs a turn of a scripted ACP v2 agent in the console, in Debian's
// chromium (playwright-core): the page must show the v2 diff's changes
// (operation and paths) and its git patch with added and removed lines
// marked, and the permission request's description and command.
//
// gateway/console's Go test (TestBrowserShowsV2Shapes) starts the gateway,
// with the agent "v2", and runs this with:
//   CONSOLE_URL    the gateway's base URL, console mounted at /
//   CONSOLE_TOKEN  a bearer token the gateway accepts
//   CONSOLE_CWD    an absolute directory for the session
//   CHROMIUM       the browser (default /usr/bin/chromium)
import assert from "node:assert/strict";
import { env, launch, openSession, watchdog, watchProblems } from "./lib.mjs";

const url = env("CONSOLE_URL");
const token = env("CONSOLE_TOKEN");
const cwd = env("CONSOLE_CWD");

watchdog("v2 shapes browser test", 60_000);

const browser = await launch();
const page = await browser.newPage();
page.setDefaultTimeout(20_000);
const problems = [];
watchProblems(page, problems);
try {
  await openSession(page, { url, token, agent: "v2", cwd });
  await page.fill("#prompt", "Edit it.");
  await page.click("#send");

  const diff = page.locator(".tool[data-tool-call-id=e1] .v2diff");
  await diff.waitFor();
  assert.deepEqual(await diff.locator(".changes li").allTextContents(), ["modify /w/a.go", "move /w/old.txt → /w/new.txt"]);
  assert.deepEqual(await diff.locator(".changes li").evaluateAll((ls) => ls.map((l) => l.dataset.operation)), ["modify", "move"]);
  assert.deepEqual(await diff.locator(".patch .del").allTextContents(), ["-var x = 1\n"]);
  assert.deepEqual(await diff.locator(".patch .add").allTextContents(), ["+var x = 2\n"]);
  assert.deepEqual(await diff.locator(".patch .hunk").allTextContents(), ["@@ -1,2 +1,2 @@\n"]);

  const perm = page.locator(".permission").filter({ hasText: "Run the tests?" });
  await perm.waitFor();
  assert.equal(await perm.locator(".description").textContent(), "They check the edit.");
  assert.equal(await perm.locator(".subject.command code").textContent(), "go test ./...");
  assert.match(await perm.locator(".subject.command").textContent(), /in \/w$/);
  await perm.locator("button", { hasText: "Allow once" }).click();
  await page.locator(".turn-end").waitFor();
  assert.deepEqual(problems, []);
  console.log(JSON.stringify({ ok: true }));
} catch (e) {
  const text = await page.locator("body").innerText().catch(() => "");
  console.error(`v2 shapes browser test failed: ${e.stack ?? e}\n--- page text ---\n${text}`);
  process.exitCode = 1;
} finally {
  await browser.close();
}

// Answers elicitations in the console, in Debian's chromium (playwright-core)
// against a running gateway whose "elicit" agent asks, in its first turn,
// for a form (name: string, required; age: integer; tea: boolean; size: an
// enum) and, in its second, sends the user to a page. The page fills and
// submits the form, then declines the url; each card then says how it was
// answered.
//
// gateway/console's Go test starts the gateway and runs this with:
//   CONSOLE_URL    the gateway's base URL, console mounted at /
//   CONSOLE_TOKEN  a bearer token the gateway accepts
//   CONSOLE_CWD    an absolute directory for the session
//   CHROMIUM       the browser (default /usr/bin/chromium)
// On success the last line of stdout is JSON: {sessionId, said, href}.
import assert from "node:assert/strict";
import { env, launch, openSession, watchdog, watchProblems } from "./lib.mjs";

const url = env("CONSOLE_URL");
const tokenValue = env("CONSOLE_TOKEN");
const cwd = env("CONSOLE_CWD");

watchdog("elicitation browser test", 90_000);

const browser = await launch();
const page = await browser.newPage();
page.setDefaultTimeout(20_000);
const problems = [];
watchProblems(page, problems);

try {
  await openSession(page, { url, token: tokenValue, agent: "elicit", cwd });
  await page.locator("#session-title").filter({ hasText: /\S/ }).waitFor();
  const sessionId = await page.textContent("#session-title");

  // The form: one input per property (in name order: the gateway's
  // schema is a google.protobuf.Struct, which keeps no order), the
  // required one marked.
  await page.fill("#prompt", "form");
  await page.click("#send");
  const form = page.locator('.elicitation[data-mode="form"] form');
  await form.waitFor();
  assert.deepEqual(
    await form.locator("[data-property]").evaluateAll((els) => els.map((e) => [e.dataset.property, e.type, e.required])),
    [
      ["age", "number", false],
      ["name", "text", true],
      ["size", "select-one", false],
      ["tea", "checkbox", false],
    ],
  );
  await form.locator('[data-property="name"]').fill("Ada");
  await form.locator('[data-property="age"]').fill("36");
  await form.locator('[data-property="tea"]').check();
  await form.locator('[data-property="size"]').selectOption("m");
  await form.locator('button[data-action="accept"]').click();
  await page.locator('.elicitation[data-mode="form"].done', { hasText: "Accepted (user:tester)" }).waitFor();
  await page.locator('.turn-end[data-stop-reason="end_turn"]').waitFor();

  // The url: a link, declined.
  await page.fill("#prompt", "url");
  await page.click("#send");
  const card = page.locator('.elicitation[data-mode="url"]');
  const href = await card.locator("a").getAttribute("href");
  await card.locator('button[data-action="decline"]').click();
  await page.locator('.elicitation[data-mode="url"].done', { hasText: "Declined" }).waitFor();
  await page.locator('.turn-end[data-stop-reason="end_turn"]').nth(1).waitFor();

  const said = (await page.locator(".bubble.message .body").allTextContents()).map((s) => s.trim());
  assert.deepEqual(problems, []);
  console.log(JSON.stringify({ sessionId, said, href }));
} catch (e) {
  const text = await page.locator("body").innerText().catch(() => "");
  console.error(`elicitation browser test failed: ${e.stack ?? e}\n--- page text ---\n${text}`);
  process.exitCode = 1;
} finally {
  await browser.close();
}

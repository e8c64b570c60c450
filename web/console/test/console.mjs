// Drives the console in Debian's chromium (playwright-core, which never
// downloads a browser) at a desktop size (1280x800) and a phone size
// (390x844) against a gateway with the scripted agent "script" of
// gateway/console's TestBrowserConsole. At each size it creates a session
// and checks that:
//   - a permission asked after a 300-line diff is brought into view and the
//     page says the agent waits for the user;
//   - the diff is in hunks, its unchanged lines folded;
//   - agent markdown renders as elements (h1, strong, code, table, a), code
//     is highlighted, an image block shows, and script in markdown does not
//     run;
//   - the mode and model pickers show on open, from GetSession's snapshot,
//     with every mode the agent offered in session/new, those it never
//     switched to included;
//   - thoughts fold; the mode and model pickers follow the turn's updates,
//     the usage shows, and picking a model calls SetConfigOption;
//   - Shift+Enter breaks the line and Enter sends;
//   - the second turn's reuse of a toolCallId gets a card of its own;
//   - the page is never wider than the screen, and Save and Send are on it;
//   - after a reload the transcript opens at the latest turn;
//   - the session list shows the title and a time, filters, marks the
//     session of an agent no longer configured (which opens read only), and
//     deletes.
//
// Environment (see browser.mjs): CONSOLE_URL, CONSOLE_TOKEN, CONSOLE_CWD,
// CONSOLE_SCREENSHOTS, CONSOLE_RETIRED (the id of the retired agent's
// session), CHROMIUM. On success the last line of stdout is JSON: {sizes}.
import assert from "node:assert/strict";
import path from "node:path";
import { env, launch, watchdog, watchProblems } from "./lib.mjs";

const url = env("CONSOLE_URL");
const tokenValue = env("CONSOLE_TOKEN");
const cwd = env("CONSOLE_CWD");
const shots = env("CONSOLE_SCREENSHOTS");
const retired = env("CONSOLE_RETIRED");
const timeout = 20_000;

watchdog("console test", 150_000);

const browser = await launch();
const sizes = [];
let page;
try {
  for (const [width, height] of [
    [1280, 800],
    [390, 844],
  ]) {
    const context = await browser.newContext({ viewport: { width, height } });
    page = await context.newPage();
    page.setDefaultTimeout(timeout);
    const problems = [];
    watchProblems(page, problems);
    try {
      await run(width, height);
    } catch (e) {
      e.message = `at ${width}x${height}: ${e.message}`;
      throw e;
    }
    assert.deepEqual(problems, [], `at ${width}x${height}`);
    sizes.push(`${width}x${height}`);
    await context.close();
  }
  console.log(JSON.stringify({ sizes }));
} catch (e) {
  await page?.screenshot({ path: path.join(shots, "console-failure.png"), fullPage: true }).catch(() => {});
  const text = await page?.locator("body").innerText().catch(() => "");
  console.error(`console test failed: ${e.stack ?? e}\n--- page text ---\n${text}`);
  process.exitCode = 1;
} finally {
  await browser.close();
}

async function run(width, height) {
  const phone = width < 760;
  const tag = phone ? "phone" : "desktop";
  await page.goto(url);
  await page.fill("#token", tokenValue);
  await fits("#token-form button");
  await page.click("#token-form button");
  await page.locator("#status").filter({ hasText: /Token saved/ }).waitFor();

  // On the phone the session list is a drawer, closed until asked for.
  if (phone) {
    assert.equal(await page.evaluate(() => document.querySelector("#sidebar").getBoundingClientRect().right <= 0), true, "the drawer starts closed");
    await page.click("#menu");
    await page.waitForFunction(() => document.querySelector("#sidebar").getBoundingClientRect().left >= 0);
  }
  await page.selectOption("#agent", "script");
  await page.fill("#cwd", cwd);
  await page.click("#create-form button");
  await page.locator("#session-title").filter({ hasText: /\S/ }).waitFor();
  const sessionId = await page.textContent("#session-title");
  await page.locator('#conn[data-state="live"]').waitFor();
  if (phone) await page.waitForFunction(() => document.querySelector("#sidebar").getBoundingClientRect().right <= 0);
  await noOverflow();

  // The pickers on open, before any event names a mode or an option: the
  // modes and the model session/new offered, from the snapshot.
  await modesAre("ask");
  assert.equal(await page.inputValue("select[data-config-id=model]"), "smart");

  // Enter sends.
  await page.fill("#prompt", "Tidy the big file, please.");
  await page.press("#prompt", "Enter");

  // The permission after the long diff is in view, and the page says so.
  const perm = page.locator(".tool[data-tool-call-id=edit-big] .permission.waiting");
  await perm.waitFor();
  await page.waitForFunction(() => {
    const el = document.querySelector(".permission.waiting");
    const box = document.querySelector("#transcript").getBoundingClientRect();
    const r = el.getBoundingClientRect();
    return r.top >= box.top - 1 && r.bottom <= box.bottom + 1 && r.bottom <= innerHeight && r.right <= innerWidth;
  });
  await page.locator("#waiting").filter({ hasText: /waiting for you.*Edit big\.txt/i }).waitFor();
  assert.equal(await page.getAttribute("body", "data-waiting"), "1");
  await noOverflow();
  await page.screenshot({ path: path.join(shots, `console-${tag}-permission.png`) });

  // The diff: one hunk around line 150, the rest folded.
  const diff = page.locator(".tool[data-tool-call-id=edit-big] .diff");
  assert.deepEqual(await diff.locator(".unified .line.del .code").allTextContents(), ["-line 150 of the big file"]);
  assert.deepEqual(await diff.locator(".unified .line.add .code").allTextContents(), ["+line 150 of the big file, changed"]);
  assert.equal(await diff.locator(".unified .line").count(), 8, "3 lines of context each side of the change");
  assert.deepEqual(await diff.locator(".fold").evaluateAll((bs) => bs.map((b) => b.dataset.lines)), ["146", "147"]);
  assert.equal(await diff.locator(".sides").isVisible(), false, "the side-by-side view is the other view");

  // Markdown as elements, sanitised, highlighted; the image shown.
  const md = page.locator(".turn").first().locator(".bubble.message .body").first();
  assert.equal(await md.locator("h1").textContent(), "Findings");
  assert.equal(await md.locator("strong").textContent(), "bold");
  assert.equal(await md.locator("p code").textContent(), "inline code");
  assert.deepEqual(await md.locator("table th").allTextContents(), ["file", "lines"]);
  const link = md.locator("a[href]");
  assert.equal(await link.getAttribute("href"), "https://example.com/docs");
  assert.match(await link.getAttribute("rel"), /noopener/);
  assert.ok((await md.locator("pre code.hljs span").count()) > 0, "the go code block is highlighted");
  assert.equal(await page.locator(".bubble script, .bubble [onerror], .bubble a[href^=javascript]").count(), 0);
  assert.match(await md.textContent(), /<script>window\.__pwned = 'script'<\/script>/, "raw HTML shows as text");
  assert.equal(await page.evaluate(() => window.__pwned), undefined, "script in markdown did not run");
  const img = page.locator(".bubble.message img.image");
  await img.waitFor();
  assert.match(await img.getAttribute("src"), /^data:image\/png;base64,/);
  assert.equal(await img.evaluate((i) => i.complete && i.naturalWidth), 8);

  // Thoughts are folded until opened.
  const thought = page.locator("details.bubble.thought");
  assert.equal(await thought.evaluate((d) => d.open), false);
  assert.match(await thought.locator("summary").textContent(), /Reading the notes first/);
  await thought.locator("summary").click();
  assert.equal(await thought.evaluate((d) => d.open), true);

  // Answer from a transcript scrolled up to read: the rest of the turn
  // does not pull the reader down. The page stops waiting, the turn ends.
  await page.evaluate(() => {
    document.querySelector("#transcript").scrollTop = 0;
  });
  await perm.locator("button[data-option-id=allow-once]").evaluate((b) => b.click());
  await page.locator(".turn-end").first().waitFor();
  await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
  assert.equal(await page.evaluate(() => document.querySelector("#transcript").scrollTop), 0, "a reader scrolled up stays put");
  assert.equal(await page.isHidden("#waiting"), true);
  assert.equal(await page.getAttribute("body", "data-waiting"), "0");
  assert.equal(await page.getAttribute(".tool[data-tool-call-id=edit-big]", "data-status"), "completed");

  // The session's title, mode, model and usage.
  await page.locator("#session-name").filter({ hasText: "Tidy the big file" }).waitFor();
  await modesAre("code");
  assert.equal(await page.inputValue("select[data-config-id=model]"), "fast");
  assert.match(await page.textContent("[data-role=usage]"), /1,200 \/ 200,000 tokens.*0\.05 USD/);
  const seq = Number(await page.getAttribute("body", "data-last-seq"));
  await page.selectOption("select[data-config-id=model]", "smart");
  // SetConfigOption records the agent's answer as an event, which redraws the picker.
  await page.waitForFunction((s) => Number(document.body.dataset.lastSeq) > s, seq);
  await page.waitForFunction(() => document.querySelector("select[data-config-id=model]")?.value === "smart");

  // Shift+Enter breaks the line; Enter sends.
  await page.click("#prompt");
  await page.keyboard.type("Once more");
  await page.keyboard.press("Shift+Enter");
  await page.keyboard.type("with feeling");
  assert.equal(await page.inputValue("#prompt"), "Once more\nwith feeling");
  assert.equal(await page.locator(".turn").count(), 1, "Shift+Enter did not send");
  await fits("#send");
  await page.keyboard.press("Enter");
  await page.locator(".turn-end").nth(1).waitFor();
  assert.deepEqual(await page.locator(".bubble.user .body").allTextContents(), ["Tidy the big file, please.", "Once more\nwith feeling"]);

  // A reused toolCallId in a later turn gets a new card; the first stays.
  const t1 = page.locator(".tool[data-tool-call-id=t1]");
  assert.deepEqual(await t1.locator(".title").allTextContents(), ["Read notes.txt", "Read notes.txt again"]);
  assert.deepEqual(await t1.evaluateAll((cs) => cs.map((c) => [...document.querySelectorAll(".turn")].indexOf(c.closest(".turn")))), [0, 1]);
  await noOverflow();
  await fits("#send");

  // A reload opens the transcript at the latest turn.
  await page.reload();
  await page.locator(".turn-end").nth(1).waitFor();
  await page.waitForFunction(() => {
    const t = document.querySelector("#transcript");
    return t.scrollHeight > t.clientHeight && t.scrollHeight - t.scrollTop - t.clientHeight < 80;
  });
  assert.equal(await page.locator(".tool[data-tool-call-id=t1]").count(), 2, "the replay gives the reused id two cards too");
  await modesAre("code");
  await noOverflow();
  await page.screenshot({ path: path.join(shots, `console-${tag}-turn.png`) });

  // The session list: by title with a time, filtered, the retired agent's
  // session marked and read only.
  if (phone) await page.click("#menu");
  const mine = page.locator(`#sessions button.open[data-session-id="${sessionId}"]`);
  await mine.locator(".name").filter({ hasText: "Tidy the big file" }).waitFor();
  assert.equal(await mine.locator("time").count(), 1);
  const old = page.locator(`#sessions li.retired button.open[data-session-id="${retired}"]`);
  assert.match(await old.textContent(), /agent retired is no longer configured/);
  await page.fill("#session-filter", "tidy the big");
  await old.waitFor({ state: "detached" });
  assert.equal(await mine.isVisible(), true);
  await page.fill("#session-filter", "no such session");
  await page.locator("#sessions li.none").filter({ hasText: "No session matches." }).waitFor();
  await page.fill("#session-filter", "");
  await noOverflow();
  if (phone) await page.screenshot({ path: path.join(shots, "console-phone-sessions.png") });
  await old.click();
  await page.locator("#readonly").filter({ hasText: /no longer configured/ }).waitFor();
  assert.equal(await page.isDisabled("#prompt"), true);
  assert.equal(await page.isDisabled("#send"), true);

  // Delete, in two clicks.
  if (phone) await page.click("#menu");
  const del = page.locator(`#sessions li:has(button.open[data-session-id="${sessionId}"]) button.delete`);
  await del.click();
  assert.equal(await del.textContent(), "Delete?");
  await del.click();
  await mine.waitFor({ state: "detached" });
  await page.locator("#status").filter({ hasText: "Session deleted." }).waitFor();
}

// noOverflow checks the page is no wider than the screen.
async function noOverflow() {
  const [sw, iw] = await page.evaluate(() => [document.documentElement.scrollWidth, innerWidth]);
  assert.ok(sw <= iw, `the page is ${sw}px wide on a ${iw}px screen`);
}

// fits checks an element is whole on the screen.
async function fits(selector) {
  const r = await page.locator(selector).evaluate((el) => {
    const b = el.getBoundingClientRect();
    return { left: b.left, right: b.right, top: b.top, bottom: b.bottom, iw: innerWidth, ih: innerHeight };
  });
  assert.ok(r.left >= 0 && r.right <= r.iw && r.top >= 0 && r.bottom <= r.ih, `${selector} is clipped: ${JSON.stringify(r)}`);
}

// modesAre waits until the mode picker lists every mode the agent offered
// in session/new, by name and in its order, with current picked.
async function modesAre(current) {
  const want = [
    ["ask", "Ask"],
    ["code", "Code"],
    ["architect", "Architect"],
  ];
  await page.waitForFunction(
    ([want, current]) => {
      const sel = document.querySelector("select[data-role=mode]");
      return sel?.value === current && JSON.stringify([...sel.options].map((o) => [o.value, o.textContent])) === JSON.stringify(want);
    },
    [want, current],
  );
}

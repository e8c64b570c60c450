// What the console's browser tests share: their environment, a watchdog,
// and Debian's chromium, launched by playwright-core (which never downloads
// a browser).
import { chromium } from "playwright-core";

/** env returns the environment variable name, or throws when it is unset. */
export function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
}

/** watchdog ends the process, failed, after ms. */
export function watchdog(what, ms) {
  setTimeout(() => {
    console.error(`${what}: timed out after ${ms / 1000}s`);
    process.exit(1);
  }, ms).unref();
}

/** launch starts chromium ($CHROMIUM, else /usr/bin/chromium), headless and quiet. */
export function launch() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--headless", "--disable-background-networking", "--disable-component-update"],
  });
}

/**
 * watchProblems collects into problems the page's uncaught errors and its
 * policy violations (failed loads are expected: a 401, a cut stream).
 */
export function watchProblems(page, problems) {
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("console", (m) => {
    if (m.type() === "error" && /Content Security Policy|Refused to/i.test(m.text())) problems.push(`console: ${m.text()}`);
  });
}

/**
 * openSession signs page in at url with token and creates a session of
 * agent in cwd, returning once its stream is live.
 */
export async function openSession(page, { url, token, agent, cwd }) {
  await page.goto(url);
  await page.fill("#token", token);
  await page.click("#token-form button");
  await page.selectOption("#agent", agent);
  await page.fill("#cwd", cwd);
  await page.click("#create-form button");
  await page.locator('#conn[data-state="live"]').waitFor();
}

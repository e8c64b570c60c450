// Diffs: a unified view in hunks, unchanged lines folded away beyond a few
// lines of context (a click unfolds them), and the whole old and new files
// side by side as the other view. Lines are compared by jsdiff.
import { diffLines } from "diff";
import type { Diff } from "@acp-gateway/client";
import { h } from "./dom.js";

/** Unchanged lines shown around each change. */
const context = 3;

type Kind = "same" | "del" | "add";

interface Row {
  kind: Kind;
  text: string;
  /** Line numbers, 1-based; 0 where the line is not on that side. */
  oldNo: number;
  newNo: number;
}

/** diffView shows a diff in hunks, with a switch to the whole files side by side. */
export function diffView(d: Diff): HTMLElement {
  const oldText = d.oldText ?? "";
  const newText = d.newText ?? "";
  const rows = compare(oldText, newText);
  const unified = rows ? hunks(rows) : h("p", { class: "note" }, "This diff is too large to compare line by line.");
  const sides = sideBySide(d, rows);
  sides.hidden = rows !== null;
  const toggle = h("button", { type: "button", class: "small", "data-role": "diff-view" }, "Side by side");
  toggle.addEventListener("click", () => {
    sides.hidden = !sides.hidden;
    unified.hidden = !sides.hidden;
    toggle.textContent = sides.hidden ? "Side by side" : "Unified";
  });
  const added = rows?.filter((r) => r.kind === "add").length ?? 0;
  const removed = rows?.filter((r) => r.kind === "del").length ?? 0;
  return h(
    "div",
    { class: "diff" },
    h(
      "div",
      { class: "diff-head" },
      h("span", { class: "path" }, d.path ?? ""),
      d.oldText === undefined ? h("span", { class: "badge" }, "new file") : null,
      rows ? h("span", { class: "stat" }, h("span", { class: "plus" }, `+${added}`), " ", h("span", { class: "minus" }, `−${removed}`)) : null,
      toggle,
    ),
    unified,
    sides,
  );
}

// compare returns every line of both texts in order, or null when the texts
// are too far apart to compare in reasonable time.
function compare(a: string, b: string): Row[] | null {
  const changes = diffLines(a, b, { timeout: 500 });
  if (!changes) return null;
  const rows: Row[] = [];
  let o = 1;
  let n = 1;
  for (const c of changes) {
    const kind: Kind = c.added ? "add" : c.removed ? "del" : "same";
    for (const text of splitLines(c.value)) {
      rows.push({ kind, text, oldNo: kind === "add" ? 0 : o++, newNo: kind === "del" ? 0 : n++ });
    }
  }
  return rows;
}

/** splitLines splits s into lines, without a last empty one. */
export function splitLines(s: string): string[] {
  if (s === "") return [];
  const lines = s.split("\n");
  if (lines[lines.length - 1] === "") lines.pop();
  return lines;
}

// hunks renders rows as a unified diff: runs of unchanged lines longer than
// the context on both sides fold into a button that unfolds them.
function hunks(rows: Row[]): HTMLElement {
  const body = h("div", { class: "unified" });
  let i = 0;
  while (i < rows.length) {
    if (rows[i]!.kind !== "same") {
      body.append(line(rows[i]!));
      i++;
      continue;
    }
    let j = i;
    while (j < rows.length && rows[j]!.kind === "same") j++;
    // rows[i:j] are unchanged: keep context after a change and before one.
    const keepHead = i === 0 ? 0 : context;
    const keepTail = j === rows.length ? 0 : context;
    if (j - i > keepHead + keepTail + 1) {
      for (const r of rows.slice(i, i + keepHead)) body.append(line(r));
      body.append(fold(rows.slice(i + keepHead, j - keepTail), j < rows.length ? rows[j - keepTail]! : null));
      for (const r of rows.slice(j - keepTail, j)) body.append(line(r));
    } else {
      for (const r of rows.slice(i, j)) body.append(line(r));
    }
    i = j;
  }
  return body;
}

// fold is a run of unchanged lines shown as one row; next is the row after
// it, whose hunk header it shows.
function fold(rows: Row[], next: Row | null): HTMLElement {
  const label = `${rows.length} unchanged line${rows.length === 1 ? "" : "s"}`;
  const b = h("button", { type: "button", class: "fold", "data-lines": String(rows.length) }, `⋯ ${label}`);
  const el = h("div", { class: "fold-row" }, b, next ? h("span", { class: "hunk" }, `@@ line ${next.oldNo} @@`) : null);
  b.addEventListener("click", () => el.replaceWith(...rows.map(line)));
  return el;
}

function line(r: Row): HTMLElement {
  const mark = { same: " ", del: "-", add: "+" }[r.kind];
  return h(
    "div",
    { class: `line ${r.kind}` },
    h("span", { class: "no" }, r.oldNo ? String(r.oldNo) : ""),
    h("span", { class: "no" }, r.newNo ? String(r.newNo) : ""),
    h("span", { class: "code" }, mark + r.text),
  );
}

// sideBySide shows the old and the new file whole, changed lines marked.
function sideBySide(d: Diff, rows: Row[] | null): HTMLElement {
  const side = (cls: string, label: string, text: string, kind: Kind) => {
    const changed = new Set(rows?.filter((r) => r.kind === kind).map((r) => (kind === "del" ? r.oldNo : r.newNo)));
    return h(
      "div",
      { class: `side ${cls}` },
      h("div", { class: "label" }, label),
      h("pre", {}, ...splitLines(text).map((l, i) => h("span", { class: changed.has(i + 1) ? `line ${kind}` : "line" }, l + "\n"))),
    );
  };
  return h(
    "div",
    { class: "sides" },
    side("old", d.oldText === undefined ? "new file" : "old", d.oldText ?? "", "del"),
    side("new", "new", d.newText ?? "", "add"),
  );
}

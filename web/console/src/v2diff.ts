// ACP v2 shapes the console renders beside v1's: a diff of changes and a
// git patch, and a permission request's description and subject. Text goes
// in through textContent, never as HTML.
import type { Diff, DiffChange, PermissionRequest } from "@acp-gateway/client";
import { splitLines } from "./diffview.js";
import { h } from "./render.js";

/**
 * v2DiffView shows a v2 diff: each change as its operation and paths (old
 * and new for a move or copy), then the patch as a unified patch, its added
 * and removed lines marked. It returns undefined for a v1 diff (whole
 * texts), which diffView shows.
 */
export function v2DiffView(d: Diff): HTMLElement | undefined {
  if (d.changes.length === 0 && !d.patch) return undefined;
  return h(
    "div",
    { class: "diff v2diff" },
    h("ul", { class: "changes" }, ...d.changes.map(changeView)),
    d.patch && patchView(d.patch.format, d.patch.text),
  );
}

function changeView(c: DiffChange): HTMLElement {
  return h(
    "li",
    { class: "path", "data-operation": c.operation },
    h("span", { class: "operation" }, c.operation.replaceAll("_", " ")),
    " ",
    c.oldPath !== undefined && h("span", { class: "old-path" }, c.oldPath),
    c.oldPath !== undefined && " → ",
    h("span", { class: "new-path" }, c.path ?? ""),
  );
}

/** patchView shows patch text line by line; a git patch's lines are marked by kind. */
function patchView(format: string, text: string): HTMLElement {
  const lines = splitLines(text);
  const git = format === "git_patch";
  return h(
    "pre",
    { class: "patch", "data-format": format },
    ...lines.map((l) => h("span", { class: git ? `line ${lineKind(l)}` : "line" }, l + "\n")),
  );
}

function lineKind(l: string): string {
  if (l.startsWith("+++") || l.startsWith("---") || l.startsWith("diff --git") || l.startsWith("index ")) return "meta";
  if (l.startsWith("@@")) return "hunk";
  if (l.startsWith("+")) return "add";
  if (l.startsWith("-")) return "del";
  return "";
}

/**
 * permissionDetails shows what a v2 permission request says beyond its
 * title: its description, and a subject other than a tool call (a command
 * with its working directory, or the JSON of a subject of another type).
 */
export function permissionDetails(req: PermissionRequest): HTMLElement[] {
  const out: HTMLElement[] = [];
  if (req.description !== undefined) out.push(h("p", { class: "description" }, req.description));
  const s = req.subject?.subject;
  if (s?.case === "command") {
    out.push(
      h(
        "div",
        { class: "subject command" },
        h("code", {}, s.value.command),
        h("small", {}, ` in ${s.value.cwd}`),
      ),
    );
  } else if (s?.case === "unknown") {
    out.push(h("pre", { class: "subject unknown" }, JSON.stringify(s.value, null, 2)));
  }
  return out;
}

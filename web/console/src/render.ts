// DOM building blocks: tool-call cards, diffs, the plan. Text always goes in
// through textContent, never as HTML.
import { toJson } from "@bufbuild/protobuf";
import { ValueSchema, type Value } from "@bufbuild/protobuf/wkt";
import type {
  ContentBlock,
  Diff,
  PermissionOption,
  PermissionRequest,
  PermissionResolved,
  PlanEntry,
  ToolCall,
  ToolCallContent,
} from "@acp-gateway/client";
import { permissionDetails, v2DiffView } from "./v2diff.js";

type Child = Node | string | null | undefined | false;

/** h creates an element with attributes (class, data-*, ...) and children. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string> = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  for (const c of children) if (c) el.append(c);
  return el;
}

// 16x16 stroke icons by ACP tool kind; unknown and custom kinds get "other".
const icons: Record<string, string> = {
  read: "M4 1.5h6l3 3v10H4zM10 1.5v3h3M6 8h5M6 10.5h5",
  edit: "M10.5 2.5l3 3-8 8H2.5v-3zM9 4l3 3",
  delete: "M2.5 4h11M6 4V2.5h4V4M4 4l1 10h6l1-10",
  move: "M2 8h11M9.5 4.5L13 8l-3.5 3.5",
  search: "M7 2.5a4.5 4.5 0 1 0 0 9 4.5 4.5 0 1 0 0-9zM10.2 10.2L14 14",
  execute: "M2 3l5 5-5 5M8 13h6",
  think: "M3 3.5h10v7H7l-3 3v-3H3z",
  fetch: "M8 1.5a6.5 6.5 0 1 0 0 13 6.5 6.5 0 1 0 0-13zM1.5 8h13M8 1.5c-3 3.5-3 9.5 0 13M8 1.5c3 3.5 3 9.5 0 13",
  switch_mode: "M2 5h10l-2.5-2.5M14 11H4l2.5 2.5",
  other: "M8 5.5a2.5 2.5 0 1 0 0 5 2.5 2.5 0 1 0 0-5zM8 1v2M8 13v2M1 8h2M13 8h2",
};

function icon(kind: string): SVGSVGElement {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", "0 0 16 16");
  svg.setAttribute("class", "icon");
  svg.setAttribute("aria-hidden", "true");
  const p = document.createElementNS(ns, "path");
  p.setAttribute("d", icons[kind] ?? icons.other!);
  svg.append(p);
  return svg;
}

/** The text of a content block, or a short stand-in for non-text blocks. */
export function blockText(b: ContentBlock | undefined): string {
  const blk = b?.block;
  switch (blk?.case) {
    case "text":
      return blk.value.text;
    case "image":
      return `[image ${blk.value.mimeType}]`;
    case "audio":
      return `[audio ${blk.value.mimeType}]`;
    case "resourceLink":
      return `[${blk.value.name}](${blk.value.uri})`;
    case "resource": {
      const r = blk.value.resource;
      return r.case === "textResource" ? r.value.text : `[resource ${r.value?.uri ?? ""}]`;
    }
    case "unknown":
      return JSON.stringify(blk.value);
  }
  return "";
}

function json(v: Value | undefined): string {
  return v ? JSON.stringify(toJson(ValueSchema, v), null, 2) : "";
}

/** ToolCard is one tool call, updated in place as snapshots arrive. */
export class ToolCard {
  readonly el: HTMLElement;
  private readonly head = h("header");
  private readonly locations = h("ul", { class: "locations" });
  private readonly body = h("div", { class: "content" });
  private readonly raw = h("div", { class: "raw" });
  private readonly perms = h("div", { class: "permissions" });
  private readonly requests = new Map<string, { el: HTMLElement; options: PermissionOption[] }>();

  constructor(id: string) {
    this.el = h("article", { class: "tool", "data-tool-call-id": id }, this.head, this.locations, this.body, this.raw, this.perms);
  }

  update(tc: ToolCall): void {
    const kind = tc.kind || "other";
    const status = tc.status || "pending";
    this.el.dataset.kind = kind;
    this.el.dataset.status = status;
    this.head.replaceChildren(
      h("span", { class: "kind", title: kind }, icon(kind)),
      h("span", { class: "title" }, tc.title || tc.toolCallId),
      h("span", { class: `badge status-${status}`, "data-role": "status" }, status.replaceAll("_", " ")),
    );
    this.locations.replaceChildren(
      ...tc.locations.map((l) => h("li", {}, l.line !== undefined ? `${l.path}:${l.line}` : l.path)),
    );
    this.body.replaceChildren(...tc.content.map(contentItem));
    const input = json(tc.rawInput);
    const output = json(tc.rawOutput);
    this.raw.replaceChildren(
      input && h("details", {}, h("summary", {}, "input"), h("pre", {}, input)),
      output && h("details", {}, h("summary", {}, "output"), h("pre", {}, output)),
    );
  }

  /** Shows a permission request's options as buttons; answer sends the choice. */
  ask(req: PermissionRequest, answer: (optionId: string) => Promise<void>): void {
    if (this.requests.has(req.requestId)) return;
    const buttons = req.options.map((o) => {
      const allow = o.kind.startsWith("allow");
      const b = h(
        "button",
        { type: "button", class: allow ? "allow" : "reject", "data-option-id": o.optionId, "data-kind": o.kind },
        o.name,
        h("small", {}, o.kind.replaceAll("_", " ")),
      );
      b.addEventListener("click", () => {
        for (const x of buttons) x.disabled = true;
        answer(o.optionId).catch(() => {
          for (const x of buttons) x.disabled = false;
        });
      });
      return b;
    });
    const el = h(
      "div",
      { class: "permission", "data-request-id": req.requestId },
      h("p", {}, req.title || "The agent asks for permission:"),
      ...permissionDetails(req),
      h("div", { class: "choices" }, ...buttons),
    );
    this.requests.set(req.requestId, { el, options: req.options });
    this.perms.append(el);
  }

  /** Replaces a request's buttons with how it was answered. */
  resolved(res: PermissionResolved): void {
    const r = this.requests.get(res.requestId);
    if (!r) return;
    const o = res.outcome?.outcome;
    let text = "Permission cancelled";
    if (o?.case === "selectedOptionId") {
      const opt = r.options.find((x) => x.optionId === o.value);
      text = `Answered: ${opt?.name ?? o.value}`;
    }
    r.el.replaceChildren(h("p", { class: "answered" }, text));
    r.el.classList.add("done");
  }
}

function contentItem(c: ToolCallContent): Node {
  const item = c.item;
  switch (item.case) {
    case "content":
      return h("pre", { class: "text" }, blockText(item.value));
    case "diff":
      return v2DiffView(item.value) ?? diffView(item.value);
    case "terminal":
      return h("p", { class: "terminal" }, `terminal ${item.value.terminalId}`);
    case "unknown":
      return h("pre", { class: "unknown" }, JSON.stringify(item.value, null, 2));
  }
  return h("span");
}

/** diffView shows a diff's old and new text side by side, changed lines marked. */
export function diffView(d: Diff): HTMLElement {
  const oldLines = d.oldText === undefined ? [] : splitLines(d.oldText);
  const newLines = splitLines(d.newText ?? "");
  const [oldKeep, newKeep] = common(oldLines, newLines);
  const side = (cls: string, label: string, lines: string[], keep: Set<number>, mark: string) =>
    h(
      "div",
      { class: `side ${cls}` },
      h("div", { class: "label" }, label),
      h("pre", {}, ...lines.map((l, i) => h("span", { class: keep.has(i) ? "line" : `line ${mark}` }, l + "\n"))),
    );
  return h(
    "div",
    { class: "diff" },
    h("div", { class: "path" }, d.path ?? ""),
    h(
      "div",
      { class: "sides" },
      side("old", d.oldText === undefined ? "new file" : "old", oldLines, oldKeep, "del"),
      side("new", "new", newLines, newKeep, "add"),
    ),
  );
}

function splitLines(s: string): string[] {
  const lines = s.split("\n");
  if (lines.length > 1 && lines[lines.length - 1] === "") lines.pop();
  return lines;
}

// common returns the indexes of the lines of a and of b that belong to a
// longest common subsequence; diffs too big for that keep nothing marked.
function common(a: string[], b: string[]): [Set<number>, Set<number>] {
  const ka = new Set<number>();
  const kb = new Set<number>();
  if (a.length * b.length > 1_000_000) {
    a.forEach((_, i) => ka.add(i));
    b.forEach((_, i) => kb.add(i));
    return [ka, kb];
  }
  const w = b.length + 1;
  const lcs = new Uint32Array((a.length + 1) * w);
  for (let i = a.length - 1; i >= 0; i--) {
    for (let j = b.length - 1; j >= 0; j--) {
      lcs[i * w + j] = a[i] === b[j] ? lcs[(i + 1) * w + j + 1]! + 1 : Math.max(lcs[(i + 1) * w + j]!, lcs[i * w + j + 1]!);
    }
  }
  for (let i = 0, j = 0; i < a.length && j < b.length; ) {
    if (a[i] === b[j]) {
      ka.add(i++);
      kb.add(j++);
    } else if (lcs[(i + 1) * w + j]! >= lcs[i * w + j + 1]!) i++;
    else j++;
  }
  return [ka, kb];
}

/** planView renders plan entries with their status and priority. */
export function planView(entries: PlanEntry[]): HTMLElement {
  return h(
    "ol",
    { class: "plan-entries" },
    ...entries.map((e) =>
      h(
        "li",
        { "data-status": e.status || "pending", "data-priority": e.priority },
        h("span", { class: `badge status-${e.status || "pending"}` }, (e.status || "pending").replaceAll("_", " ")),
        h("span", { class: "entry" }, e.content),
      ),
    ),
  );
}

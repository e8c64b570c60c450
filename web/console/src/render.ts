// Tool-call cards, content blocks and the plan. Text always goes in
// through textContent, never as HTML; agent markdown goes through
// markdown.ts, which sanitises it.
import { toJson } from "@bufbuild/protobuf";
import { ValueSchema, type Value } from "@bufbuild/protobuf/wkt";
import type {
  ContentBlock,
  PermissionOption,
  PermissionRequest,
  PermissionResolved,
  PlanEntry,
  ToolCall,
  ToolCallContent,
} from "@acp-gateway/client";
import { diffView } from "./diffview.js";
import { h } from "./dom.js";
import { permissionDetails, v2DiffView } from "./v2diff.js";

export { h } from "./dom.js";

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

  /**
   * Shows a permission request's options as buttons; answer sends the
   * choice. It returns the request's element, or null when it is shown
   * already.
   */
  ask(req: PermissionRequest, answer: (optionId: string) => Promise<void>): HTMLElement | null {
    if (this.requests.has(req.requestId)) return null;
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
      h("p", {}, h("strong", { class: "waiting-label" }, "Waiting for you · "), req.title || "The agent asks for permission:"),
      ...permissionDetails(req),
      h("div", { class: "choices" }, ...buttons),
    );
    this.requests.set(req.requestId, { el, options: req.options });
    this.perms.append(el);
    return el;
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
      return item.value.block.case === "image" ? blockElement(item.value) : h("pre", { class: "text" }, blockText(item.value));
    case "diff":
      return v2DiffView(item.value) ?? diffView(item.value);
    case "terminal":
      return h("p", { class: "terminal" }, `terminal ${item.value.terminalId}`);
    case "unknown":
      return h("pre", { class: "unknown" }, JSON.stringify(item.value, null, 2));
  }
  return h("span");
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

// Base64 as agents send it; anything else is not put in a data URL.
const base64 = /^[A-Za-z0-9+/=\s]*$/;

/**
 * blockElement shows a content block that is not text: an image as an
 * image (from its data; an image only linked by URI is a link, as the page
 * loads nothing from elsewhere), anything else as its text stand-in.
 */
export function blockElement(b: ContentBlock): HTMLElement {
  const blk = b.block;
  if (blk.case === "image") {
    const { data, mimeType, uri } = blk.value;
    if (data && /^image\/[\w.+-]+$/.test(mimeType) && base64.test(data)) {
      return h("img", { class: "image", src: `data:${mimeType};base64,${data.replace(/\s/g, "")}`, alt: uri ?? `image ${mimeType}` });
    }
    if (uri) return h("a", { href: uri, target: "_blank", rel: "noopener noreferrer" }, `[image ${uri}]`);
  }
  return h("span", { class: "block" }, blockText(b));
}

// Elicitations: the agent's requests for input (ACP elicitation/create), as
// the gateway relays them. A url elicitation is a link with Accept and
// Decline; a form elicitation is a form made from the requested schema's
// top-level string, number, integer, boolean and enum properties, with
// Submit and Decline. The first client to answer wins; the others see the
// request resolved.
import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import type { ElicitationRequest, ElicitationResolved, SessionEvent } from "@acp-gateway/client";
import type { Attention } from "./attention.js";
import { h } from "./render.js";

/** Answers elicitation requestId with action, and content with accept. */
export type RespondElicitation = (requestId: string, action: "accept" | "decline" | "cancel", content?: JsonObject) => Promise<void>;

/** Elicitations shows a session's elicitations; apply feeds it the session's events in order. */
export class Elicitations {
  readonly el = h("div", { class: "elicitations" });
  private readonly cards = new Map<string, HTMLElement>();

  /**
   * respond answers; attention, when given, is told of each request that
   * waits (so the page brings it into view and says it waits) and of its
   * end.
   */
  constructor(
    private readonly respond: RespondElicitation,
    private readonly attention?: Pick<Attention, "add" | "remove">,
  ) {}

  apply(ev: SessionEvent): void {
    const e = ev.event;
    switch (e.case) {
      case "elicitationRequest":
        this.ask(e.value);
        break;
      case "elicitationResolved":
        this.resolved(e.value);
        break;
      case "elicitationComplete":
        for (const card of this.cards.values()) {
          if (card.dataset.elicitationId === e.value.elicitationId) card.dataset.complete = "true";
        }
        break;
      case "snapshot":
        // Sent in place of events retention dropped: the elicitations
        // still waiting are in it.
        for (const req of e.value.pendingElicitations) this.ask(req);
        break;
    }
  }

  private ask(req: ElicitationRequest): void {
    if (this.cards.has(req.requestId)) return;
    const card = h("div", { class: "elicitation permission", "data-request-id": req.requestId, "data-mode": req.mode });
    if (req.elicitationId) card.dataset.elicitationId = req.elicitationId;
    card.append(h("p", {}, req.message || "The agent asks for input:"));
    const buttons: HTMLButtonElement[] = [];
    const send = (action: "accept" | "decline" | "cancel", content?: JsonObject) => {
      for (const b of buttons) b.disabled = true;
      this.respond(req.requestId, action, content).catch(() => {
        for (const b of buttons) b.disabled = false;
      });
    };
    // A submit button sends the form's content (the form's listener);
    // the others send their action alone.
    const button = (label: string, cls: string, action: "accept" | "decline", submit = false) => {
      const b = h("button", { type: submit ? "submit" : "button", class: cls, "data-action": action }, label);
      buttons.push(b);
      if (!submit) b.addEventListener("click", () => send(action));
      return b;
    };
    if (req.mode === "url") {
      card.append(link(req.url));
      const accept = button("Accept", "allow", "accept");
      card.append(h("div", { class: "choices" }, accept, button("Decline", "reject", "decline")));
    } else if (req.mode === "form") {
      const form = h("form", { class: "elicitation-form" });
      const read = fields(form, req.requestedSchema ?? {});
      form.append(h("div", { class: "choices" }, button("Submit", "allow", "accept", true), button("Decline", "reject", "decline")));
      form.addEventListener("submit", (ev) => {
        ev.preventDefault();
        const content = read();
        if (content) send("accept", content);
      });
      card.append(form);
    } else {
      // A mode this console does not know: it can only be declined.
      card.append(h("p", { class: "note" }, `(${req.mode} elicitation)`));
      card.append(h("div", { class: "choices" }, button("Decline", "reject", "decline")));
    }
    this.cards.set(req.requestId, card);
    this.el.append(card);
    this.attention?.add(req.requestId, { el: card, what: `Input: ${req.message || req.mode}` });
  }

  private resolved(res: ElicitationResolved): void {
    const card = this.cards.get(res.requestId);
    if (!card) return;
    this.attention?.remove(res.requestId);
    const by = res.answeredBy ? ` (${res.answeredBy})` : "";
    const text = { accept: "Accepted", decline: "Declined" }[res.action] ?? "Cancelled";
    card.replaceChildren(h("p", { class: "answered" }, `${text}${by}`));
    card.classList.add("done");
  }
}

/** link shows url, as a link only when it is http or https. */
function link(url: string): HTMLElement {
  let safe = false;
  try {
    safe = ["http:", "https:"].includes(new URL(url).protocol);
  } catch {
    // not a URL: shown as text
  }
  if (!safe) return h("p", { class: "url" }, url);
  return h("p", { class: "url" }, h("a", { href: url, target: "_blank", rel: "noopener noreferrer" }, url));
}

/**
 * fields adds an input for each top-level property of schema to form and
 * returns what reads them back as content (undefined, with the form's
 * validity shown, when a required field is empty).
 */
function fields(form: HTMLFormElement, schema: JsonObject): () => JsonObject | undefined {
  const props = (isObject(schema.properties) ? schema.properties : {}) as JsonObject;
  const required = new Set(Array.isArray(schema.required) ? schema.required.filter((r) => typeof r === "string") : []);
  const readers: (() => [string, JsonValue | undefined])[] = [];
  // In name order: the schema comes as a google.protobuf.Struct, which
  // keeps no order of its own.
  for (const [name, raw] of Object.entries(props).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    if (!isObject(raw)) continue;
    const prop = raw as JsonObject;
    const label = typeof prop.title === "string" ? prop.title : name;
    const need = required.has(name);
    const attrs: Record<string, string> = { name, "data-property": name };
    if (need) attrs.required = "";
    let input: HTMLInputElement | HTMLSelectElement;
    let read: () => JsonValue | undefined;
    const enumValues = Array.isArray(prop.enum) ? prop.enum.filter((v) => typeof v === "string") : null;
    if (prop.type === "boolean") {
      input = h("input", { ...attrs, type: "checkbox" });
      if (prop.default === true) input.checked = true;
      const box = input;
      read = () => box.checked;
    } else if (enumValues) {
      input = h("select", attrs, ...(need ? [] : [h("option", { value: "" }, "")]), ...enumValues.map((v) => h("option", { value: v }, v)));
      const sel = input;
      read = () => (sel.value === "" ? undefined : sel.value);
    } else if (prop.type === "number" || prop.type === "integer") {
      input = h("input", { ...attrs, type: "number", step: prop.type === "integer" ? "1" : "any" });
      const num = input;
      read = () => (num.value === "" ? undefined : Number(num.value));
    } else if (prop.type === "string") {
      input = h("input", { ...attrs, type: "text" });
      const text = input;
      read = () => (text.value === "" && !need ? undefined : text.value);
    } else {
      continue; // arrays and custom types are not offered: left out
    }
    form.append(h("label", {}, h("span", {}, label), input));
    readers.push(() => [name, read()]);
  }
  return () => {
    if (!form.reportValidity()) return undefined;
    const content: JsonObject = {};
    for (const r of readers) {
      const [name, v] = r();
      if (v !== undefined) content[name] = v;
    }
    return content;
  };
}

function isObject(v: JsonValue | undefined): boolean {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

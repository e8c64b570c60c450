// Transcript renders one session's numbered events. Events may come from
// several streams (Watch, Prompt, a resumed Watch) and overlap: each seq is
// shown once, in order, and an event that arrives early waits for the ones
// before it.
import { create } from "@bufbuild/protobuf";
import {
  ToolCallSchema,
  type ContentChunk,
  type MessageUpdate,
  type PermissionRequest,
  type PlanEntry,
  type SessionEvent,
  type SessionSnapshot,
  type ToolCall,
} from "@acp-gateway/client";
import { blockText, h, planView, ToolCard } from "./render.js";

/** Answers a permission request with one of its options. */
export type Respond = (requestId: string, optionId: string) => Promise<void>;

type TextKind = "user" | "message" | "thought";

export class Transcript {
  readonly el = h("div", { class: "turns" });
  /** The seq of the last event shown; a resumed Watch starts after it. */
  lastSeq = 0n;
  /** A turn has started and not ended. */
  running = false;
  /** The session is closed. */
  closed = false;
  /** The ids of the permission requests answered or cancelled. */
  readonly resolved = new Set<string>();
  /** Called after each event shown. */
  onChange: (ev: SessionEvent) => void = () => {};

  private readonly early = new Map<bigint, SessionEvent>();
  private readonly cards = new Map<string, ToolCard>();
  private readonly requestCards = new Map<string, ToolCard>();
  private readonly messages = new Map<string, HTMLElement>();
  private turn: HTMLElement | null = null;
  private text: { kind: TextKind; el: HTMLElement } | null = null;
  private plan: HTMLElement | null = null;

  constructor(private readonly respond: Respond) {}

  /** apply shows ev unless it was shown already. */
  apply(ev: SessionEvent): void {
    if (ev.event.case === "snapshot") {
      // Sent by Watch in place of events retention dropped: it reflects
      // every event up to its seq.
      if (ev.seq <= this.lastSeq) return;
      this.snapshot(ev.event.value);
      this.lastSeq = ev.seq;
      for (const seq of this.early.keys()) if (seq <= ev.seq) this.early.delete(seq);
      this.onChange(ev);
    } else if (ev.seq > this.lastSeq) {
      this.early.set(ev.seq, ev);
    }
    for (let next = this.early.get(this.lastSeq + 1n); next; next = this.early.get(this.lastSeq + 1n)) {
      this.early.delete(next.seq);
      this.lastSeq = next.seq;
      this.show(next);
      this.onChange(next);
    }
  }

  private show(ev: SessionEvent): void {
    const e = ev.event;
    switch (e.case) {
      case "turnStarted":
        this.turn = h("section", { class: "turn" });
        this.el.append(this.turn);
        this.text = this.plan = null;
        this.running = true;
        this.appendText("user", e.value.prompt.map(blockText).join("\n"));
        this.text = null;
        break;
      case "userMessageChunk":
        this.chunk("user", e.value);
        break;
      case "agentMessageChunk":
        this.chunk("message", e.value);
        break;
      case "agentThoughtChunk":
        this.chunk("thought", e.value);
        break;
      case "userMessage":
        this.message("user", e.value);
        break;
      case "agentMessage":
        this.message("message", e.value);
        break;
      case "agentThought":
        this.message("thought", e.value);
        break;
      case "plan":
        this.setPlan(e.value.entries);
        break;
      case "planUpdate":
        if (e.value.plan?.content.case === "items") this.setPlan(e.value.plan.content.value.entries);
        break;
      case "toolCall":
        this.card(e.value);
        break;
      case "permissionRequest":
        this.ask(e.value);
        break;
      case "permissionResolved":
        this.resolved.add(e.value.requestId);
        this.requestCards.get(e.value.requestId)?.resolved(e.value);
        break;
      case "turnEnded": {
        this.running = false;
        const v = e.value;
        const end = h("p", { class: "turn-end", "data-stop-reason": v.stopReason }, `Turn ended: ${v.stopReason || "error"}`);
        if (v.error) end.append(h("span", { class: "error" }, ` — ${v.error}`));
        this.section().append(end);
        this.text = null;
        break;
      }
      case "stateChanged":
        if (e.value.state === "closed") this.closed = true;
        this.section().append(
          h("p", { class: "note" }, `Session ${e.value.state.replaceAll("_", " ")}${e.value.detail ? `: ${e.value.detail}` : ""}`),
        );
        this.text = null;
        break;
      // toolCallUpdate and toolCallContentChunk are the deltas of the
      // toolCall snapshots that follow them; the rest (modes, commands,
      // usage, ...) has no place in this view.
    }
  }

  private section(): HTMLElement {
    if (!this.turn) {
      this.turn = h("section", { class: "turn" });
      this.el.append(this.turn);
    }
    return this.turn;
  }

  private appendText(kind: TextKind, s: string): void {
    if (this.text?.kind !== kind) {
      const body = h("div", { class: "body" });
      const label = { user: "You", message: "Agent", thought: "Thinking" }[kind];
      this.section().append(h("div", { class: `bubble ${kind}` }, h("div", { class: "who" }, label), body));
      this.text = { kind, el: body };
    }
    this.text.el.append(s);
  }

  private chunk(kind: TextKind, c: ContentChunk): void {
    this.appendText(kind, blockText(c.content));
  }

  // message applies an ACP v2 whole-message update, keyed by its id.
  private message(kind: TextKind, m: MessageUpdate): void {
    let el = this.messages.get(m.messageId);
    if (!el) {
      this.text = null;
      this.appendText(kind, "");
      el = this.text!.el;
      this.messages.set(m.messageId, el);
    }
    const op = m.content?.op;
    if (op?.case === "value") el.textContent = op.value.items.map(blockText).join("");
    else if (op?.case === "clear") el.textContent = "";
  }

  private setPlan(entries: PlanEntry[]): void {
    if (!this.plan) {
      this.plan = h("div", { class: "plan" });
      this.section().append(h("div", { class: "plan-card" }, h("div", { class: "who" }, "Plan"), this.plan));
      this.text = null;
    }
    this.plan.replaceChildren(planView(entries));
  }

  private card(tc: ToolCall): ToolCard {
    let c = this.cards.get(tc.toolCallId);
    if (!c) {
      c = new ToolCard(tc.toolCallId);
      this.cards.set(tc.toolCallId, c);
      this.section().append(c.el);
      this.text = null;
    }
    c.update(tc);
    return c;
  }

  private ask(req: PermissionRequest): void {
    const id = req.preview?.toolCallId || req.toolCall?.toolCallId || req.requestId;
    // The preview is shown only until the card exists: it is not the
    // stored state of the tool call.
    const c = this.cards.get(id) ?? this.card(req.preview ?? create(ToolCallSchema, { toolCallId: id }));
    this.requestCards.set(req.requestId, c);
    c.ask(req, (optionId) => this.respond(req.requestId, optionId));
  }

  private snapshot(s: SessionSnapshot): void {
    this.section().append(h("p", { class: "note" }, "Older events were dropped by the gateway; tool calls as of now:"));
    this.text = null;
    for (const tc of s.toolCalls) this.card(tc);
  }
}

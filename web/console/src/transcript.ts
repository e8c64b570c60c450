// Transcript renders one session's numbered events. Events may come from
// several streams (Watch, Prompt, a resumed Watch) and overlap: each seq is
// shown once, in order, and an event that arrives early waits for the ones
// before it.
//
// Each turn is a section with its own tool cards: an agent that reuses a
// toolCallId in a later turn gets a new card there. Agent messages are
// markdown; thoughts fold away. The session's title, mode, configuration
// options and usage are kept in state for the page's controls: seeded from
// GetSession's snapshot (which alone lists the modes the agent offers),
// then updated by the events.
import { create } from "@bufbuild/protobuf";
import {
  ToolCallSchema,
  type ContentBlock,
  type ContentChunk,
  type MessageUpdate,
  type PermissionRequest,
  type PlanEntry,
  type SessionConfigOption,
  type SessionEvent,
  type SessionSnapshot,
  type ToolCall,
  type UsageUpdate,
} from "@acp-gateway/client";
import type { Attention } from "./attention.js";
import { h } from "./dom.js";
import { markdown } from "./markdown.js";
import { blockElement, blockText, planView, ToolCard } from "./render.js";

/** Answers a permission request with one of its options. */
export type Respond = (requestId: string, optionId: string) => Promise<void>;

export interface TranscriptHooks {
  respond: Respond;
  /** What waits for the user. */
  attention: Attention;
  /** Called before an event is rendered (the scroller notes the position). */
  before: () => void;
}

/** A mode the agent offers. */
export interface Mode {
  id: string;
  name: string;
}

/** What the snapshot and the events said of the session, for the page's controls. */
export interface SessionState {
  /** The title from the last session_info_update; "" when none. */
  title: string;
  /** The text of the first turn's prompt. */
  firstPrompt: string;
  /** The current mode, from the snapshot or current_mode_update; "" when none. */
  modeId: string;
  /** The modes the agent offers (the snapshot's, in its order), then any
   * other that a current_mode_update named. */
  modes: Mode[];
  /** The configuration options from the snapshot or the last config_option_update. */
  configOptions: SessionConfigOption[];
  /** The last usage_update, if any. */
  usage: UsageUpdate | null;
}

type TextKind = "user" | "message" | "thought";

// Bubble is one message: its parts (text runs and non-text blocks) are
// kept so a streamed message can be rendered again whole, agent text as
// markdown.
class Bubble {
  readonly body = h("div", { class: "body" });
  readonly el: HTMLElement;
  private parts: (string | HTMLElement)[] = [];

  constructor(readonly kind: TextKind) {
    const label = { user: "You", message: "Agent", thought: "Thinking" }[kind];
    if (kind === "thought") {
      // Thoughts are folded away; the summary shows how they start.
      this.el = h("details", { class: "bubble thought" }, h("summary", { class: "who" }, label), this.body);
    } else {
      this.el = h("div", { class: `bubble ${kind}` }, h("div", { class: "who" }, label), this.body);
    }
  }

  add(b: ContentBlock | undefined): void {
    if (!b) return;
    const last = this.parts.length - 1;
    if (b.block.case === "text") {
      if (typeof this.parts[last] === "string") this.parts[last] += b.block.value.text;
      else this.parts.push(b.block.value.text);
    } else if (b.block.case === "image") {
      this.parts.push(blockElement(b));
    } else {
      const t = blockText(b);
      if (typeof this.parts[last] === "string") this.parts[last] += t;
      else this.parts.push(t);
    }
    this.render();
  }

  set(blocks: ContentBlock[]): void {
    this.parts = [];
    for (const b of blocks) this.add(b);
    this.render();
  }

  private render(): void {
    const md = this.kind === "message";
    this.body.replaceChildren(...this.parts.map((p) => (typeof p !== "string" ? p : md ? markdown(p) : p)));
    if (this.kind === "thought") {
      const text = this.parts.filter((p) => typeof p === "string").join(" ");
      const summary = this.el.firstElementChild!;
      summary.replaceChildren("Thinking", h("span", { class: "preview" }, text.length > 80 ? `${text.slice(0, 80)}…` : text));
    }
  }
}

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
  /** What the events said of the session. */
  readonly state: SessionState = { title: "", firstPrompt: "", modeId: "", modes: [], configOptions: [], usage: null };
  /** Called after each event shown. */
  onChange: (ev: SessionEvent) => void = () => {};

  /**
   * seed takes what a snapshot (GetSession's, or Watch's in place of
   * dropped events) says of the session: the modes the agent offers, which
   * no event lists (current_mode_update names only the new one), and the
   * current mode, configuration options, usage and title. Where the events
   * shown are newer than the snapshot (the Watch stream won the race),
   * what they set is kept and the snapshot only fills the rest.
   */
  seed(s: SessionSnapshot): void {
    const st = this.state;
    const offered: Mode[] = (s.modes?.availableModes ?? []).map((m) => ({ id: m.id, name: m.name || m.id }));
    st.modes = [...offered, ...st.modes.filter((m) => !offered.some((o) => o.id === m.id))];
    const fresh = s.lastSeq >= this.lastSeq;
    const modeId = s.modes?.currentModeId ?? "";
    if (modeId && (fresh || !st.modeId)) st.modeId = modeId;
    if (fresh || st.configOptions.length === 0) st.configOptions = s.configOptions;
    if (s.usage && (fresh || !st.usage)) st.usage = s.usage;
    if (fresh || !st.title) st.title = s.title;
    if (!st.firstPrompt) st.firstPrompt = s.firstPrompt;
  }

  private readonly early = new Map<bigint, SessionEvent>();
  // The current turn's tool cards by toolCallId; a new turn starts afresh.
  private cards = new Map<string, ToolCard>();
  private readonly requestCards = new Map<string, ToolCard>();
  private readonly messages = new Map<string, Bubble>();
  private turn: HTMLElement | null = null;
  private text: Bubble | null = null;
  private plan: HTMLElement | null = null;

  constructor(private readonly hooks: TranscriptHooks) {}

  /** apply shows ev unless it was shown already. */
  apply(ev: SessionEvent): void {
    this.hooks.before();
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
        this.turn = h("section", { class: "turn", "data-seq": String(ev.seq) });
        this.el.append(this.turn);
        this.text = this.plan = null;
        this.cards = new Map();
        this.running = true;
        this.state.firstPrompt ||= e.value.prompt.map(blockText).join("\n");
        this.bubble("user").set(e.value.prompt);
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
        this.hooks.attention.remove(e.value.requestId);
        break;
      case "sessionInfoUpdate": {
        const t = e.value.title?.op;
        if (t?.case === "value") this.state.title = t.value;
        else if (t?.case === "clear") this.state.title = "";
        break;
      }
      case "currentModeUpdate":
        this.state.modeId = e.value.currentModeId;
        if (!this.state.modes.some((m) => m.id === e.value.currentModeId)) {
          this.state.modes.push({ id: e.value.currentModeId, name: e.value.currentModeId });
        }
        break;
      case "configOptionUpdate":
        this.state.configOptions = e.value.configOptions;
        break;
      case "usageUpdate":
        this.state.usage = e.value;
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
      // Elicitations are shown by elicitation.ts, which main.ts feeds
      // every event and gives the page's attention (attention.add and
      // remove), below this view.
      //
      // toolCallUpdate and toolCallContentChunk are the deltas of the
      // toolCall snapshots that follow them; the rest (commands, terminals,
      // ...) has no place in this view.
    }
  }

  private section(): HTMLElement {
    if (!this.turn) {
      this.turn = h("section", { class: "turn" });
      this.el.append(this.turn);
    }
    return this.turn;
  }

  // bubble returns the message being written if it is of this kind, else
  // a new one.
  private bubble(kind: TextKind): Bubble {
    if (this.text?.kind !== kind) {
      this.text = new Bubble(kind);
      this.section().append(this.text.el);
    }
    return this.text;
  }

  private chunk(kind: TextKind, c: ContentChunk): void {
    this.bubble(kind).add(c.content);
  }

  // message applies an ACP v2 whole-message update, keyed by its id.
  private message(kind: TextKind, m: MessageUpdate): void {
    let b = this.messages.get(m.messageId);
    if (!b) {
      this.text = null;
      b = this.bubble(kind);
      this.messages.set(m.messageId, b);
    }
    const op = m.content?.op;
    if (op?.case === "value") b.set(op.value.items);
    else if (op?.case === "clear") b.set([]);
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
    const el = c.ask(req, (optionId) => this.hooks.respond(req.requestId, optionId));
    if (el && !this.resolved.has(req.requestId)) {
      const patch = req.toolCall?.title?.op;
      const title = req.title || req.preview?.title || (patch?.case === "value" ? patch.value : "") || "a tool call";
      this.hooks.attention.add(req.requestId, { el, what: `Permission: ${title}` });
    }
  }

  private snapshot(s: SessionSnapshot): void {
    this.section().append(h("p", { class: "note" }, "Older events were dropped by the gateway; tool calls as of now:"));
    this.text = null;
    for (const tc of s.toolCalls) this.card(tc);
    this.seed(s);
  }
}

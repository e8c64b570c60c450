// The session list: each session by its title (or its first prompt, or its
// id) and time, newest first, with a filter and a two-click delete.
// Sessions of agents the gateway no longer offers are marked: they can be
// read, not prompted.
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { SessionSummary } from "@acp-gateway/client";
import type { SessionClient } from "./api.js";
import { h } from "./dom.js";

/** What the list shows of a session beyond its summary. */
export interface SessionLabel {
  title: string;
  firstPrompt: string;
  /** The session's last activity when known, else when it was created. */
  time: Date | null;
}

// Labels read from the sessions' logs, by session id, with the last seq
// they were read at.
const labels = new Map<string, { seq: bigint; label: SessionLabel }>();

/**
 * describe returns s's title, first prompt and time. Summaries do not carry
 * them (yet): they are read from the start of the session's log, its first
 * turn's prompt and any session_info_update title of that turn, and kept.
 * This is the one place to switch once SessionSummary has them.
 */
export async function describe(client: SessionClient, s: SessionSummary, signal: AbortSignal): Promise<SessionLabel> {
  const created = s.createdAt ? timestampDate(s.createdAt) : null;
  const known = labels.get(s.sessionId);
  if (known && (known.seq === s.lastSeq || known.label.firstPrompt)) return known.label;
  const label: SessionLabel = { title: known?.label.title ?? "", firstPrompt: "", time: created };
  if (s.lastSeq > 0n) {
    const stop = new AbortController();
    const quit = () => stop.abort();
    signal.addEventListener("abort", quit);
    try {
      for await (const res of client.watch({ sessionId: s.sessionId, afterSeq: 0n, deltasOnly: true }, { signal: stop.signal })) {
        const ev = res.event;
        if (!ev) continue;
        const e = ev.event;
        if (e.case === "turnStarted" && !label.firstPrompt) {
          label.firstPrompt = e.value.prompt.map((b) => (b.block.case === "text" ? b.block.value.text : "")).join(" ");
        } else if (e.case === "sessionInfoUpdate") {
          const t = e.value.title?.op;
          if (t?.case === "value") label.title = t.value;
          else if (t?.case === "clear") label.title = "";
        } else if (e.case === "snapshot") {
          break; // the start of the log is gone
        }
        if ((e.case === "turnEnded" && label.firstPrompt) || ev.seq >= s.lastSeq) break;
      }
    } catch {
      // A label is a nicety: the id stands in.
    } finally {
      signal.removeEventListener("abort", quit);
      stop.abort();
    }
  }
  labels.set(s.sessionId, { seq: s.lastSeq, label });
  return label;
}

/** known returns what is known of s's label without reading its log. */
export function known(s: SessionSummary): SessionLabel {
  return labels.get(s.sessionId)?.label ?? { title: "", firstPrompt: "", time: s.createdAt ? timestampDate(s.createdAt) : null };
}

/** remember keeps what the open session's own events say of it. */
export function remember(id: string, title: string, firstPrompt: string): void {
  const known = labels.get(id);
  if (!known) return;
  if (title) known.label.title = title;
  if (firstPrompt && !known.label.firstPrompt) known.label.firstPrompt = firstPrompt;
}

/** forget drops a deleted session's label. */
export function forget(id: string): void {
  labels.delete(id);
}

export interface ListItem {
  summary: SessionSummary;
  label: SessionLabel;
  /** The session's agent is one the gateway offers. */
  configured: boolean;
}

export interface ListActions {
  open: (id: string) => void;
  remove: (id: string) => Promise<void>;
}

/** name is how a session is called: title, first prompt, or id. */
export function name(it: ListItem): string {
  return it.label.title || it.label.firstPrompt || it.summary.sessionId;
}

/** renderList fills ul with the items that match filter, newest first. */
export function renderList(ul: HTMLElement, items: ListItem[], filter: string, selected: string, act: ListActions): void {
  const q = filter.trim().toLowerCase();
  const time = (it: ListItem) => it.label.time?.getTime() ?? 0;
  const shown = items
    .filter((it) => !q || [name(it), it.label.firstPrompt, it.summary.agent, it.summary.sessionId].some((t) => t.toLowerCase().includes(q)))
    .sort((a, b) => time(b) - time(a));
  ul.replaceChildren(
    ...shown.map((it) => {
      const s = it.summary;
      const open = h(
        "button",
        { type: "button", class: "open", "data-session-id": s.sessionId, title: s.sessionId },
        h("span", { class: "name" }, name(it)),
        h(
          "span",
          { class: "meta" },
          it.label.time ? h("time", { datetime: it.label.time.toISOString() }, ago(it.label.time)) : null,
          ` · ${s.agent} · ${s.state.replaceAll("_", " ")}`,
        ),
        it.configured ? null : h("span", { class: "retired-note" }, `agent ${s.agent} is no longer configured`),
      );
      open.addEventListener("click", () => act.open(s.sessionId));
      const del = h("button", { type: "button", class: "small delete", "data-role": "delete", title: "Delete this session" }, "Delete");
      let armed: ReturnType<typeof setTimeout> | undefined;
      del.addEventListener("click", () => {
        if (!armed) {
          // The first click asks; the second, within 4 s, deletes.
          del.textContent = "Delete?";
          del.classList.add("armed");
          armed = setTimeout(() => {
            armed = undefined;
            del.textContent = "Delete";
            del.classList.remove("armed");
          }, 4000);
          return;
        }
        clearTimeout(armed);
        del.disabled = true;
        act.remove(s.sessionId).catch(() => (del.disabled = false));
      });
      const cls = [s.sessionId === selected ? "selected" : "", it.configured ? "" : "retired"].filter(Boolean).join(" ");
      return h("li", cls ? { class: cls } : {}, open, del);
    }),
  );
  if (shown.length === 0) ul.append(h("li", { class: "none" }, q ? "No session matches." : "No sessions yet."));
}

/** ago says how long ago d was, briefly. */
export function ago(d: Date, now = Date.now()): string {
  const s = Math.max(0, Math.round((now - d.getTime()) / 1000));
  if (s < 60) return "just now";
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return d.toLocaleDateString();
}

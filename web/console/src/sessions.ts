// The session list: each session by its title (or its first prompt, or its
// id) and time, newest first, with a filter and a two-click delete.
// Sessions of agents the gateway no longer offers are marked: they can be
// read, not prompted.
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { SessionSummary } from "@acp-gateway/client";
import { h } from "./dom.js";

/** What the list shows of a session beyond its summary. */
export interface SessionLabel {
  title: string;
  firstPrompt: string;
  /** The session's last activity when known, else when it was created. */
  time: Date | null;
}

// What the open session's own events said of it since the list was read
// (a newer title), by session id.
const labels = new Map<string, SessionLabel>();

/**
 * known returns s's title, first prompt and time: the summary's (the
 * gateway materialises them), or newer ones the open session's own events
 * gave.
 */
export function known(s: SessionSummary): SessionLabel {
  const at = s.updatedAt ?? s.createdAt;
  const label: SessionLabel = { title: s.title, firstPrompt: s.firstPrompt, time: at ? timestampDate(at) : null };
  const seen = labels.get(s.sessionId);
  if (seen) {
    if (seen.title) label.title = seen.title;
    if (!label.firstPrompt) label.firstPrompt = seen.firstPrompt;
  }
  return label;
}

/** remember keeps what the open session's own events say of it. */
export function remember(id: string, title: string, firstPrompt: string): void {
  const seen = labels.get(id) ?? { title: "", firstPrompt: "", time: null };
  if (title) seen.title = title;
  if (firstPrompt && !seen.firstPrompt) seen.firstPrompt = firstPrompt;
  labels.set(id, seen);
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
          // An honest turn: requests waiting for an answer, or a running turn.
          s.pendingPermissions ? ` · waiting for you (${s.pendingPermissions})` : s.turnRunning ? " · turn running" : "",
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

// The console page: wires the forms and lists of index.html to the gateway.
import "./style.css";
import { Code, ConnectError } from "@connectrpc/connect";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { SessionSummary } from "@acp-gateway/client";
import { loadConfig, newClient, setToken, token } from "./api.js";
import { Elicitations } from "./elicitation.js";
import { follow, type FollowState } from "./follow.js";
import { h } from "./render.js";
import { Transcript } from "./transcript.js";

const client = newClient();

function $<T extends HTMLElement = HTMLElement>(id: string): T {
  return document.getElementById(id) as T;
}

const ui = {
  conn: $("conn"),
  tokenForm: $<HTMLFormElement>("token-form"),
  token: $<HTMLInputElement>("token"),
  createForm: $<HTMLFormElement>("create-form"),
  agent: $<HTMLSelectElement>("agent"),
  cwd: $<HTMLInputElement>("cwd"),
  refresh: $<HTMLButtonElement>("refresh"),
  sessions: $<HTMLUListElement>("sessions"),
  status: $("status"),
  session: $("session"),
  title: $("session-title"),
  meta: $("session-meta"),
  close: $<HTMLButtonElement>("close-session"),
  transcript: $("transcript"),
  promptForm: $<HTMLFormElement>("prompt-form"),
  prompt: $<HTMLTextAreaElement>("prompt"),
  send: $<HTMLButtonElement>("send"),
  cancel: $<HTMLButtonElement>("cancel"),
  empty: $("empty"),
};

interface Current {
  id: string;
  view: Transcript;
  abort: AbortController;
  sending: boolean;
}
let current: Current | null = null;

function showStatus(msg: string, kind: "error" | "info" = "info"): void {
  ui.status.hidden = !msg;
  ui.status.textContent = msg;
  ui.status.dataset.kind = kind;
}

function showError(what: string, e: unknown): void {
  const err = ConnectError.from(e);
  const hint = err.code === Code.Unauthenticated ? " — enter a bearer token above" : "";
  showStatus(`${what}: ${err.message}${hint}`, "error");
}

async function refreshSessions(): Promise<void> {
  try {
    const { sessions } = await client.listSessions({});
    const time = (s: SessionSummary) => (s.createdAt ? timestampDate(s.createdAt).getTime() : 0);
    ui.sessions.replaceChildren(
      ...sessions
        .sort((a, b) => time(b) - time(a))
        .map((s) => {
          const b = h(
            "button",
            { type: "button", "data-session-id": s.sessionId },
            h("span", { class: "id" }, s.sessionId),
            h("span", { class: "meta" }, `${s.agent} · ${s.state.replaceAll("_", " ")} · ${s.cwd}`),
          );
          b.addEventListener("click", () => open(s.sessionId));
          return h("li", s.sessionId === current?.id ? { class: "selected" } : {}, b);
        }),
    );
  } catch (e) {
    showError("Listing sessions", e);
  }
}

function setConn(state: FollowState | "idle", detail: string, reconnects: number): void {
  const text = {
    idle: "not watching",
    connecting: "connecting…",
    live: "live",
    reconnecting: "reconnecting…",
    ended: "session closed",
    failed: "disconnected",
  }[state];
  ui.conn.textContent = detail && state !== "live" ? `${text} (${detail})` : text;
  ui.conn.dataset.state = state;
  document.body.dataset.reconnects = String(reconnects);
  if (state === "failed") showStatus(`Watching the session: ${detail}`, "error");
}

function controls(): void {
  const c = current;
  if (!c) return;
  ui.send.disabled = c.sending || c.view.running || c.view.closed;
  ui.cancel.disabled = !c.view.running;
  ui.close.disabled = c.view.closed;
  document.body.dataset.lastSeq = String(c.view.lastSeq);
  document.body.dataset.running = String(c.view.running);
}

async function open(id: string): Promise<void> {
  if (current?.id === id) return;
  current?.abort.abort();
  history.replaceState(null, "", `#session=${encodeURIComponent(id)}`);
  const abort = new AbortController();
  const view = new Transcript(async (requestId, optionId) => {
    try {
      await client.respondPermission({ sessionId: id, requestId, optionId });
    } catch (e) {
      // The answer may have landed before the connection failed.
      if (!view.resolved.has(requestId)) showError("Answering the permission request", e);
      throw e;
    }
  });
  const elicitations = new Elicitations(async (requestId, action, content) => {
    try {
      await client.respondElicitation({ sessionId: id, requestId, action, content });
    } catch (e) {
      showError("Answering the elicitation", e);
      throw e;
    }
  });
  const c: Current = { id, view, abort, sending: false };
  current = c;
  view.onChange = (ev) => {
    const atBottom = ui.transcript.scrollHeight - ui.transcript.scrollTop - ui.transcript.clientHeight < 80;
    elicitations.apply(ev);
    controls();
    if (atBottom) ui.transcript.scrollTop = ui.transcript.scrollHeight;
    if (ev.event.case === "turnEnded" || ev.event.case === "stateChanged") void refreshSessions();
  };
  ui.transcript.replaceChildren(view.el, elicitations.el);
  ui.title.textContent = id;
  ui.meta.textContent = "";
  ui.session.hidden = false;
  ui.empty.hidden = true;
  showStatus("");
  controls();
  for (const li of ui.sessions.children) {
    li.classList.toggle("selected", li.querySelector("button")?.dataset.sessionId === id);
  }
  client.getSession({ sessionId: id }, { signal: abort.signal }).then(
    ({ session: s }) => {
      if (s) ui.meta.textContent = `${s.agent} · ${s.cwd} · ${s.state.replaceAll("_", " ")}`;
    },
    (e) => abort.signal.aborted || showError("Opening the session", e),
  );
  await follow({
    client,
    sessionId: id,
    view,
    signal: abort.signal,
    onState: (state, detail, reconnects) => current === c && setConn(state, detail, reconnects),
  });
}

async function send(): Promise<void> {
  const c = current;
  const text = ui.prompt.value.trim();
  if (!c || !text) return;
  c.sending = true;
  controls();
  let started = false;
  try {
    const stream = client.prompt(
      { sessionId: c.id, prompt: [{ block: { case: "text", value: { text } } }] },
      { signal: c.abort.signal },
    );
    for await (const res of stream) {
      if (!started) {
        started = true;
        ui.prompt.value = "";
        c.sending = false;
        controls();
      }
      if (res.event) c.view.apply(res.event);
    }
  } catch (e) {
    if (c.abort.signal.aborted) return;
    // Once the turn has started it runs on without this stream: the Watch
    // stream shows the rest.
    if (!started) showError("Sending the prompt", e);
  } finally {
    c.sending = false;
    if (current === c) controls();
  }
}

ui.token.value = token();
ui.tokenForm.addEventListener("submit", (e) => {
  e.preventDefault();
  setToken(ui.token.value.trim());
  showStatus(ui.token.value ? "Token saved for this tab." : "Token cleared.");
  void refreshSessions();
  if (current) {
    const id = current.id;
    current.abort.abort();
    current = null;
    void open(id);
  }
});

ui.cwd.value = localStorage.getItem("acp-gateway-cwd") ?? "";
ui.createForm.addEventListener("submit", async (e) => {
  e.preventDefault();
  try {
    const { sessionId } = await client.createSession({ agent: ui.agent.value, cwd: ui.cwd.value.trim() });
    localStorage.setItem("acp-gateway-cwd", ui.cwd.value.trim());
    await refreshSessions();
    void open(sessionId);
    ui.prompt.focus();
  } catch (err) {
    showError("Creating the session", err);
  }
});

ui.refresh.addEventListener("click", () => void refreshSessions());
ui.promptForm.addEventListener("submit", (e) => {
  e.preventDefault();
  void send();
});
ui.prompt.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) ui.promptForm.requestSubmit();
});
ui.cancel.addEventListener("click", () => {
  if (current) client.cancel({ sessionId: current.id }).catch((e) => showError("Cancelling the turn", e));
});
ui.close.addEventListener("click", async () => {
  if (!current) return;
  try {
    await client.closeSession({ sessionId: current.id });
  } catch (e) {
    showError("Closing the session", e);
  }
  void refreshSessions();
});

function fromHash(): void {
  const id = new URLSearchParams(location.hash.slice(1)).get("session");
  if (id) void open(id);
}
window.addEventListener("hashchange", fromHash);

loadConfig().then(
  (cfg) => {
    ui.agent.replaceChildren(...cfg.agents.map((a) => h("option", { value: a }, a)));
    if (cfg.agents.length === 0) showStatus("This gateway has no agents configured.", "error");
  },
  (e) => showStatus(`Loading the configuration: ${String(e)}`, "error"),
);
void refreshSessions();
fromHash();

// The console page: wires index.html's forms, the session list, the open
// session's transcript and its controls to the gateway. Each part lives in
// its own module: sessions.ts (the list), transcript.ts (the events),
// controls.ts (mode, options, usage), attention.ts and scroll.ts (what
// waits for the user, following the turn), follow.ts (the Watch stream).
import "./style.css";
import { Code, ConnectError } from "@connectrpc/connect";
import { loadConfig, newClient, setToken, token } from "./api.js";
import { Attention } from "./attention.js";
import { renderControls } from "./controls.js";
import { $, h } from "./dom.js";
import { Elicitations } from "./elicitation.js";
import { follow, type FollowState } from "./follow.js";
import { Scroller } from "./scroll.js";
import { forget, known, remember, renderList, type ListItem } from "./sessions.js";
import { Transcript } from "./transcript.js";

const client = newClient();

const ui = {
  menu: $<HTMLButtonElement>("menu"),
  backdrop: $("backdrop"),
  conn: $("conn"),
  tokenForm: $<HTMLFormElement>("token-form"),
  token: $<HTMLInputElement>("token"),
  createForm: $<HTMLFormElement>("create-form"),
  agent: $<HTMLSelectElement>("agent"),
  cwd: $<HTMLInputElement>("cwd"),
  refresh: $<HTMLButtonElement>("refresh"),
  filter: $<HTMLInputElement>("session-filter"),
  sessions: $<HTMLUListElement>("sessions"),
  status: $("status"),
  session: $("session"),
  title: $("session-title"),
  name: $("session-name"),
  meta: $("session-meta"),
  tools: $("session-tools"),
  close: $<HTMLButtonElement>("close-session"),
  transcript: $("transcript"),
  waiting: $("waiting"),
  waitingText: $("waiting-text"),
  waitingShow: $<HTMLButtonElement>("waiting-show"),
  readonly: $("readonly"),
  promptForm: $<HTMLFormElement>("prompt-form"),
  prompt: $<HTMLTextAreaElement>("prompt"),
  send: $<HTMLButtonElement>("send"),
  cancel: $<HTMLButtonElement>("cancel"),
  empty: $("empty"),
};

interface Current {
  id: string;
  view: Transcript;
  attention: Attention;
  abort: AbortController;
  sending: boolean;
  /** Set when the session's agent is no longer configured: read only. */
  retired: string;
}
let current: Current | null = null;

// The agents the caller may start (ListAgents); null until known.
let configured: Set<string> | null = null;
let items: ListItem[] = [];

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

// --- the drawer (the session list on narrow screens) -----------------------

function drawer(open: boolean): void {
  document.body.classList.toggle("drawer-open", open);
  ui.menu.setAttribute("aria-expanded", String(open));
}
ui.menu.addEventListener("click", () => drawer(!document.body.classList.contains("drawer-open")));
ui.backdrop.addEventListener("click", () => drawer(false));

// --- the session list ------------------------------------------------------

function drawList(): void {
  renderList(ui.sessions, items, ui.filter.value, current?.id ?? "", {
    open: (id) => {
      drawer(false);
      void open(id);
    },
    remove: deleteSession,
  });
}

let listing: AbortController | null = null;

async function refreshSessions(): Promise<void> {
  listing?.abort();
  const abort = (listing = new AbortController());
  try {
    const [{ sessions }] = await Promise.all([client.listSessions({}), loadAgents()]);
    const isConfigured = (agent: string) => configured === null || configured.has(agent);
    items = sessions.map((s) => ({ summary: s, label: known(s), configured: isConfigured(s.agent) }));
    if (!abort.signal.aborted) drawList();
  } catch (e) {
    if (!abort.signal.aborted) showError("Listing sessions", e);
  }
}

// ListAgents is asked once per page and token: an agent that failed to
// start is started again at each call.
let agentsAsked: Promise<void> | null = null;

function loadAgents(): Promise<void> {
  agentsAsked ??= client.listAgents({}).then(
    ({ agents }) => {
      configured = new Set(agents.map((a) => a.name));
    },
    () => {
      configured = null; // unknown: mark nothing, ask again next time
      agentsAsked = null;
    },
  );
  return agentsAsked;
}

async function deleteSession(id: string): Promise<void> {
  try {
    await client.deleteSession({ sessionId: id });
  } catch (e) {
    showError("Deleting the session", e);
    throw e;
  }
  forget(id);
  if (current?.id === id) closeView();
  showStatus("Session deleted.");
  await refreshSessions();
}

// --- the open session ------------------------------------------------------

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
  const readOnly = c.view.closed || c.retired !== "";
  ui.send.disabled = c.sending || c.view.running || readOnly;
  ui.prompt.disabled = readOnly;
  ui.cancel.disabled = !c.view.running;
  ui.close.disabled = c.view.closed;
  ui.readonly.hidden = !c.retired;
  ui.readonly.textContent = c.retired
    ? `This session's agent (${c.retired}) is no longer configured on this gateway: it can be read, not prompted.`
    : "";
  document.body.dataset.lastSeq = String(c.view.lastSeq);
  document.body.dataset.running = String(c.view.running);
  const st = c.view.state;
  ui.name.textContent = st.title || st.firstPrompt;
  renderControls(ui.tools, st, sessionActions(c), readOnly);
}

function sessionActions(c: Current) {
  return {
    setMode: (modeId: string) =>
      client.setMode({ sessionId: c.id, modeId }).then(
        () => {},
        (e) => {
          showError("Switching the mode", e);
          throw e;
        },
      ),
    setOption: (configId: string, v: { valueId: string } | { boolean: boolean }) =>
      client
        .setConfigOption({
          sessionId: c.id,
          configId,
          value: "valueId" in v ? { case: "valueId", value: v.valueId } : { case: "boolean", value: v.boolean },
        })
        .then(
          () => {},
          (e) => {
            showError("Setting the option", e);
            throw e;
          },
        ),
  };
}

function waiting(c: Current): void {
  if (current !== c) return;
  const w = c.attention.first();
  ui.waiting.hidden = !w;
  ui.waitingText.textContent = w
    ? `The agent is waiting for you — ${w.what}${c.attention.size > 1 ? ` (and ${c.attention.size - 1} more)` : ""}`
    : "";
  document.body.dataset.waiting = String(c.attention.size);
  document.title = w ? "(waiting) acp-gateway console" : "acp-gateway console";
}

function closeView(): void {
  current?.abort.abort();
  current = null;
  history.replaceState(null, "", location.pathname + location.search);
  ui.session.hidden = true;
  ui.empty.hidden = false;
  ui.waiting.hidden = true;
  document.title = "acp-gateway console";
  setConn("idle", "", 0);
  drawList();
}

async function open(id: string): Promise<void> {
  if (current?.id === id) return;
  current?.abort.abort();
  history.replaceState(null, "", `#session=${encodeURIComponent(id)}`);
  const abort = new AbortController();
  const scroller = new Scroller(ui.transcript);
  const attention = new Attention(scroller);
  const view = new Transcript({
    respond: async (requestId, optionId) => {
      try {
        await client.respondPermission({ sessionId: id, requestId, optionId });
      } catch (e) {
        // The answer may have landed before the connection failed.
        if (!view.resolved.has(requestId)) showError("Answering the permission request", e);
        throw e;
      }
    },
    attention,
    before: () => scroller.before(),
  });
  const elicitations = new Elicitations(async (requestId, action, content) => {
    try {
      await client.respondElicitation({ sessionId: id, requestId, action, content });
    } catch (e) {
      showError("Answering the elicitation", e);
      throw e;
    }
  }, attention);
  const c: Current = { id, view, attention, abort, sending: false, retired: "" };
  current = c;
  attention.onChange = () => waiting(c);
  view.onChange = (ev) => {
    if (current !== c) return;
    elicitations.apply(ev);
    controls();
    const k = ev.event.case;
    if (k === "sessionInfoUpdate" || k === "turnStarted") {
      remember(id, view.state.title, view.state.firstPrompt);
      drawList();
    }
    if (k === "turnStarted" || k === "turnEnded" || k === "stateChanged" || k === "permissionRequest" || k === "permissionResolved") void refreshSessions();
  };
  ui.transcript.replaceChildren(view.el, elicitations.el);
  ui.title.textContent = id;
  ui.meta.textContent = "";
  ui.session.hidden = false;
  ui.empty.hidden = true;
  showStatus("");
  waiting(c);
  controls();
  for (const li of ui.sessions.children) {
    li.classList.toggle("selected", li.querySelector<HTMLElement>("button.open")?.dataset.sessionId === id);
  }
  client.getSession({ sessionId: id }, { signal: abort.signal }).then(
    ({ session: s }) => {
      if (!s || current !== c) return;
      ui.meta.textContent = `${s.agent} · ${s.cwd} · ${s.state.replaceAll("_", " ")}`;
      if (configured && !configured.has(s.agent)) c.retired = s.agent;
      view.seed(s);
      controls();
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
  if (!c || !text || ui.send.disabled) return;
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
        // Sending is asking to see the answer: follow it from the bottom.
        ui.transcript.scrollTop = ui.transcript.scrollHeight;
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

// --- the forms -------------------------------------------------------------

ui.token.value = token();
ui.tokenForm.addEventListener("submit", (e) => {
  e.preventDefault();
  setToken(ui.token.value.trim());
  showStatus(ui.token.value ? "Token saved for this tab." : "Token cleared.");
  agentsAsked = null;
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
    drawer(false);
    await refreshSessions();
    void open(sessionId);
    ui.prompt.focus();
  } catch (err) {
    showError("Creating the session", err);
  }
});

ui.refresh.addEventListener("click", () => void refreshSessions());
ui.filter.addEventListener("input", drawList);
ui.promptForm.addEventListener("submit", (e) => {
  e.preventDefault();
  void send();
});
// Enter sends; Shift+Enter breaks the line (and Enter while an input
// method composes a character is the composition's).
ui.prompt.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    ui.promptForm.requestSubmit();
  }
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
ui.waitingShow.addEventListener("click", () => current?.attention.show());

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

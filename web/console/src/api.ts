// The gateway's SessionService client, with the optional bearer token, and
// the console configuration served beside the page.
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { SessionService } from "@acp-gateway/client";

export type SessionClient = Client<typeof SessionService>;

const tokenKey = "acp-gateway-token";

/** The bearer token kept for this tab (sessionStorage), or "". */
export function token(): string {
  return sessionStorage.getItem(tokenKey) ?? "";
}

/** Keeps t as this tab's bearer token; "" forgets it. */
export function setToken(t: string): void {
  if (t) sessionStorage.setItem(tokenKey, t);
  else sessionStorage.removeItem(tokenKey);
}

const bearer: Interceptor = (next) => (req) => {
  const t = token();
  if (t) req.header.set("Authorization", `Bearer ${t}`);
  return next(req);
};

/** The page's own directory: the gateway serving it, also behind a path prefix. */
function base(): string {
  return new URL(".", document.baseURI).href.replace(/\/$/, "");
}

/**
 * A SessionService client for the gateway that served the page. It speaks
 * Connect's binary format: smaller than JSON on the wire (tool-call
 * snapshots repeat whole calls) and cheaper to decode.
 */
export function newClient(): SessionClient {
  return createClient(
    SessionService,
    createConnectTransport({ baseUrl: base(), interceptors: [bearer], useBinaryFormat: true }),
  );
}

export interface Config {
  agents: string[];
}

/** Fetches console/config.json: the configured agent names. */
export async function loadConfig(): Promise<Config> {
  const res = await fetch(`${base()}/console/config.json`, { cache: "no-cache" });
  if (!res.ok) throw new Error(`console/config.json: HTTP ${res.status}`);
  const cfg = (await res.json()) as Partial<Config>;
  return { agents: Array.isArray(cfg.agents) ? cfg.agents.map(String) : [] };
}

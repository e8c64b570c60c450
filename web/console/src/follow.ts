// follow keeps a Watch stream open on a session for as long as the page
// shows it. A stream that drops, errors or goes silent is reopened after a
// backoff with afterSeq = the last seq shown, so nothing is missed and, the
// Transcript ignoring seqs it has shown, nothing is shown twice.
import { Code, ConnectError } from "@connectrpc/connect";
import type { SessionClient } from "./api.js";
import type { Transcript } from "./transcript.js";

export type FollowState = "connecting" | "live" | "reconnecting" | "ended" | "failed";

export interface FollowOptions {
  client: SessionClient;
  sessionId: string;
  view: Transcript;
  /** Aborted when the page stops showing the session. */
  signal: AbortSignal;
  onState: (state: FollowState, detail: string, reconnects: number) => void;
  /** A stream with no message (the gateway sends heartbeats) for this long is reopened. */
  idleMs?: number;
}

// Codes retrying cannot fix.
const fatal = new Set([Code.Unauthenticated, Code.PermissionDenied, Code.NotFound, Code.InvalidArgument]);

export async function follow(o: FollowOptions): Promise<void> {
  const idleMs = o.idleMs ?? 45_000;
  let failures = 0;
  let reconnects = 0;
  while (!o.signal.aborted) {
    const attempt = new AbortController();
    const stop = () => attempt.abort();
    o.signal.addEventListener("abort", stop);
    let idle: ReturnType<typeof setTimeout> | undefined;
    const arm = () => {
      clearTimeout(idle);
      idle = setTimeout(() => attempt.abort(new Error("no heartbeat")), idleMs);
    };
    let detail = "the stream ended";
    try {
      o.onState(failures ? "reconnecting" : "connecting", "", reconnects);
      arm();
      const stream = o.client.watch({ sessionId: o.sessionId, afterSeq: o.view.lastSeq }, { signal: attempt.signal });
      for await (const res of stream) {
        arm();
        if (failures) {
          failures = 0;
          reconnects++;
        }
        o.onState("live", "", reconnects);
        if (res.event) o.view.apply(res.event);
      }
      // The gateway ends a Watch by itself only when the session closes.
      if (o.view.closed) {
        o.onState("ended", "session closed", reconnects);
        return;
      }
    } catch (e) {
      if (o.signal.aborted) return;
      const err = ConnectError.from(e);
      if (fatal.has(err.code)) {
        o.onState("failed", err.message, reconnects);
        return;
      }
      detail = err.message;
    } finally {
      clearTimeout(idle);
      o.signal.removeEventListener("abort", stop);
    }
    failures++;
    o.onState("reconnecting", detail, reconnects);
    await sleep(Math.min(5_000, 200 * 2 ** (failures - 1)) * (0.5 + Math.random() / 2), o.signal);
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
    function done() {
      clearTimeout(t);
      signal.removeEventListener("abort", done);
      resolve();
    }
  });
}

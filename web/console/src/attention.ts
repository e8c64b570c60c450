// Attention keeps what waits for the user: a permission request, an
// elicitation (elicitation.ts adds its forms with add and remove), anything
// the agent cannot go on without. Each is marked "waiting", brought into
// view, and counted in the page's "waiting for you" banner.
import type { Scroller } from "./scroll.js";

export interface Waiting {
  /** The element to bring into view and mark. */
  el: HTMLElement;
  /** What waits, for the banner: "Permission: Edit hello.go". */
  what: string;
}

export class Attention {
  private readonly pending = new Map<string, Waiting>();
  /** Called whenever something starts or stops waiting. */
  onChange: () => void = () => {};

  constructor(private readonly scroller: Scroller) {}

  /** add marks w as waiting for the user, under id, and brings it into view. */
  add(id: string, w: Waiting): void {
    this.pending.set(id, w);
    w.el.classList.add("waiting");
    this.scroller.reveal(w.el);
    this.onChange();
  }

  /** remove says id no longer waits (answered, cancelled, withdrawn). */
  remove(id: string): void {
    const w = this.pending.get(id);
    if (!w) return;
    this.pending.delete(id);
    w.el.classList.remove("waiting");
    this.onChange();
  }

  /** clear forgets everything (the turn ended). */
  clear(): void {
    for (const id of [...this.pending.keys()]) this.remove(id);
  }

  /** The oldest thing waiting, if any. */
  first(): Waiting | undefined {
    return this.pending.values().next().value;
  }

  get size(): number {
    return this.pending.size;
  }

  /** show brings the oldest thing waiting into view. */
  show(): void {
    const w = this.first();
    if (w) this.scroller.reveal(w.el);
  }
}

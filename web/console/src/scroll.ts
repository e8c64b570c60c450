// Scroller keeps the transcript following the turn: new content scrolls it
// to the bottom only when it was at the bottom before the content was
// rendered, so a user who scrolled up to read stays where they are. What
// needs the user (a permission request, an elicitation) is brought into
// view whatever the scroll position.
//
// Scrolling waits for the next animation frame, so that a burst of events
// (a replay after a reload) lays the page out once, not once per event.

/** How close to the bottom, in pixels, still counts as at the bottom. */
const slack = 80;

export class Scroller {
  private frame = 0;
  private follow = false;
  private readonly targets = new Set<HTMLElement>();

  constructor(private readonly box: HTMLElement) {}

  /** atBottom reports whether the view shows the end of the transcript. */
  atBottom(): boolean {
    const b = this.box;
    return b.scrollHeight - b.scrollTop - b.clientHeight < slack;
  }

  /**
   * before is called before new content is rendered: the first call of a
   * frame notes whether the view is at the bottom, before the content can
   * push the bottom away.
   */
  before(): void {
    if (this.frame) return;
    this.follow = this.atBottom();
    this.frame = requestAnimationFrame(() => this.flush());
  }

  /** reveal brings el into view once the content being rendered is laid out. */
  reveal(el: HTMLElement): void {
    this.targets.add(el);
    if (!this.frame) this.frame = requestAnimationFrame(() => this.flush());
  }

  /** toBottom scrolls to the end now, and follows from there. */
  toBottom(): void {
    this.box.scrollTop = this.box.scrollHeight;
  }

  private flush(): void {
    this.frame = 0;
    if (this.follow) this.toBottom();
    this.follow = false;
    for (const el of this.targets) if (el.isConnected) el.scrollIntoView({ block: "nearest" });
    this.targets.clear();
  }
}

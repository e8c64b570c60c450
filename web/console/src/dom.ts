// DOM building blocks shared by every module of the page. Text always goes
// in as text nodes, never as HTML.

export type Child = Node | string | null | undefined | false;

/** h creates an element with attributes (class, data-*, ...) and children. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string> = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  for (const c of children) if (c) el.append(c);
  return el;
}

/** $ returns the page's element with this id. */
export function $<T extends HTMLElement = HTMLElement>(id: string): T {
  return document.getElementById(id) as T;
}

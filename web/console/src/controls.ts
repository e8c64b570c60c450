// The session's controls above the transcript: a picker for the mode
// (SetMode) and one for each configuration option the agent offers, such
// as its model (SetConfigOption), and the usage the agent last reported.
// They are drawn from the Transcript's state: seeded from GetSession's
// snapshot, so every mode and option the agent offers shows on open, then
// following the session's events: current_mode_update,
// config_option_update, usage_update.
import { toJson } from "@bufbuild/protobuf";
import { ValueSchema, type Value } from "@bufbuild/protobuf/wkt";
import type { SessionConfigOption, UsageUpdate } from "@acp-gateway/client";
import { h } from "./dom.js";
import type { SessionState } from "./transcript.js";

export interface ControlActions {
  setMode: (modeId: string) => Promise<void>;
  setOption: (configId: string, value: { valueId: string } | { boolean: boolean }) => Promise<void>;
}

interface Choice {
  value: string;
  name: string;
  group?: string;
}

/** renderControls fills el with the pickers and usage of state. */
export function renderControls(el: HTMLElement, state: SessionState, act: ControlActions, disabled: boolean): void {
  const parts: HTMLElement[] = [];
  if (state.modes.length > 0) {
    parts.push(
      picker(
        "Mode",
        "mode",
        state.modes.map((m) => ({ value: m.id, name: m.name })),
        state.modeId,
        (v) => act.setMode(v),
        disabled,
      ),
    );
  }
  // Options by category: mode and model first, as agents mean them to be.
  const rank = (o: SessionConfigOption) => ({ mode: 0, model: 1 })[o.category ?? ""] ?? 2;
  for (const o of [...state.configOptions].sort((a, b) => rank(a) - rank(b))) {
    const current = plain(o.currentValue);
    if (o.type === "boolean") {
      const box = h("input", { type: "checkbox", "data-config-id": o.id });
      box.checked = current === true;
      box.disabled = disabled;
      box.addEventListener("change", () => {
        box.disabled = true;
        act.setOption(o.id, { boolean: box.checked }).finally(() => (box.disabled = false));
      });
      parts.push(h("label", { class: "control check" }, box, o.name || o.id));
    } else if (o.type === "select") {
      parts.push(picker(o.name || o.id, `config-${o.id}`, choices(o), String(current ?? ""), (v) => act.setOption(o.id, { valueId: v }), disabled, o.id));
    }
  }
  if (state.usage) parts.push(h("span", { class: "usage", "data-role": "usage" }, usageText(state.usage)));
  el.replaceChildren(...parts);
  el.hidden = parts.length === 0;
}

function picker(
  label: string,
  role: string,
  options: Choice[],
  current: string,
  set: (value: string) => Promise<void>,
  disabled: boolean,
  configId?: string,
): HTMLElement {
  const sel = h("select", configId ? { "data-config-id": configId } : { "data-role": role });
  const groups = new Map<string, HTMLElement>();
  for (const c of options) {
    const opt = h("option", { value: c.value }, c.name);
    if (!c.group) {
      sel.append(opt);
      continue;
    }
    let g = groups.get(c.group);
    if (!g) {
      g = h("optgroup", { label: c.group });
      groups.set(c.group, g);
      sel.append(g);
    }
    g.append(opt);
  }
  if (!options.some((c) => c.value === current) && current) sel.prepend(h("option", { value: current }, current));
  sel.value = current;
  sel.disabled = disabled;
  sel.addEventListener("change", () => {
    const v = sel.value;
    sel.disabled = true;
    set(v)
      .catch(() => (sel.value = current))
      .finally(() => (sel.disabled = false));
  });
  return h("label", { class: "control" }, h("span", {}, label), sel);
}

// choices reads a select option's values, flat or grouped (ACP
// SessionConfigSelectOptions), from the members the gateway keeps in extra.
function choices(o: SessionConfigOption): Choice[] {
  const list = o.extra?.["options"];
  const out: Choice[] = [];
  if (!Array.isArray(list)) return out;
  for (const item of list) {
    if (!item || typeof item !== "object") continue;
    const it = item as Record<string, unknown>;
    if (Array.isArray(it.options)) {
      const group = String(it.name ?? it.group ?? it.groupId ?? "");
      for (const sub of it.options) {
        const s = sub as Record<string, unknown>;
        if (s && typeof s.value === "string") out.push({ value: s.value, name: String(s.name ?? s.value), group });
      }
    } else if (typeof it.value === "string") {
      out.push({ value: it.value, name: String(it.name ?? it.value) });
    }
  }
  return out;
}

function plain(v: Value | undefined): unknown {
  return v ? toJson(ValueSchema, v) : undefined;
}

/** usageText says how full the context is and what the session cost. */
export function usageText(u: UsageUpdate): string {
  const n = (x: bigint) => Number(x).toLocaleString("en");
  const parts: string[] = [];
  if (u.used !== undefined && u.size !== undefined && u.size > 0n) {
    parts.push(`context ${n(u.used)} / ${n(u.size)} tokens (${Math.round((Number(u.used) / Number(u.size)) * 100)}%)`);
  } else if (u.used !== undefined) {
    parts.push(`context ${n(u.used)} tokens`);
  }
  if (u.inputTokens !== undefined || u.outputTokens !== undefined) {
    parts.push(`${n(u.inputTokens ?? 0n)} in / ${n(u.outputTokens ?? 0n)} out`);
  }
  if (u.cost) parts.push(`${u.cost.amount.toFixed(2)} ${u.cost.currency}`);
  return parts.join(" · ") || "usage reported";
}

// Building the page: elements, times, badges, values, and updates that keep the
// person's place. No state of its own.

export const $ = (sel) => document.querySelector(sel);
export const enc = encodeURIComponent;

export function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const kid of kids.flat()) {
    if (kid === null || kid === undefined || kid === false) continue;
    el.append(kid instanceof Node ? kid : String(kid));
  }
  return el;
}

export function sleep(ms, signal) {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => { clearTimeout(t); resolve(); }, { once: true });
  });
}

export function when(iso) {
  if (!iso) return null;
  const d = new Date(iso);
  const s = Math.max(0, (Date.now() - d.getTime()) / 1000);
  const ago = s < 60 ? "just now" : s < 3600 ? `${Math.floor(s / 60)} min ago`
    : s < 86400 ? `${Math.floor(s / 3600)} h ago` : `${Math.floor(s / 86400)} days ago`;
  return h("time", { datetime: iso, title: d.toLocaleString() }, ago);
}

// Replace `el`'s children, keeping the focus and the open <details> (by `data-key`),
// so that a live update never takes them from under the person's keyboard.
export function replaceKeeping(el, kids) {
  const active = document.activeElement;
  const focused = active && el.contains(active) ? active.dataset.key : null;
  const open = new Set([...el.querySelectorAll("details[open]")].map((d) => d.dataset.key));
  el.replaceChildren(...kids);
  for (const d of el.querySelectorAll("details[data-key]")) d.open = open.has(d.dataset.key);
  if (focused) {
    const again = [...el.querySelectorAll("[data-key]")].find((x) => x.dataset.key === focused);
    if (again) again.focus();
  }
}

export function disclosure(key, title, ...kids) {
  return h("details", { "data-key": key }, h("summary", { "data-key": `${key}/s` }, title),
           ...kids);
}

export function badge(status, prefix = "st") {
  const name = String(status ?? "unknown");
  return h("span", { class: `badge ${prefix}-${name}` }, name.replace("_", " "));
}

export function brief(value, limit = 4000) {
  const text = typeof value === "string" ? value : JSON.stringify(value, null, 2);
  return text.length > limit ? `${text.slice(0, limit)}\n… (${text.length - limit} more)` : text;
}

// A value as one line of code when it is short, else as a block.
export function shown(value) {
  let text = typeof value === "string" ? value : JSON.stringify(value);
  if (typeof value === "string") {
    try { text = JSON.stringify(JSON.parse(value)); } catch { /* plain text */ }
  }
  return text.length <= 100 && !text.includes("\n") ? h("code", { class: "value" }, text)
    : h("pre", {}, brief(value));
}

// -- the page's frame: its title, the live status, errors -----------------------------

export function setLive(text) { $("#live").textContent = text; }

export function page(title, ...kids) {
  const main = $("#main");
  main.replaceChildren(h("h1", { tabindex: "-1" }, title), ...kids);
  document.title = `${title} · hitlflow inbox`;
  main.querySelector("h1").focus();
}

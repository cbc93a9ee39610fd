// The hitlflow inbox: the sessions that wait for a person, and a page per session
// where the person answers. Plain JavaScript on the HTTP API; no build, no library.
//
//   #/                 the list (?status=... filters; the default is waiting_user)
//   #/s/<session id>   one session: what it waits for, the conversation, the contracts
//
// Data: GET /api/sessions (the read model), GET /api/sessions/{id},
// GET /api/execution/{id}/timeline, the session's NDJSON log (read by byte ranges:
// the conversation with each tool call's safety class) and its SSE stream for live
// updates. The stream is read with fetch(), not EventSource, so that it carries the
// bearer token in a header like every other call (EventSource cannot send headers;
// a token in a URL ends up in logs); it reconnects with Last-Event-ID.
"use strict";

const TOKEN_KEY = "hitlflow.api_token";
const LIST_EVERY_MS = 2000;       // the list is re-read this often while shown
const LIST_PAGES = 4;             // at most this many pages of 500 are read
const LOG_TAIL_BYTES = 512 * 1024; // a session page starts with the log's last bytes
const SILENT_MS = 60_000;          // a stream with no byte (not even a keep-alive) this long
                                   // is reconnected (the API sends one every 15 s)
const TERMINAL = new Set(["succeeded", "failed", "canceled"]);
const STATUSES = ["waiting_user", "running", "queued", "succeeded", "failed", "canceled"];
const SAFETY = {
  read_only: ["read-only", "reads only: runs freely"],
  reversible: ["reversible", "changes something that can be undone: runs freely"],
  at_most_once: ["at most once", "changes something: runs without asking, never twice"],
  irreversible: ["irreversible", "cannot be undone: runs only once a person approves it"],
};

// -- small helpers ------------------------------------------------------------------

function h(tag, attrs, ...kids) {
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

const $ = (sel) => document.querySelector(sel);
const enc = encodeURIComponent;

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => { clearTimeout(t); resolve(); }, { once: true });
  });
}

function when(iso) {
  if (!iso) return null;
  const d = new Date(iso);
  const s = Math.max(0, (Date.now() - d.getTime()) / 1000);
  const ago = s < 60 ? "just now" : s < 3600 ? `${Math.floor(s / 60)} min ago`
    : s < 86400 ? `${Math.floor(s / 3600)} h ago` : `${Math.floor(s / 86400)} days ago`;
  return h("time", { datetime: iso, title: d.toLocaleString() }, ago);
}

// Replace `el`'s children, keeping the focus and the open <details> (by `data-key`),
// so that a live update never takes them from under the person's keyboard.
function replaceKeeping(el, kids) {
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

function disclosure(key, title, ...kids) {
  return h("details", { "data-key": key }, h("summary", { "data-key": `${key}/s` }, title),
           ...kids);
}

function badge(status, prefix = "st") {
  const name = String(status ?? "unknown");
  return h("span", { class: `badge ${prefix}-${name}` }, name.replace("_", " "));
}

function brief(value, limit = 4000) {
  const text = typeof value === "string" ? value : JSON.stringify(value, null, 2);
  return text.length > limit ? `${text.slice(0, limit)}\n… (${text.length - limit} more)` : text;
}

// A value as one line of code when it is short, else as a block.
function shown(value) {
  let text = typeof value === "string" ? value : JSON.stringify(value);
  if (typeof value === "string") {
    try { text = JSON.stringify(JSON.parse(value)); } catch { /* plain text */ }
  }
  return text.length <= 100 && !text.includes("\n") ? h("code", { class: "value" }, text)
    : h("pre", {}, brief(value));
}

// -- the API ------------------------------------------------------------------------

class Unauthorized extends Error {}

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

async function api(path, { method = "GET", body, headers = {}, signal } = {}) {
  const all = { ...headers };
  if (token()) all.Authorization = `Bearer ${token()}`;
  if (body !== undefined) all["Content-Type"] = "application/json";
  const r = await fetch(path, {
    method, headers: all, signal, cache: "no-store",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (r.status === 401) {
    const why = await messageOf(r);
    if (!(signal && signal.aborted)) showLogin(why); // once: the login aborts the rest
    throw new Unauthorized();
  }
  return r;
}

async function messageOf(r) {
  try {
    const body = await r.json();
    return body.error ? body.error.message : JSON.stringify(body);
  } catch {
    return `HTTP ${r.status}`;
  }
}

async function getJson(path, signal) {
  const r = await api(path, { signal });
  if (!r.ok) throw new Error(await messageOf(r));
  return r.json();
}

// -- routing ------------------------------------------------------------------------

let view = null; // { ctl: AbortController } of the page shown

function setLive(text) { $("#live").textContent = text; }

function route() {
  if (view) view.ctl.abort();
  view = { ctl: new AbortController() };
  $("#signout").hidden = !token();
  setLive("");
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, query] = hash.split("?");
  const m = /^\/s\/([^/]+)$/.exec(path);
  if (m) showSession(decodeURIComponent(m[1]), view.ctl.signal);
  else showList(new URLSearchParams(query || ""), view.ctl.signal);
}

function page(title, ...kids) {
  const main = $("#main");
  main.replaceChildren(h("h1", { tabindex: "-1" }, title), ...kids);
  document.title = `${title} · hitlflow inbox`;
  main.querySelector("h1").focus();
}

function failed(err) {
  if (err instanceof Unauthorized || (err && err.name === "AbortError")) return;
  setLive(`error: ${err.message || err}`);
}

// -- sign in (only when the API asks for a token) -------------------------------------

function showLogin(why) {
  if (view) view.ctl.abort();
  const input = h("input", { id: "token", type: "password", autocomplete: "off",
                             required: true, "aria-describedby": "token-help" });
  const form = h("form", { onsubmit: (e) => {
    e.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    route();
  } },
  h("p", { class: "notice", role: "alert" }, why || "This API needs a bearer token."),
  h("label", { for: "token" }, "API token"), input,
  h("p", { id: "token-help", class: "meta" },
    "The value of HITLFLOW_API_TOKEN. It is kept in this browser tab only ",
    "(session storage) and sent as a bearer token."),
  h("div", { class: "actions" }, h("button", { class: "primary", type: "submit" }, "Sign in")));
  page("Sign in", form);
  input.focus();
}

// -- the list -----------------------------------------------------------------------

async function listed(status, signal) {
  const out = [];
  let tokenParam = null;
  for (let i = 0; i < LIST_PAGES; i++) {
    const q = new URLSearchParams({ limit: "500" });
    if (status) q.set("status", status);
    if (tokenParam) q.set("page_token", tokenParam);
    const body = await getJson(`api/sessions?${q}`, signal);
    out.push(...body.sessions);
    tokenParam = body.next_page_token;
    if (!tokenParam) return { sessions: out, more: false };
  }
  return { sessions: out, more: true };
}

function oldestFirst(a, b) {
  const ka = a.waiting_since || a.started_at || "";
  const kb = b.waiting_since || b.started_at || "";
  return ka < kb ? -1 : ka > kb ? 1 : a.session_id.localeCompare(b.session_id);
}

function waitsFor(p) {
  if (!p) return null;
  const what = { approval: "approval", confirm: "a yes or no", choose: "a choice",
                 form: "a form", message: "a message", step: "a plan step decision",
                 window: "a decision on a running step" }[p.kind] || p.kind;
  return h("div", {}, h("span", { class: "badge st-waiting_user" }, `waits for ${what}`), " ",
           h("span", { class: "text" }, p.prompt));
}

function showList(query, signal) {
  const status = query.has("status") ? query.get("status") : "waiting_user";
  const select = h("select", { id: "status-filter", onchange: () => {
    location.hash = select.value === "waiting_user" ? "#/" : `#/?status=${enc(select.value)}`;
  } }, ...STATUSES.map((s) => h("option", { value: s, selected: s === status },
                                s === "waiting_user" ? "waiting for a person" : s.replace("_", " "))),
  h("option", { value: "", selected: status === "" }, "all sessions"));
  const list = h("ul", { class: "cards", id: "sessions" });
  const count = h("p", { class: "meta", id: "count", "aria-live": "polite" }, "Loading…");
  let shown = null;
  page(status === "waiting_user" ? "Waiting for you" : "Sessions",
       h("div", { class: "toolbar" },
         h("div", {}, h("label", { for: "status-filter" }, "Show"), select)),
       count, list);

  const render = ({ sessions, more }) => {
    sessions.sort(oldestFirst);
    const now = JSON.stringify([sessions, more]);
    if (now === shown) return false; // re-rendered only when something changed
    shown = now;
    count.textContent = sessions.length === 0
      ? (status === "waiting_user" ? "Nothing waits for you." : "No sessions.")
      : `${sessions.length}${more ? "+" : ""} session${sessions.length === 1 ? "" : "s"}, `
        + "oldest first.";
    replaceKeeping(list, sessions.map((s) => h("li", { "data-session": s.session_id },
      h("a", { href: `#/s/${enc(s.session_id)}`, "data-key": s.session_id }, s.session_id), " ",
      badge(s.status),
      waitsFor(s.pending),
      h("div", { class: "meta" },
        s.waiting_since ? ["waiting since ", when(s.waiting_since)]
          : ["started ", when(s.started_at)]))));
    return true;
  };
  (async () => {
    while (!signal.aborted) {
      try {
        if (render(await listed(status, signal))) {
          setLive(`updated ${new Date().toLocaleTimeString()}`);
        }
      } catch (err) {
        if (err instanceof Unauthorized) return;
        failed(err);
      }
      await sleep(LIST_EVERY_MS, signal);
    }
  })();
}

// -- one session --------------------------------------------------------------------

function showSession(sid, signal) {
  const s = {
    sid, signal, session: null, timeline: null, title: null,
    entries: new Map(), lastSeq: null, logOffset: null, logCut: false, typing: "",
    formFor: undefined, notice: null, focusNext: false,
    busy: false, again: false, pendingParams: {}, ended: false,
  };
  const base = `api/sessions/${enc(sid)}`;
  const head = h("div", { id: "head", class: "meta" });
  const pending = h("section", { id: "pending", "aria-labelledby": "pending-title" });
  const conv = h("ol", { class: "conv", id: "conversation" });
  const contracts = h("ol", { class: "cards", id: "contracts" });
  page(`Session ${sid}`,
       h("p", {}, h("a", { href: "#/" }, "← Inbox")), head, pending,
       h("section", { "aria-labelledby": "conv-title" },
         h("h2", { id: "conv-title" }, "Conversation"), conv),
       h("section", { "aria-labelledby": "contracts-title" },
         h("h2", { id: "contracts-title" }, "Contracts"), contracts));
  s.els = { head, pending, conv, contracts };

  (async () => {
    try {
      await refresh(s, {});
      follow(s, base);
    } catch (err) {
      if (err instanceof Unauthorized || signal.aborted) return;
      head.replaceChildren(h("p", { class: "notice", role: "alert" }, err.message || err));
    }
  })();
}

// The session, its contracts and the log's new lines; `params` (min_seq,
// min_journal_seq) make the reads wait for the read model to reach what we saw.
async function refresh(s, params) {
  const q = new URLSearchParams({ limit: "1", ...params });
  const t = new URLSearchParams({ limit: "500", ...params });
  const base = `api/sessions/${enc(s.sid)}`;
  const [session, timeline] = await Promise.all([
    getJson(`${base}?${q}`, s.signal),
    api(`api/execution/${enc(s.sid)}/timeline?${t}`, { signal: s.signal })
      .then(async (r) => (r.ok ? r.json() : null)), // 404: no contract yet
  ]);
  s.session = session;
  s.timeline = timeline;
  if (TERMINAL.has(session.status)) s.ended = true;
  await readLog(s);
  render(s);
}

// Coalesced: one refresh at a time, the last one asked for wins.
function scheduleRefresh(s, params) {
  s.pendingParams = params;
  if (s.busy) { s.again = true; return; }
  s.busy = true;
  (async () => {
    try {
      do {
        s.again = false;
        await refresh(s, s.pendingParams);
      } while (s.again && !s.signal.aborted);
    } catch (err) {
      failed(err);
    } finally {
      s.busy = false;
    }
  })();
}

// The log's lines after what we have (the first read takes its last bytes only).
async function readLog(s) {
  const range = s.logOffset === null ? `bytes=-${LOG_TAIL_BYTES}` : `bytes=${s.logOffset}-`;
  const r = await api(`api/sessions/${enc(s.sid)}/log`, { headers: { Range: range },
                                                          signal: s.signal });
  if (r.status === 404 || r.status === 416) return; // not exported yet / nothing new
  if (!r.ok) throw new Error(await messageOf(r));
  const bytes = new Uint8Array(await r.arrayBuffer());
  const m = /bytes (\d+)-\d+\/\d+/.exec(r.headers.get("Content-Range") || "");
  const start = r.status === 206 && m ? Number(m[1]) : 0;
  let from = 0;
  if (s.logOffset === null && start > 0) { // a tail: its first line is cut
    from = bytes.indexOf(10) + 1;
    s.logCut = true;
  }
  const end = bytes.lastIndexOf(10) + 1; // whole lines only; the rest comes next time
  if (end > from) {
    for (const line of new TextDecoder().decode(bytes.subarray(from, end)).split("\n")) {
      if (!line) continue;
      const e = JSON.parse(line);
      add(s, e.seq, e.type, e.payload);
    }
  }
  s.logOffset = start + Math.max(end, from);
}

function add(s, seq, type, payload) {
  s.entries.set(seq, { seq, type, payload });
  if (type === "RUN_CREATED" && payload.config && payload.config.title) {
    s.title = payload.config.title; // the config's title, when the log starts in view
  }
  if (s.lastSeq === null || seq > s.lastSeq) s.lastSeq = seq;
}

// The live stream: every event is shown at once, and the state behind it re-read.
async function follow(s, base) {
  let retryMs = 2000;
  while (!s.signal.aborted && !s.ended) {
    // A connection that stays silent past a few keep-alives is dead: drop it.
    const conn = new AbortController();
    const stop = () => conn.abort();
    s.signal.addEventListener("abort", stop);
    let quiet = setTimeout(stop, SILENT_MS);
    try {
      const headers = { Accept: "text/event-stream" };
      if (s.lastSeq !== null) headers["Last-Event-ID"] = String(s.lastSeq);
      const r = await api(`${base}/events`, { headers, signal: conn.signal });
      if (!r.ok) throw new Error(await messageOf(r));
      setLive("live");
      const body = r.body.pipeThrough(new TextDecoderStream());
      const reader = body.getReader();
      let buf = "";
      let ev = { event: "message", data: [], id: null };
      for (;;) {
        const { value, done } = await reader.read();
        clearTimeout(quiet);
        if (done) break;
        quiet = setTimeout(stop, SILENT_MS);
        buf += value;
        let nl;
        while ((nl = buf.indexOf("\n")) >= 0) {
          const line = buf.slice(0, nl).replace(/\r$/, "");
          buf = buf.slice(nl + 1);
          if (line === "") {
            if (ev.data.length) onEvent(s, ev.event, ev.id, ev.data.join("\n"));
            ev = { event: "message", data: [], id: null };
          } else if (!line.startsWith(":")) {
            const i = line.indexOf(":");
            const field = i < 0 ? line : line.slice(0, i);
            const val = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
            if (field === "event") ev.event = val;
            else if (field === "data") ev.data.push(val);
            else if (field === "id") ev.id = val;
            else if (field === "retry" && /^\d+$/.test(val)) retryMs = Number(val);
          }
        }
      }
      // The stream ends after the session ends: read it once more to know.
      await refresh(s, s.lastSeq === null ? {} : { min_seq: String(s.lastSeq) });
    } catch (err) {
      if (s.signal.aborted || err instanceof Unauthorized) return;
      setLive(`reconnecting: ${err.message || err}`);
    } finally {
      clearTimeout(quiet);
      s.signal.removeEventListener("abort", stop);
    }
    if (s.ended) break;
    await sleep(retryMs, s.signal);
  }
  if (s.ended) setLive(`ended: ${s.session ? s.session.status : ""}`);
}

function onEvent(s, type, id, data) {
  let payload;
  try { payload = JSON.parse(data); } catch { return; }
  if (type === "text.delta") { // streamed text: shown until its `text` arrives
    s.typing += payload.delta || payload.text || "";
    renderConversation(s);
    return;
  }
  // `ecs` repeats `interaction.requested` (seed 000's old name); `error` ends a stream.
  if (id === null || !/^\d+$/.test(id) || type === "ecs" || type === "error") return;
  const seq = Number(id);
  if (type === "text") s.typing = "";
  add(s, seq, type, payload);
  if (type === "conversation.state.changed" && TERMINAL.has(payload.to)) s.ended = true;
  renderConversation(s);
  scheduleRefresh(s, { min_seq: String(seq) });
}

// -- rendering a session ------------------------------------------------------------

function render(s) {
  const v = s.session;
  const plural = (n, one, many) => `${n} ${n === 1 ? one : many}`;
  s.els.head.replaceChildren(s.title ? h("p", { class: "prompt" }, s.title) : "",
    h("span", {},
    "Status ", badge(v.status), v.mode ? ` · ${v.mode}` : "",
    v.waiting_since && v.status === "waiting_user" ? [" · waiting since ", when(v.waiting_since)]
      : "",
    ` · ${plural(v.turns, "turn", "turns")}, ${plural(v.replies, "reply", "replies")}`),
    v.failure_reason ? h("p", { class: "notice" }, `Failed: ${v.failure_reason}`) : "",
    v.stale ? h("p", { class: "meta" }, "(the read model has not caught up yet)") : "");
  renderPending(s);
  renderConversation(s);
  renderContracts(s);
}

function renderPending(s) {
  const p = s.session.pending;
  const key = p ? `request ${p.request_id}` : `status ${s.session.status}`;
  if (key === s.formFor) {
    renderNotice(s);
    return; // the same request: keep what the person is typing
  }
  s.formFor = key;
  if (s.notice && s.notice.ok) s.notice = null; // "sent" is said; a refusal stays
  // A keyboard in the old form moves on to the new one's heading, not to the page's top.
  const hadFocus = s.els.pending.contains(document.activeElement);
  const title = h("h2", { id: "pending-title", tabindex: "-1" },
                  p ? "Waiting for you" : "Nothing waits for you");
  const notice = h("div", { id: "notice" });
  if (!p) {
    s.els.pending.className = "";
    const status = s.session.status || "unknown";
    s.els.pending.replaceChildren(title, notice, h("p", { class: "meta" },
      TERMINAL.has(status) ? `The session has ended: it ${status}.`
        : `The session is ${status.replace("_", " ")}; this page follows it live.`));
  } else {
    s.els.pending.className = "pending";
    s.els.pending.replaceChildren(title, notice, formFor(s, p));
  }
  renderNotice(s);
  if (hadFocus || s.focusNext) {
    s.focusNext = false;
    title.focus();
  }
}

function renderNotice(s) {
  const el = s.els.pending.querySelector("#notice");
  if (!el) return;
  if (!s.notice) { el.replaceChildren(); return; }
  el.replaceChildren(s.notice.ok
    ? h("p", { class: "sent", role: "status" }, s.notice.text)
    : h("p", { class: "notice", role: "alert" }, s.notice.text));
}

// The form that fits the request's kind; every answer goes to the reply endpoint
// (a message or an end to theirs), so a stale form gets the API's 409 in place.
function formFor(s, p) {
  const comment = h("textarea", { id: "comment", name: "comment", maxlength: "10000" });
  const commentField = [h("label", { for: "comment" }, "Comment (optional)"), comment];
  const prompt = h("p", { class: "prompt", id: "prompt" }, p.prompt);
  const form = h("form", { "aria-labelledby": "pending-title", "aria-describedby": "prompt" });
  const send = (path, body) => submit(s, form, path, body);
  const reply = (extra) => send("reply", {
    request_id: p.request_id, ...extra, ...(comment.value.trim() ? { comment: comment.value } : {}),
  });
  const button = (label, cls, onclick) => h("button", { type: "button", class: cls, onclick },
                                             label);
  let body;
  if (p.kind === "approval" || p.kind === "confirm") {
    const [yes, no] = p.kind === "approval" ? ["Approve", "Reject"] : ["Yes", "No"];
    body = [commentField, h("div", { class: "actions" },
      button(yes, "primary", () => reply({ approve: true })),
      button(no, "danger", () => reply({ approve: false })))];
  } else if (p.kind === "choose") {
    const radios = p.options.map((o, i) => h("label", { class: "inline" },
      h("input", { type: "radio", name: "choice", value: o, required: true, id: `choice-${i}` }),
      o));
    body = [h("fieldset", {}, h("legend", {}, "Choose one"), ...radios), commentField,
            h("div", { class: "actions" }, h("button", { class: "primary", type: "submit" },
                                             "Send"))];
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      const picked = form.querySelector("input[name=choice]:checked");
      if (picked) reply({ choice: picked.value });
    });
  } else if (p.kind === "form") {
    const inputs = p.fields.map((f, i) => {
      const id = `field-${i}`;
      const attrs = { id, name: f.name, required: f.required && f.type !== "boolean" };
      const input = f.type === "boolean" ? h("input", { ...attrs, type: "checkbox" })
        : h("input", { ...attrs, type: f.type === "number" ? "number" : "text",
                       step: f.type === "number" ? "any" : null });
      return { f, input, el: h("div", { class: "field" }, f.type === "boolean"
        ? h("label", { class: "inline", for: id }, input, f.label || f.name)
        : [h("label", { for: id }, f.label || f.name, f.required ? "" : " (optional)"), input]) };
    });
    body = [...inputs.map((x) => x.el), commentField,
            h("div", { class: "actions" }, h("button", { class: "primary", type: "submit" },
                                             "Send"))];
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      const values = {};
      for (const { f, input } of inputs) {
        if (f.type === "boolean") values[f.name] = input.checked;
        else if (input.value !== "") values[f.name] = f.type === "number" ? Number(input.value)
          : input.value;
      }
      reply({ values });
    });
  } else if (p.kind === "step" || p.kind === "window") {
    const to = h("input", { id: "to-step", type: "number", min: "0", step: "1" });
    const labels = { approve: "Approve step", skip: "Skip step", reset: "Reset to step",
                     reset_task: "Start the plan over" };
    body = [p.options.includes("reset")
      ? [h("label", { for: "to-step" }, "Step to reset to (for Reset)"), to] : "",
    commentField, h("div", { class: "actions" }, ...p.options.map((o) => button(
      labels[o] || o, o === "approve" ? "primary" : "", () => reply(o === "reset"
        ? { choice: o, values: to.value === "" ? {} : { to_step: Number(to.value) } }
        : { choice: o }))))];
  } else if (p.kind === "message") {
    const text = h("textarea", { id: "message", required: true, maxlength: "100000" });
    body = [h("label", { for: "message" }, "Your message"), text,
            h("div", { class: "actions" },
              h("button", { class: "primary", type: "submit" }, "Send"),
              button("End the conversation", "", () => send("end", {})))];
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      if (text.value.trim()) send("messages", { text: text.value });
    });
  } else {
    body = [h("p", {}, `This page does not know requests of kind ${p.kind}; `,
              "answer it through the API.")];
  }
  if (p.kind !== "choose" && p.kind !== "form" && p.kind !== "message") {
    form.addEventListener("submit", (e) => e.preventDefault());
  }
  form.append(prompt, ...body.flat(2));
  return form;
}

async function submit(s, form, path, body) {
  const buttons = [...form.querySelectorAll("button")];
  const was = document.activeElement;
  s.focusNext = true; // a disabled button loses the focus: the next form gets it
  buttons.forEach((b) => { b.disabled = true; });
  s.notice = null;
  renderNotice(s);
  try {
    const r = await api(`api/sessions/${enc(s.sid)}/${path}`, { method: "POST", body,
                                                                signal: s.signal });
    if (r.ok) {
      const ack = await r.json();
      s.notice = { ok: true, text: "Sent. The session goes on; this page follows it." };
      renderNotice(s);
      scheduleRefresh(s, ack.journal_seq ? { min_journal_seq: String(ack.journal_seq) } : {});
      return;
    }
    // Refused (409: the request was answered or expired meanwhile, or the answer does
    // not fit): the API's words, in place; then the session as it is now.
    s.notice = { ok: false, text: `Not sent: ${await messageOf(r)}` };
    renderNotice(s);
    again(buttons, was);
    scheduleRefresh(s, {});
  } catch (err) {
    if (err instanceof Unauthorized) return;
    s.notice = { ok: false, text: `Not sent: ${err.message || err}` };
    renderNotice(s);
    again(buttons, was);
  }

  function again(all, focused) { // the form stays: back to where the person was
    all.forEach((b) => { b.disabled = false; });
    s.focusNext = false;
    if (focused && form.contains(focused)) focused.focus();
  }
}

function renderConversation(s) {
  const items = [...s.entries.values()].sort((a, b) => a.seq - b.seq)
    .map((e) => entry(e.type, e.payload, e.seq)).filter(Boolean);
  if (s.logCut) {
    items.unshift(h("li", { class: "meta" }, "Earlier entries are not shown. ",
      h("button", { type: "button", "data-key": "full-log", onclick: () => download(s) },
        "Download the full log")));
  }
  if (s.typing) items.push(h("li", { class: "who-agent typing", "aria-live": "off" },
                             h("span", { class: "who" }, "Agent"), s.typing));
  replaceKeeping(s.els.conv, items);
}

// The whole NDJSON log, fetched with the token (a plain link could not send it).
async function download(s) {
  try {
    const r = await api(`api/sessions/${enc(s.sid)}/log`, { signal: s.signal });
    if (!r.ok) throw new Error(await messageOf(r));
    const a = h("a", { href: URL.createObjectURL(await r.blob()),
                       download: `${s.sid}.events.ndjson` });
    a.click();
    setTimeout(() => URL.revokeObjectURL(a.href), 60_000);
  } catch (err) {
    failed(err);
  }
}

function line(who, cls, seq, ...kids) {
  return h("li", { class: `who-${cls}`, "data-seq": seq },
           h("span", { class: "who" }, who), " ", ...kids);
}

function answerText(a) {
  if (!a) return "";
  const parts = [];
  if ("approved" in a) parts.push(a.approved ? "approved" : "rejected");
  if ("choice" in a) parts.push(`chose ${a.choice}`);
  if (a.values && Object.keys(a.values).length) parts.push(JSON.stringify(a.values));
  if (a.declined) parts.push("declined");
  if (a.comment) parts.push(`“${a.comment}”`);
  return parts.join(" · ");
}

function entry(type, p, seq) {
  switch (type) {
    case "message":
      return line("Person", "person", seq, h("span", { class: "text" }, p.text));
    case "text":
      return p.text ? line("Agent", "agent", seq, h("span", { class: "text" }, p.text)) : null;
    case "WORK_ITEM_QUEUED": {
      const d = p.action_detail || {};
      if (p.action_type === "tool_call") {
        const [label, why] = SAFETY[d.safety] || [d.safety || "unknown class", ""];
        return line("Tool call", "tool", seq,
          h("code", {}, `${d.server ? `${d.server}.` : ""}${d.tool}`), " ",
          h("span", { class: `badge sf-${d.safety}`, title: why }, label), " ",
          shown(d.arguments || {}));
      }
      if (p.action_type === "plan_step") {
        return line(`Step ${d.step}`, "tool", seq, h("span", { class: "text" }, d.name || ""),
          d.gate ? [" ", h("span", { class: "badge sf-irreversible" }, "gate")] : "",
          d.run ? [" ", shown(d.run)] : "");
      }
      return null; // a request to the person shows as interaction.requested
    }
    case "tool_result":
      return line(p.is_error ? "Tool error" : "Result", p.is_error ? "error" : "tool", seq,
        h("code", {}, p.tool || ""), p.error_message ? ` ${p.error_message}` : "", " ",
        p.text ? shown(p.text) : "");
    case "interaction.requested": // a wait for a message repeats the agent's text
      return p.kind === "message" ? null
        : line(`Asks (${p.kind})`, "ask", seq, h("span", { class: "text" }, p.prompt));
    case "interaction.reply.accepted":
      return line(`Answered by ${p.by || "someone"}`, "person", seq, answerText(p.answer));
    case "StepCompleted": // what a person who verifies the step needs to see
      return line(`Step ${p.step} ran`, p.exit_code === 0 ? "tool" : "error", seq,
        `exit code ${p.exit_code}`, p.stdout ? h("pre", {}, brief(p.stdout)) : "",
        p.stderr ? h("pre", { class: "sf-error" }, brief(p.stderr)) : "");
    case "GATE_RUN_FINISHED":
      return line(`Step ${p.step} check`, p.passed ? "tool" : "error", seq,
        p.passed ? "passed" : "failed", p.command ? [" ", h("code", {}, p.command)] : "",
        p.output_excerpt ? h("pre", {}, brief(p.output_excerpt)) : "");
    case "StepApproved": case "StepSkipped": case "StepReset": case "TaskReset":
    case "WindowLost": case "TaskStopped":
      return line("Plan", "end", seq, `${type}`, p.step !== undefined && p.step !== null
        ? ` (step ${p.step}${p.to_step !== undefined ? ` → ${p.to_step}` : ""})` : "",
      p.by ? ` by ${p.by}` : "", p.reason ? ` · ${p.reason}` : "",
      p.feedback ? h("pre", {}, brief(p.feedback)) : "");
    case "conversation.state.changed":
      return TERMINAL.has(p.to)
        ? line("Session", "end", seq, "ended: ", badge(p.to)) : null;
    default:
      if (type.startsWith("interaction.")) {
        return line(type.slice("interaction.".length).replaceAll(".", " "), "ask", seq,
                    h("pre", {}, brief(p, 600)));
      }
      return null;
  }
}

function renderContracts(s) {
  const t = s.timeline;
  if (!t || !t.contracts.length) {
    s.els.contracts.replaceChildren(h("li", { class: "meta" }, "No contract yet."));
    return;
  }
  const moves = new Map();
  for (const tr of t.transitions || []) {
    if (!moves.has(tr.execution_id)) moves.set(tr.execution_id, []);
    moves.get(tr.execution_id).push(tr);
  }
  const items = t.contracts.map((c) => h("li", { "data-contract": c.execution_id },
    badge(c.current_status), " ", h("span", { class: "text" }, c.action_summary),
    c.irreversible ? [" ", h("span", { class: "badge sf-irreversible" }, "irreversible")] : "",
    h("div", { class: "meta" }, `${c.action_type} · ${c.last_trigger || "created"} by `
      + `${c.last_actor || "?"} · `, when(c.entered_state_at)),
    c.error_message ? h("p", { class: "notice" }, c.error_message) : "",
    c.result !== null && c.result !== undefined
      ? disclosure(`${c.execution_id}/result`, "Result", h("pre", {}, brief(c.result))) : "",
    moves.has(c.execution_id) ? disclosure(`${c.execution_id}/moves`, "Transitions",
      h("ol", {}, ...moves.get(c.execution_id).map((tr) => h("li", {},
        `${tr.from_status} → ${tr.to_status} (${tr.trigger}, ${tr.actor}) `,
        when(tr.timestamp))))) : ""));
  if (t.total_contracts > t.contracts.length) {
    items.push(h("li", { class: "meta" },
                 `${t.total_contracts - t.contracts.length} more in the timeline API.`));
  }
  replaceKeeping(s.els.contracts, items);
}

// -- start --------------------------------------------------------------------------

window.addEventListener("hashchange", route);
document.addEventListener("DOMContentLoaded", () => {
  $("#signout").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    route();
  });
  route();
});

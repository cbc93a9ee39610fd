// One session (#/s/<id>): its head, what it waits for (forms.js), the conversation
// (conversation.js) and the contracts (contracts.js), kept live by its stream.
//
// The page's state `s`: the session and timeline as last read, the log's entries by
// seq, how far the log and the stream have been read, the pending form's state, and
// s.reread(params): a coalesced refresh (forms.js calls it after an answer).
import { badge, enc, h, page, setLive, when } from "./dom.js";
import { TERMINAL, Unauthorized, api, failed, getJson } from "./api.js";
import { follow } from "./stream.js";
import { add, readLog, renderConversation } from "./conversation.js";
import { renderPending } from "./forms.js";
import { renderContracts } from "./contracts.js";

export function showSession(sid, signal) {
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
  s.reread = (params) => scheduleRefresh(s, params);

  (async () => {
    try {
      await refresh(s, {});
      follow(`${base}/events`, {
        signal,
        lastId: () => s.lastSeq,
        ended: () => s.ended,
        onEvent: (type, id, data) => onEvent(s, type, id, data),
        caughtUp: () => refresh(s, s.lastSeq === null ? {} : { min_seq: String(s.lastSeq) }),
        closed: () => { if (s.ended) setLive(`ended: ${s.session ? s.session.status : ""}`); },
      });
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
  // Behind what we saw (the read model did not catch up within the API's wait): read
  // again, or a page whose last event has come shows the state before it for good.
  const waited = params.min_seq !== undefined || params.min_journal_seq !== undefined;
  if (s.signal.aborted) return;
  if (session.stale && waited) {
    setTimeout(() => { if (!s.signal.aborted) scheduleRefresh(s, params); }, 500);
  } else if (s.lastSeq !== null && (session.seq || 0) < s.lastSeq) {
    // The log, read after the head, has lines the head does not reflect (it was read
    // before the exporter or the read model reached them; Temporal's record is seq 0):
    // read it again, waiting for them. The stream goes on after those lines, and a
    // session waiting for its person may send nothing more to trigger a re-read.
    scheduleRefresh(s, { min_seq: String(s.lastSeq) });
  }
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

// Every event of the stream is shown at once, and the state behind it re-read.
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
  if (type === "TURN_INTERRUPTED" && payload.cut && payload.cut.kind === "llm_call") {
    // the cut call's streamed text, shown on its line marked as cut (the log has it
    // when the worker that streamed it could say; else what this page saw stream)
    if (s.typing && !payload.cut.partial_text) payload = { ...payload, partial_text: s.typing };
    s.typing = "";
  }
  add(s, seq, type, payload);
  if (type === "conversation.state.changed" && TERMINAL.has(payload.to)) s.ended = true;
  renderConversation(s);
  scheduleRefresh(s, { min_seq: String(seq) });
}

// The wait's steps done so far on the waiting request (issue 26): reminded, escalated.
function waitSteps(p) {
  if (!p || (!p.reminded_at && !p.escalated_at)) return "";
  const who = (entries) => (entries || []).join(", ") || "no one new";
  return h("p", { class: "meta", id: "wait-steps" },
    p.reminded_at ? ["Reminded at ", when(p.reminded_at)] : "",
    p.reminded_at && p.escalated_at ? " · " : "",
    p.escalated_at ? [`Escalated to ${who(p.escalated_to)} at `, when(p.escalated_at)] : "");
}

// The sessions forked from this one (the read model's, those you may see).
function forks(list) {
  if (!list || !list.length) return "";
  const items = list.flatMap((f, i) => [i ? ", " : "",
    h("a", { href: `#/s/${enc(f.session_id)}` }, f.session_id), ` (from line ${f.seq})`]);
  return h("p", { class: "meta", id: "forks" }, "Forks: ", items);
}

function render(s) {
  const v = s.session;
  const plural = (n, one, many) => `${n} ${n === 1 ? one : many}`;
  s.els.head.replaceChildren(s.title ? h("p", { class: "prompt" }, s.title) : "",
    h("span", {},
    "Status ", badge(v.status), v.mode ? ` · ${v.mode}` : "",
    v.waiting_since && v.status === "waiting_user" ? [" · waiting since ", when(v.waiting_since)]
      : "",
    ` · ${plural(v.turns, "turn", "turns")}, ${plural(v.replies, "reply", "replies")}`,
    v.forked_from ? [" · forked from ", h("a", { href: `#/s/${enc(v.forked_from.session_id)}`,
                                                 id: "forked-from" },
                                          v.forked_from.session_id),
                     ` at line ${v.forked_from.seq}`] : ""),
    v.failure_reason ? h("p", { class: "notice" }, `Failed: ${v.failure_reason}`) : "",
    forks(v.forks),
    waitSteps(v.pending),
    v.stale ? h("p", { class: "meta" }, "(the read model has not caught up yet)") : "");
  renderPending(s);
  renderConversation(s);
  renderContracts(s);
}

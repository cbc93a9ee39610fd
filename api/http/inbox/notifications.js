// The notifications view (#/notifications), for operators: the outbox's counts, the
// channels of the notify config (names and types), and the dead letters (messages the
// notifier could not deliver in their window), each with a Resend button, and Resend all.
// Re-read every few seconds while shown, redrawn only when something changed.
//
// Data: GET /api/notifications, GET /api/notifications/dead-letters (limit/offset),
// POST /api/notifications/dead-letters/{id}/resend and .../dead-letters/resend.
import { enc, h, page, replaceKeeping, setLive, sleep, when } from "./dom.js";
import { Unauthorized, api, errorOf, failed, getJson } from "./api.js";

const EVERY_MS = 5000;   // re-read this often while shown
const PAGE = 50;         // dead letters shown at first, and added by "Show more"

async function deadLetters(want, signal) {
  const out = [];
  let offset = 0;
  while (offset !== null && out.length < want) {
    const q = new URLSearchParams({ limit: String(Math.min(500, want - out.length)),
                                    offset: String(offset) });
    const body = await getJson(`api/notifications/dead-letters?${q}`, signal);
    out.push(...body.dead_letters);
    offset = body.next_offset;
  }
  return { letters: out, more: offset !== null };
}

function countsLine(counts) {
  return h("p", { id: "notify-counts", class: "meta" },
           ["pending", "delivered", "dead"].map((k) => `${counts[k] ?? 0} ${k}`).join(" · "));
}

function channelsLine(view) {
  if (view.config_error) {
    return h("p", { class: "notice", role: "alert" },
             `The notify config cannot be used: ${view.config_error}`);
  }
  if (!view.configured) {
    return h("p", { class: "meta" },
             "No notify config (HITLFLOW_NOTIFY_CONFIG): nothing is sent from here.");
  }
  const names = view.channels.map((c) => `${c.name} (${c.type})`).join(", ");
  return h("p", { class: "meta", id: "notify-channels" }, `Channels: ${names || "none"}`);
}

function letterCard(d, resend) {
  const what = d.request_id ? `${d.kind} ${d.request_id}` : d.kind;
  return h("li", { "data-message": d.message_id },
    h("div", {}, h("span", { class: "badge st-failed" }, "dead"), " ",
      h("strong", {}, d.channel), d.recipient ? ` to ${d.recipient}` : "", " · ", what,
      " in ", h("a", { href: `#/s/${enc(d.session_id)}` }, d.session_id)),
    h("div", { class: "meta" }, `${d.attempts} attempt${d.attempts === 1 ? "" : "s"}, dead `,
      when(d.dead_at) || "?", " · ", h("code", {}, d.message_id)),
    d.last_error ? h("div", { class: "text last-error" }, d.last_error) : "",
    h("div", { class: "actions" },
      h("button", { type: "button", "data-key": `resend/${d.message_id}`,
                    "aria-label": `Resend ${d.message_id}`,
                    onclick: (e) => resend(d.message_id, e.currentTarget) }, "Resend")));
}

export function showNotifications(signal) {
  let want = PAGE;
  let shown = null;
  const head = h("div", { id: "notify-head" }, h("p", { class: "meta" }, "Loading…"));
  const list = h("ul", { class: "cards", id: "dead-letters" });
  const summary = h("p", { class: "meta", id: "dead-count", "aria-live": "polite" });
  const more = h("button", { type: "button", hidden: true, onclick: () => {
    want += PAGE;
    refresh();
  } }, "Show more");
  const all = h("button", { type: "button", class: "primary", id: "resend-all", disabled: true,
                            onclick: () => resendAll() }, "Resend all");
  page("Notifications", head, h("h2", {}, "Dead letters"),
       h("p", { class: "meta" }, "Messages the notifier could not deliver within their ",
         "window (or that their receiver refused). Sent again, a message keeps its id, ",
         "so receivers that dedupe on it see it once."),
       h("div", { class: "toolbar" }, all), summary, list, more);

  async function act(path, button, done) {
    if (button) button.disabled = true;
    try {
      const r = await api(path, { method: "POST", body: {}, signal });
      if (!r.ok) {
        const err = await errorOf(r);
        setLive(`error: ${err.message}`);
        if (button) button.disabled = false;
        return;
      }
      setLive(done(await r.json()));
      shown = null;
      await refresh();
    } catch (err) {
      failed(err);
      if (button) button.disabled = false;
    }
  }

  const resend = (id, button) => act(
    `api/notifications/dead-letters/${enc(id)}/resend`, button, () => `${id} goes out again`);
  const resendAll = () => act("api/notifications/dead-letters/resend", all,
    (b) => `${b.resent} dead letter${b.resent === 1 ? "" : "s"} sent again`);

  async function refresh() {
    const [view, { letters, more: hasMore }] = await Promise.all([
      getJson("api/notifications", signal), deadLetters(want, signal)]);
    const now = JSON.stringify([view, letters, hasMore]);
    if (now === shown) return false;
    shown = now;
    head.replaceChildren(countsLine(view.counts), channelsLine(view));
    summary.textContent = letters.length === 0 ? "No dead letters."
      : `${letters.length}${hasMore ? "+" : ""} dead letter${letters.length === 1 ? "" : "s"}, `
        + "newest first.";
    replaceKeeping(list, letters.map((d) => letterCard(d, resend)));
    all.disabled = letters.length === 0;
    more.hidden = !hasMore;
    return true;
  }

  (async () => {
    while (!signal.aborted) {
      try {
        if (await refresh()) setLive(`updated ${new Date().toLocaleTimeString()}`);
      } catch (err) {
        if (err instanceof Unauthorized) return;
        if (err && err.name === "AbortError") return;
        head.replaceChildren(h("p", { class: "notice", role: "alert" },
                               err.message || String(err)));
        failed(err);
      }
      await sleep(EVERY_MS, signal);
    }
  })();
}

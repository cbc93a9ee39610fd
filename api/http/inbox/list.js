// The list (#/): the sessions, oldest first, with what each waits for; re-read every
// few seconds while shown, redrawn only when something changed.
import { badge, enc, h, page, replaceKeeping, setLive, sleep, when } from "./dom.js";
import { Unauthorized, failed, getJson } from "./api.js";

const LIST_EVERY_MS = 2000;       // the list is re-read this often while shown
const LIST_PAGES = 4;             // at most this many pages of 500 are read
// "me" (the default): what the person signed in may answer (waiting_for=me); the
// others are statuses ("waiting_user": waiting for anyone they may see).
const STATUSES = ["me", "waiting_user", "running", "queued", "succeeded", "failed", "canceled"];
const LABELS = { me: "waiting for you", waiting_user: "waiting for anyone" };

async function listed(status, signal) {
  const out = [];
  let cursor = null;
  for (let i = 0; i < LIST_PAGES; i++) {
    const q = new URLSearchParams({ limit: "500" });
    if (status === "me") q.set("waiting_for", "me");
    else if (status) q.set("status", status);
    if (cursor) q.set("cursor", cursor);
    const body = await getJson(`api/sessions?${q}`, signal);
    out.push(...body.sessions);
    cursor = body.next_cursor;
    if (!cursor) return { sessions: out, more: false };
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
  const need = p.approvals_required || 1;
  return h("div", {}, h("span", { class: "badge st-waiting_user" }, `waits for ${what}`), " ",
           h("span", { class: "text" }, p.prompt),
           (p.approvers || []).length ? h("div", { class: "meta" }, `for ${p.approvers.join(", ")}`)
             : "",
           need > 1 ? h("div", { class: "meta" },
                        `${(p.approvals || []).length} of ${need} approvals`) : "");
}

export function showList(query, signal) {
  const status = query.has("status") ? query.get("status") : "me";
  const select = h("select", { id: "status-filter", onchange: () => {
    location.hash = select.value === "me" ? "#/" : `#/?status=${enc(select.value)}`;
  } }, ...STATUSES.map((s) => h("option", { value: s, selected: s === status },
                                LABELS[s] || s.replace("_", " "))),
  h("option", { value: "", selected: status === "" }, "all sessions"));
  const list = h("ul", { class: "cards", id: "sessions" });
  const count = h("p", { class: "meta", id: "count", "aria-live": "polite" }, "Loading…");
  let shown = null;
  page(status === "me" ? "Waiting for you"
    : status === "waiting_user" ? "Waiting for anyone" : "Sessions",
       h("div", { class: "toolbar" },
         h("div", {}, h("label", { for: "status-filter" }, "Show"), select)),
       count, list);

  const render = ({ sessions, more }) => {
    sessions.sort(oldestFirst);
    const now = JSON.stringify([sessions, more]);
    if (now === shown) return false; // re-rendered only when something changed
    shown = now;
    count.textContent = sessions.length === 0
      ? (status === "me" ? "Nothing waits for you." : "No sessions.")
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

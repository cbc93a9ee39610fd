// The hitlflow inbox: the sessions that wait for a person, and a page per session
// where the person answers. Plain JavaScript modules on the HTTP API; no build, no library.
//
//   #/                 the list (?status=... filters; the default is waiting_user)
//   #/s/<session id>   one session: what it waits for, the conversation, the contracts
//   #/notifications    operators: the notifier's counts and dead letters (notifications.js)
//
// Data: GET /api/sessions (the read model), GET /api/sessions/{id},
// GET /api/execution/{id}/timeline, the session's NDJSON log (read by byte ranges:
// the conversation with each tool call's safety class) and its SSE stream for live
// updates (stream.js).
//
// This module is the page's entry: it routes the hash to a view and asks for a key or
// token when the API wants one, or takes it from a sign-in link (#key=... or #token=...,
// printed by `up`); the header says who is signed in. The views: list.js (the list),
// session.js (one session, with forms.js for what it waits for, decide.js for who may
// answer it, conversation.js and contracts.js); api.js calls the API, dom.js builds
// elements.
import { $, h, page, setLive } from "./dom.js";
import { TOKEN_KEY, onUnauthorized, token, whoami } from "./api.js";
import { showList } from "./list.js";
import { showNotifications } from "./notifications.js";
import { finishOidcSignIn, offerOidc } from "./oidc.js";
import { showSession } from "./session.js";

let view = null; // { ctl: AbortController } of the page shown

function route() {
  signInFromLink();
  if (view) view.ctl.abort();
  view = { ctl: new AbortController() };
  $("#signout").hidden = !token();
  showWho(view.ctl.signal);
  setLive("");
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, query] = hash.split("?");
  const m = /^\/s\/([^/]+)$/.exec(path);
  if (m) showSession(decodeURIComponent(m[1]), view.ctl.signal);
  else if (path === "/notifications") showNotifications(view.ctl.signal);
  else showList(new URLSearchParams(query || ""), view.ctl.signal);
}

// -- sign in (only when the API asks for a token) -------------------------------------

// Who is signed in, in the page's header (from GET /api/whoami; empty until known).
async function showWho(signal) {
  const who = $("#who");
  const me = await whoami(signal);
  if (signal.aborted) return;
  who.textContent = me ? `signed in as ${me.name || me.subject} (${me.role})` : "";
  who.title = me ? `${me.issuer}:${me.subject}` : "";
  // Operators and admins: a link to the notifications view (its routes need the role).
  $("#notifications-link").hidden = !(me && ["operator", "admin"].includes(me.role));
}

// A sign-in link (`hitlflow up` prints http://127.0.0.1:8000/#key=...; #token=... for the
// API token): the secret is in the fragment, which the browser never sends to a server.
// It is read once, kept like a typed one, and removed from the address bar and this
// entry of the history.
function signInFromLink() {
  const m = /^#(?:key|token)=([^&#]+)$/.exec(location.hash);
  if (!m) return;
  try {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]).trim());
  } catch (e) {
    if (!(e instanceof URIError)) throw e;  // a mangled link signs nobody in
  } finally {
    history.replaceState(null, "", location.pathname + location.search);
  }
}

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
  h("label", { for: "token" }, "Your key or the API token"), input,
  h("p", { id: "token-help", class: "meta" },
    "Your key (hfk_..., from `hitlflow people add` or the sign-in link `hitlflow up` ",
    "printed), or the API token (HITLFLOW_API_TOKEN, or the file api-token in up's data ",
    "directory). It is kept in this browser tab only (session storage) and sent as a ",
    "bearer token."),
  h("div", { class: "actions" }, h("button", { class: "primary", type: "submit" }, "Sign in")));
  page("Sign in", form);
  input.focus();
  offerOidc(form); // auth mode oidc: a button for the identity provider (oidc.js)
}

// -- start --------------------------------------------------------------------------

onUnauthorized(showLogin);
window.addEventListener("hashchange", route);
document.addEventListener("DOMContentLoaded", () => {
  $("#signout").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    route();
  });
  // Back from the identity provider (oidc.js): trade its code for a token first.
  finishOidcSignIn().then(route, (err) => showLogin(err.message));
});

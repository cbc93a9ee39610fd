// The confirm page of an action link (api/http/routers/act.py). The token comes in the
// URL's fragment, which no server sees; the page asks the API what it would decide
// (POST api/act/inspect: changes nothing) and decides only when the person presses
// Confirm (POST api/act/decide). The token is the credential: no key is needed here.
const KEY = "hitlflow.act_token";

const TITLES = {
  link_malformed: "This link is not valid",
  link_bad_signature: "This link is not valid",
  link_expired: "This link has expired",
  link_used: "This link was already used",
  request_answered: "This request was already answered",
  request_changed: "This request changed",
  forbidden: "You may not answer this request",
  session_not_found: "No such session",
};

const $ = (id) => document.getElementById(id);

// The token of the fragment (#t=...), kept for a reload of this tab and taken out of
// the address bar (and so out of the browser's history of it).
function takeToken() {
  const params = new URLSearchParams(location.hash.slice(1));
  const given = params.get("t");
  if (given) {
    sessionStorage.setItem(KEY, given);
    history.replaceState(null, "", location.pathname);
  }
  return given || sessionStorage.getItem(KEY) || "";
}

async function post(path, token) {
  const r = await fetch(path, {
    method: "POST", cache: "no-store", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ token }),
  });
  let body = {};
  try { body = await r.json(); } catch { body = {}; }
  return { ok: r.ok, status: r.status, body };
}

function refused(error, status) {
  const code = (error && error.code) || `http_${status}`;
  $("title").textContent = TITLES[code] || "This link cannot be used";
  $("reason").textContent = (error && error.message) || `HTTP ${status}`;
  $("code").textContent = code;
  $("ask").hidden = true;
  $("refused").hidden = false;
  document.body.dataset.state = "refused";
}

function who(r) {
  const name = r.name || r.subject;
  return r.email ? `${name} <${r.email}>` : name;
}

function show(view, token) {
  const approve = view.decision === "approve";
  $("title").textContent = approve ? "Approve this request?" : "Reject this request?";
  $("prompt").textContent = view.prompt || `${view.kind} ${view.request_id}`;
  if (view.asked) {
    $("asked").textContent = JSON.stringify(view.asked, null, 2);
    $("asked-box").hidden = false;
  }
  $("digest").textContent = view.digest;
  const session = $("session");
  session.textContent = view.session_id;
  session.href = `./#/s/${encodeURIComponent(view.session_id)}`;
  $("request").textContent = view.request_id;
  $("recipient").textContent = who(view.recipient);
  $("expires").textContent = new Date(view.expires_at).toLocaleString();
  const button = $("confirm");
  button.textContent = approve ? "Confirm: approve" : "Confirm: reject";
  button.className = approve ? "primary" : "danger";
  button.addEventListener("click", () => confirm(view, token, button), { once: true });
  $("ask").hidden = false;
  document.body.dataset.state = "asking";
}

async function confirm(view, token, button) {
  button.disabled = true;
  const r = await post("api/act/decide", token);
  if (!r.ok) {
    refused(r.body.error, r.status);
    return;
  }
  sessionStorage.removeItem(KEY);
  const approved = view.decision === "approve";
  $("title").textContent = approved ? "Approved" : "Rejected";
  $("outcome").textContent = `${approved ? "Approved" : "Rejected"} as ${who(view.recipient)}, `
    + `through this link. The session goes on.`;
  $("ask").hidden = true;
  $("done").hidden = false;
  document.body.dataset.state = "decided";
}

async function main() {
  const token = takeToken();
  if (!token) {
    refused({ code: "link_malformed", message: "This page was opened without a link's token: open the whole link from the message." }, 400);
    return;
  }
  try {
    const r = await post("api/act/inspect", token);
    if (r.ok) show(r.body, token);
    else refused(r.body.error, r.status);
  } catch (err) {
    refused({ code: "unreachable", message: `The server could not be reached: ${err.message || err}` }, 0);
  }
}

main();

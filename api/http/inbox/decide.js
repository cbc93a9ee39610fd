// Who decides (issue 24): whether the person signed in may answer the pending request,
// and what they are answering. From the session view's `you` (may_answer, refusal
// {rule, message}) and the request's digest, approvers, approvals and
// approvals_required. A person who may not answer sees who the request is for and why
// it is not theirs, instead of a button that fails; one who may sees the digest of
// exactly what they are asked (short, the whole in its title) and, for a request that
// needs more than one approval, who has approved so far.
import { h } from "./dom.js";

// The session's `you`; a server that does not send it lets everyone try (the API
// still decides: a refused answer shows its words in place).
export function mayAnswer(session) {
  return !session.you || session.you.may_answer !== false;
}

// What changes the form: the request, what it asks (digest), whether it is ours and the
// approvals so far. A change of any redraws it.
export function formKey(session) {
  const p = session.pending;
  if (!p) return `status ${session.status}`;
  const you = session.you || {};
  return JSON.stringify([p.request_id, p.digest || "", mayAnswer(session),
                         you.refusal ? you.refusal.rule : "", (p.approvals || []).length]);
}

function person(ref) {
  if (typeof ref === "string") return ref.startsWith("group:") ? `the group ${ref.slice(6)}` : ref;
  return ref.name || ref.subject;
}

function listed(names) {
  if (names.length <= 1) return names.join("");
  return `${names.slice(0, -1).join(", ")} and ${names[names.length - 1]}`;
}

// Who the request is for: its own approvers (a rule named them), else the session's.
export function forWhom(p) {
  const named = (p.approvers || []).map(person);
  return h("p", { class: "meta", id: "for-whom" }, named.length
    ? [`For ${listed(named)}`, p.rule ? ` (rule ${p.rule})` : "", "."]
    : "For the session's owner and approvers, or an operator.");
}

// The digest, short (its first 12 hex digits), the whole one in its title.
export function digestLine(p) {
  if (!p.digest) return "";
  const hex = p.digest.replace(/^sha256:/, "");
  return h("p", { class: "meta digest" }, "You answer exactly what is shown here: digest ",
           h("code", { id: "digest", title: p.digest, "data-digest": p.digest },
             `${hex.slice(0, 12)}…`));
}

// Two-person requests: how many approvals it needs and who has given one.
export function approvalsLine(p) {
  const need = p.approvals_required || 1;
  if (need <= 1) return "";
  const given = (p.approvals || []).map(person);
  return h("p", { class: "meta", id: "approvals" },
           `Needs ${need} approvals from different people; `,
           given.length ? `approved so far by ${listed(given)} (${given.length} of ${need}).`
             : "none yet.");
}

// Instead of the form: the request, who it is for and why it is not theirs.
export function notYours(session) {
  const p = session.pending;
  const why = (session.you && session.you.refusal) || null;
  return h("div", { id: "not-yours" },
    h("p", { class: "prompt", id: "prompt" }, p.prompt),
    forWhom(p), approvalsLine(p),
    h("p", { class: "notice", id: "why-not" },
      "Not yours to answer: ", why ? why.message : "the API does not let you answer it.",
      why ? h("span", { class: "meta" }, ` (rule ${why.rule})`) : ""));
}

// A refused answer, from the API's error body: a stale digest says what happened and
// offers the reload; anything else is the API's own words.
export function refusedText(error) {
  if (error && error.code === "stale_digest") {
    return "Not sent: what you were asked changed since this page showed it: reload.";
  }
  if (!error) return "Not sent: the API refused it";
  return `Not sent: ${error.message}${error.rule ? ` (rule ${error.rule})` : ""}`;
}

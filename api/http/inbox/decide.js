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

// -- edit before approve, and "do not ask again" (issue 24, parts 4 and 6) -------------

// What a tool-call approval asks: `{server, tool, arguments}`, from the request itself
// when the API serves it (`pending.asked`), else from the log line that opened it
// (ISSUE_OPENED carries it). null when neither is known yet.
export function askedOf(s) {
  const p = s.session.pending;
  if (!p) return null;
  if (p.asked && typeof p.asked === "object") return p.asked;
  for (const e of s.entries.values()) {
    if (e.type === "ISSUE_OPENED" && e.payload && e.payload.issue_id === p.request_id
        && e.payload.asked && typeof e.payload.asked === "object") return e.payload.asked;
  }
  return null;
}

// JSON with its keys sorted: two texts that say the same object compare equal.
export function canonical(value) {
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  if (value && typeof value === "object") {
    return `{${Object.keys(value).sort().map((k) => `${JSON.stringify(k)}:${canonical(value[k])}`)
      .join(",")}}`;
  }
  return JSON.stringify(value);
}

// The arguments the person typed: `{edited: object | null}` (null: unchanged, send
// none), or `{problem}` when the text is not a JSON object (nothing is sent then).
export function editedArguments(text, original) {
  if (original === null && !text.trim()) return { edited: null }; // as asked
  let value;
  try {
    value = JSON.parse(text);
  } catch (err) {
    return { problem: `the arguments are not JSON: ${err.message}` };
  }
  if (!value || typeof value !== "object" || Array.isArray(value)) {
    return { problem: "the arguments must be a JSON object ({...})" };
  }
  return { edited: original && canonical(value) === canonical(original) ? null : value };
}

// The editor of an editable request: the arguments as JSON, prefilled with what is
// asked, and where the schema's errors show. `read()` says what to send.
export function argumentsEditor(asked) {
  const original = asked && asked.arguments && typeof asked.arguments === "object"
    ? asked.arguments : null;
  // Not known yet (the log line that says it is not read yet): empty, which approves
  // the call as asked; the form is drawn again once it is known.
  const text = h("textarea", { id: "arguments", name: "arguments", spellcheck: "false",
                                "aria-describedby": "arguments-help arguments-errors",
                                class: "code", rows: "6",
                                placeholder: original ? null : "as asked" },
                 original ? JSON.stringify(original, null, 2) : "");
  const errors = h("ul", { id: "arguments-errors", class: "errors" });
  const show = (list) => {
    errors.replaceChildren(...list.map((e) => h("li", {}, e)));
    if (list.length) text.setAttribute("aria-invalid", "true");
    else text.removeAttribute("aria-invalid");
  };
  return {
    el: h("div", { class: "field", id: "edit" },
      h("label", { for: "arguments" }, "Arguments (JSON)"),
      h("p", { class: "meta", id: "arguments-help" },
        "You may edit them before approving: the edited call is the one that runs, and ",
        "the log records both what was asked and what you approved."),
      text, errors),
    // {arguments?} to send, or null when there is a problem (shown in place).
    read() {
      const got = editedArguments(text.value, original);
      if (got.problem) { show([got.problem]); return null; }
      show([]);
      return got.edited ? { arguments: got.edited } : {};
    },
    show,
  };
}

// "Approve, and do not ask again": for this tool in this session, or only for these
// arguments. Not offered for a request that needs several approvers (the API refuses
// it) or one that is not a tool call.
export function rememberChoice(p, asked) {
  if (p.kind !== "approval" || (p.approvals_required || 1) > 1) return null;
  const tool = asked && asked.tool ? asked.tool : "this tool";
  const forTool = h("input", { type: "checkbox", id: "remember", name: "remember" });
  const onlyThese = h("input", { type: "checkbox", id: "remember-arguments",
                                  name: "remember-arguments", disabled: true });
  forTool.addEventListener("change", () => {
    onlyThese.disabled = !forTool.checked;
    if (!forTool.checked) onlyThese.checked = false;
  });
  return {
    el: h("fieldset", { id: "do-not-ask" }, h("legend", {}, "Next time"),
      h("label", { class: "inline", for: "remember" }, forTool,
        `Approve, and do not ask again for ${tool} in this session`),
      h("label", { class: "inline sub", for: "remember-arguments" }, onlyThese,
        "only when it is called with these arguments")),
    // {remember?} to send with an approval.
    read() {
      if (!forTool.checked) return {};
      return { remember: onlyThese.checked ? "arguments" : "tool" };
    },
  };
}

// What the session waits for: the form that fits the request's kind, and the answer
// sent from it (refused answers show the API's words in place). A request the person
// may not answer shows who it is for and why it is not theirs instead (decide.js).
import { enc, h } from "./dom.js";
import { TERMINAL, Unauthorized, api, errorOf } from "./api.js";
import * as decide from "./decide.js";

export function renderPending(s) {
  const p = s.session.pending;
  // An editable request's form waits for what it asks (its arguments) to be known.
  const key = `${decide.formKey(s.session)} ${p && p.editable && decide.askedOf(s) ? "+" : ""}`;
  if (key === s.formFor) {
    renderNotice(s);
    return; // the same request: keep what the person is typing
  }
  s.formFor = key;
  if (s.notice && s.notice.ok) s.notice = null; // "sent" is said; a refusal stays
  // A keyboard in the old form moves on to the new one's heading, not to the page's top.
  const hadFocus = s.els.pending.contains(document.activeElement);
  const mine = decide.mayAnswer(s.session);
  const title = h("h2", { id: "pending-title", tabindex: "-1" },
                  !p ? "Nothing waits for you" : mine ? "Waiting for you"
                    : "Waiting for someone else");
  const notice = h("div", { id: "notice" });
  if (!p) {
    s.els.pending.className = "";
    const status = s.session.status || "unknown";
    s.els.pending.replaceChildren(title, notice, h("p", { class: "meta" },
      TERMINAL.has(status) ? `The session has ended: it ${status}.`
        : `The session is ${status.replace("_", " ")}; this page follows it live.`),
      status === "running" ? steerForm(s) : "");
  } else if (!mine) {
    s.els.pending.className = "pending not-yours";
    s.els.pending.replaceChildren(title, notice, decide.notYours(s.session));
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
    : h("p", { class: "notice", role: "alert" }, s.notice.text, s.notice.reload
      ? [" ", h("button", { type: "button", onclick: () => location.reload() }, "Reload")]
      : ""));
}

// The form that fits the request's kind; every answer goes to the reply endpoint
// (a message or an end to theirs), so a stale form gets the API's 409 in place.
function formFor(s, p) {
  const comment = h("textarea", { id: "comment", name: "comment", maxlength: "10000" });
  const commentField = [h("label", { for: "comment" }, "Comment (optional)"), comment];
  const prompt = h("p", { class: "prompt", id: "prompt" }, p.prompt);
  const form = h("form", { "aria-labelledby": "pending-title", "aria-describedby": "prompt" });
  const send = (path, body, refused) => submit(s, form, path, body, refused);
  const reply = (extra, refused) => send("reply", {
    request_id: p.request_id, ...(p.digest ? { digest: p.digest } : {}), ...extra,
    ...(comment.value.trim() ? { comment: comment.value } : {}),
  }, refused);
  const button = (label, cls, onclick) => h("button", { type: "button", class: cls, onclick },
                                             label);
  let body;
  if (p.kind === "approval") {
    // An editable request: the arguments, which the person may change (sent only when
    // changed; the API's 422 lists what the tool's schema refuses, under them). Not
    // asking again: for the tool, or only for these arguments.
    const asked = decide.askedOf(s);
    const editor = p.editable ? decide.argumentsEditor(asked) : null;
    const remember = decide.rememberChoice(p, asked);
    const approve = () => {
      const edited = editor ? editor.read() : {};
      if (edited === null) return; // not JSON: said in place, nothing sent
      reply({ approve: true, ...edited, ...(remember ? remember.read() : {}) },
            (error) => {
              if (editor && error.code === "invalid_arguments") editor.show(error.errors || []);
            });
    };
    body = [editor ? editor.el : "", remember ? remember.el : "", commentField,
            h("div", { class: "actions" }, button("Approve", "primary", approve),
              button("Reject", "danger", () => reply({ approve: false })))];
  } else if (p.kind === "confirm") {
    body = [commentField, h("div", { class: "actions" },
      button("Yes", "primary", () => reply({ approve: true })),
      button("No", "danger", () => reply({ approve: false })))];
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
  const named = (p.approvers || []).length ? decide.forWhom(p) : "";
  form.append(prompt, named, decide.approvalsLine(p), decide.digestLine(p), ...body.flat(2));
  return form;
}

// A message while the agent works (issue 27): it waits for the agent's next LLM call,
// interrupts its turn (a new one starts with it), or is refused if the agent still works.
const IF_BUSY = [
  ["enqueue", "Wait for the agent's next step"],
  ["interrupt", "Interrupt the agent (a call that cannot be undone is let finish)"],
  ["reject", "Send only if the agent is not working"],
];

function steerForm(s) {
  const form = h("form", { id: "steer" });
  const text = h("textarea", { id: "steer-message", required: true, maxlength: "100000" });
  const choice = h("select", { id: "if-busy", name: "if_busy" },
    ...IF_BUSY.map(([v, label]) => h("option", { value: v }, label)));
  form.append(h("label", { for: "steer-message" }, "Message to the agent"), text,
    h("label", { for: "if-busy" }, "While the agent works"), choice,
    h("div", { class: "actions" }, h("button", { class: "primary", type: "submit" }, "Send")));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    if (!text.value.trim()) return;
    const body = { text: text.value };
    if (choice.value !== "enqueue") body.if_busy = choice.value;
    submit(s, form, "messages", body);
  });
  return form;
}

async function submit(s, form, path, body, refused) {
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
      s.reread(ack.journal_seq ? { min_journal_seq: String(ack.journal_seq) } : {});
      return;
    }
    // Refused (409: the request was answered or expired meanwhile, or the answer does
    // not fit): the API's words, in place; then the session as it is now.
    const error = await errorOf(r);
    s.notice = { ok: false, text: decide.refusedText(error),
                 reload: error.code === "stale_digest" };
    renderNotice(s);
    if (refused) refused(error);
    again(buttons, was);
    s.reread({});
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

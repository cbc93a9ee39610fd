// The conversation: the session's NDJSON log, read by byte ranges (a session page
// starts with the log's last bytes), and how each line shows: who said what, each tool
// call with its safety class, answers, plan steps.
import { badge, brief, enc, h, replaceKeeping, shown } from "./dom.js";
import { TERMINAL, api, failed, messageOf } from "./api.js";

const LOG_TAIL_BYTES = 512 * 1024; // a session page starts with the log's last bytes
const SAFETY = {
  read_only: ["read-only", "reads only: runs freely"],
  reversible: ["reversible", "changes something that can be undone: runs freely"],
  at_most_once: ["at most once", "changes something: runs without asking, never twice"],
  irreversible: ["irreversible", "cannot be undone: runs only once a person approves it"],
};

// The log's lines after what we have (the first read takes its last bytes only).
export async function readLog(s) {
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

export function add(s, seq, type, payload) {
  s.entries.set(seq, { seq, type, payload });
  if (type === "RUN_CREATED" && payload.config && payload.config.title) {
    s.title = payload.config.title; // the config's title, when the log starts in view
  }
  if (s.lastSeq === null || seq > s.lastSeq) s.lastSeq = seq;
}

// What an interrupt cut (issue 27): the call in flight, the one it waited for, the
// old turn's actions that never ran.
function cutText(p) {
  const call = (c) => c.kind === "llm_call" ? `the model's answer (${c.id})`
    : c.kind === "plan_step" ? `plan step ${c.step}`
    : `the tool call ${c.server ? `${c.server}.` : ""}${c.tool || c.id}`;
  const parts = [p.cut ? `cut ${call(p.cut)}` : "ended the turn between two steps"];
  if (p.waited_for) parts.push(`after ${call(p.waited_for)} finished (never cut)`);
  const dropped = (p.cancelled || []).length + (p.dropped || []).length;
  if (dropped) parts.push(`${dropped} action${dropped === 1 ? "" : "s"} of the old turn not run`);
  return parts.join("; ");
}

export function renderConversation(s) {
  const items = [...s.entries.values()].sort((a, b) => a.seq - b.seq)
    .map((e) => entry(e.type, e.payload, e.seq, s)).flat().filter(Boolean);
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

// "Fork from here" (issue 27): a new session from the wait this message answered, with
// the message the person gives in its place (the API finds the wait, or says why not).
async function forkFrom(s, seq, text) {
  const message = window.prompt("The message the new session starts with, in place of "
                                + "this one:", text);
  if (message === null || message === "") return;
  try {
    const r = await api(`api/sessions/${enc(s.sid)}/fork`, { method: "POST",
                                                             body: { at_seq: seq, message } });
    if (!r.ok) throw new Error(await messageOf(r));
    location.hash = `#/s/${enc((await r.json()).session_id)}`;
  } catch (err) {
    failed(err);
  }
}

function entry(type, p, seq, s) {
  switch (type) {
    case "message":
      return line("Person", "person", seq, h("span", { class: "text" }, p.text),
        seq > 1 && s ? [" ", h("button", { type: "button", class: "fork",
                                           "data-key": `fork-${seq}`,
                                           title: "Start a new session from just before "
                                             + "this message, with another message",
                                           onclick: () => forkFrom(s, seq, p.text) },
                                "Fork from here")] : "");
    case "SESSION_FORKED":
      return line("Forked", "ask", seq, "from ",
                  h("a", { href: `#/s/${enc(p.parent_session_id)}` }, p.parent_session_id),
                  ` at line ${p.parent_seq}`);
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
    case "ISSUE_RESOLVED": // what the answer line does not say: edits, standing decisions
      return decisionLine(p, seq);
    case "TURN_INTERRUPTED": // a message cut the agent's turn (issue 27)
    { // what the cut call had streamed: from the log, else what this page saw stream
      const partial = (p.cut && p.cut.partial_text) || p.partial_text;
      return line(`Interrupted by ${p.by || "someone"}`, "person", seq, cutText(p),
        partial ? [" ", h("span", { class: "text cut", title: "cut: the rest was never "
          + "written" }, `${partial} [cut]`)] : "");
    }
    case "ISSUE_REMINDED": // the wait's steps (issue 26)
      return line("Reminded", "ask", seq, `request ${p.issue_id} (${p.kind}): `,
        `for ${(p.approvers || []).join(", ") || "its addressees"}`);
    case "ISSUE_ESCALATED":
      return line("Escalated", "ask", seq, `request ${p.issue_id} (${p.kind}) to `,
        `${(p.escalated_to || []).join(", ") || "no one new"}; now for `,
        `${(p.approvers || []).join(", ")}`);
    case "STANDING_DECISION_REVOKED":
      return line("Revoked", "end", seq, `standing decision ${p.standing_id} (`,
        h("code", {}, p.tool || ""), `, set by ${nameOf(p.set_by)}) by ${nameOf(p.revoked_by)}`);
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

function nameOf(ref) {
  return ref ? ref.name || ref.subject || "someone" : "someone";
}

// Issue 24's decisions: a call decided without asking (by a rule or a standing
// decision), arguments a person edited before approving, and "do not ask again".
function decisionLine(p, seq) {
  if (p.resolution === "decided_by_rule" || p.resolution === "decided_by_standing") {
    const allowed = p.answer && p.answer.approved;
    return line("Not asked", allowed ? "tool" : "error", seq,
                `${allowed ? "allowed" : "denied"} by ${p.by}`);
  }
  const parts = [];
  if (p.edited_digest) {
    parts.push(line(`Edited by ${nameOf(p.edited_by || p.principal)}`, "person", seq,
      "approved with other arguments: ", shown(p.edited_arguments || {})));
  }
  const sd = p.standing_decision;
  if (sd) {
    parts.push(line("Do not ask again", "person", `${seq}.sd`, h("code", {}, sd.tool || ""),
      sd.arguments ? [" with ", shown(sd.arguments)] : " with any arguments",
      ` in this session (${sd.standing_id}, set by ${nameOf(sd.set_by)})`));
  }
  return parts.length ? parts : null;
}

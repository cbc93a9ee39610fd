// A session's contracts (the timeline API): each with its state, result and moves.
import { badge, brief, disclosure, h, replaceKeeping, when } from "./dom.js";

export function renderContracts(s) {
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

// The operator console: every open session, a session's receipts as they are appended, pending
// approvals, the kill switch and the host's tiers, from `airlock serve`'s operator routes.
//
// Rules this file keeps (docs/console.md): the operator's token lives in this tab's
// sessionStorage and goes out only as an Authorization header (never a URL, never a cookie);
// everything a session produced is put into the page as text nodes, never parsed as markup;
// nothing is loaded from anywhere but this server (the Content-Security-Policy says so too).
"use strict";

const TOKEN_KEY = "airlock.operator_token";
const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || "",
  selected: "",        // the session whose timeline is shown
  after: 0,            // the next receipt's seq for that timeline
  watch: null,         // AbortController of the timeline's long poll
  confirming: "",      // the session whose kill waits for its confirmation
  approving: "",       // the approval request whose answer waits for its confirmation
  timers: [],
  moved: new Map(),    // row key -> when its row last moved on the screen
};

// Rows keep their place: an existing row is redrawn where it is, a new one goes at the end, a
// gone one is removed. A row that moved anyway (one above it went) takes no click for a second,
// so a list that shifts under the pointer cannot turn a click meant for one row into another's.
const MOVE_GUARD_MS = 1000;
function syncRows(tbody, items, keyOf, render) {
  const before = new Map([...tbody.rows].map((r) => [r.dataset.key, r.getBoundingClientRect().top]));
  const byKey = new Map([...tbody.rows].map((r) => [r.dataset.key, r]));
  const keep = new Set(items.map(keyOf));
  for (const [k, row] of byKey) if (!keep.has(k)) row.remove();
  for (const item of items) {
    const k = keyOf(item), row = render(item);
    row.dataset.key = k;
    if (byKey.has(k) && keep.has(k)) byKey.get(k).replaceWith(row);
    else tbody.append(row);
  }
  const now = Date.now();
  for (const row of tbody.rows) {
    const was = before.get(row.dataset.key);
    if (was !== undefined && Math.abs(was - row.getBoundingClientRect().top) > 0.5) state.moved.set(row.dataset.key, now);
  }
}
function justMoved(key) { return Date.now() - (state.moved.get(key) || 0) < MOVE_GUARD_MS; }
// A click handler that does nothing while its row has just moved.
function guarded(key, act) {
  return () => {
    if (justMoved(key)) {
      $("status").textContent = "the list moved under the pointer: look, then click again";
      return;
    }
    act();
  };
}

// An element with attributes and children; strings become text nodes, never markup.
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

const $ = (id) => document.getElementById(id);

class Unauthorized extends Error {}

// One call to the server with the operator's token; the parsed body, or an Error with its code.
async function api(method, path, body, signal) {
  const headers = { Authorization: "Bearer " + state.token };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, {
    method, headers, signal, body: body === undefined ? undefined : JSON.stringify(body),
    cache: "no-store", credentials: "omit", referrerPolicy: "no-referrer",
  });
  let json = null;
  try { json = await res.json(); } catch (_) { /* not JSON: reported below */ }
  if (res.status === 401) throw new Unauthorized(json && json.error ? json.error.message : "unauthorized");
  if (!res.ok) {
    const err = json && json.error ? json.error : { code: "HTTP " + res.status, message: res.statusText };
    const e = new Error(err.code + ": " + err.message);
    e.code = err.code;
    throw e;
  }
  return json;
}

function short(hex, n = 12) { return typeof hex === "string" ? hex.slice(0, n) : ""; }

function duration(seconds) {
  if (seconds < 60) return seconds + " s";
  if (seconds < 3600) return Math.floor(seconds / 60) + " min " + (seconds % 60) + " s";
  return Math.floor(seconds / 3600) + " h " + Math.floor((seconds % 3600) / 60) + " min";
}

function bytes(n) {
  if (n === null || n === undefined) return "?";
  const units = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + units[i];
}

function cpu(us) { return us === null || us === undefined ? "?" : (us / 1000).toFixed(1) + " ms CPU"; }

// ---- the token ----

function showLogin(message) {
  stopAll();
  state.token = "";
  sessionStorage.removeItem(TOKEN_KEY);
  $("console").hidden = true;
  $("forget").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message || "";
  $("status").textContent = "";
  $("token").focus();
}

async function start() {
  try {
    await refreshSessions();
  } catch (e) {
    showLogin(e instanceof Unauthorized ? "That is not this server's operator token (" + e.message + ")." : String(e.message || e));
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, state.token);
  $("login").hidden = true;
  $("console").hidden = false;
  $("forget").hidden = false;
  refreshHost();
  refreshApprovals();
  every(1000, refreshSessions);
  every(2000, refreshApprovals);
}

// Runs `refresh` again `ms` after each one ends (never two at once, however slow the server).
function every(ms, refresh) {
  const id = {};
  const next = () => { id.t = setTimeout(() => refresh().catch(failed).finally(() => { if (id.t) next(); }), ms); };
  state.timers.push(id);
  next();
}

function stopAll() {
  for (const id of state.timers) { clearTimeout(id.t); id.t = 0; }
  state.timers = [];
  if (state.watch) state.watch.abort();
  state.watch = null;
}

function failed(e) {
  if (e instanceof Unauthorized) return showLogin("The server no longer takes this token (" + e.message + ").");
  if (e && e.name === "AbortError") return;
  $("status").textContent = "last request failed: " + (e.message || e);
}

// ---- sessions ----

function runningCell(s) {
  if (!s.running) return "idle";
  const u = s.running.usage;
  const parts = [s.running.kind + " for " + (s.running.for_ms / 1000).toFixed(1) + " s"];
  if (u) {
    if (u.processes !== null) parts.push(u.processes + " processes");
    if (u.memory_bytes !== null) parts.push(bytes(u.memory_bytes));
    if (u.cpu_us !== null) parts.push(cpu(u.cpu_us));
  }
  return parts.join(", ");
}

function killCell(s) {
  if (s.killed) return el("span", { class: "error" }, "killed");
  if (state.confirming === s.session) {
    return el("span", {},
      el("button", { class: "danger", type: "button", "data-kill-confirm": s.session,
                     title: "kill session " + s.session + " (" + s.task_id + ")",
                     onclick: guarded(s.session, () => kill(s.session)) }, "Kill " + short(s.session, 8) + " now"), " ",
      el("button", { type: "button", onclick: () => { state.confirming = ""; refreshSessions().catch(failed); } }, "Cancel"));
  }
  return el("button", { type: "button", "data-kill": s.session,
                        onclick: guarded(s.session, () => { state.confirming = s.session; refreshSessions().catch(failed); }) },
            "Kill…");
}

async function kill(id) {
  state.confirming = "";
  try {
    await api("POST", "/v1/console/sessions/" + encodeURIComponent(id) + "/kill");
  } catch (e) {
    failed(e);
  }
  await refreshSessions().catch(failed);
}

function sessionLink(id) {
  return el("button", { class: "link mono", type: "button", title: id, onclick: () => select(id) }, short(id));
}

async function refreshSessions() {
  const r = await api("GET", "/v1/console/sessions");
  syncRows($("sessions").tBodies[0], r.sessions, (s) => s.session, (s) => el("tr", {
    "data-session": s.session, class: [s.session === state.selected ? "selected" : "", s.killed ? "killed" : ""].join(" ").trim() },
    el("td", {}, sessionLink(s.session)),
    el("td", {}, s.task_id),
    el("td", { class: "mono", title: s.policy_digest }, short(s.policy_digest)),
    el("td", {}, s.executor + " (tier " + s.tier + ")" + (s.machine ? " on " + s.machine : "")),
    el("td", {}, duration(s.age_seconds)),
    el("td", { "data-field": "actions" }, String(s.actions)),
    el("td", { "data-field": "refused", class: s.refused ? "error" : "" }, String(s.refused)),
    el("td", { "data-field": "running" }, runningCell(s)),
    el("td", {}, s.tool_runs ? cpu(s.tool_runs.cpu_us) + ", peak " + bytes(s.tool_runs.peak_rss_kb * 1024)
                             : "measured on " + s.machine),
    el("td", {}, killCell(s))));
  $("open-count").textContent = "(" + r.sessions.length + ")";
  $("no-sessions").hidden = r.sessions.length > 0;
  syncRows($("ended").tBodies[0], r.ended, (s) => s.session, (s) => el("tr", {
    "data-session": s.session, class: s.session === state.selected ? "selected" : "" },
    el("td", {}, sessionLink(s.session)),
    el("td", {}, s.task_id),
    el("td", { class: s.ended && s.ended.how === "killed" ? "error" : "" }, s.ended ? s.ended.how : "ended"),
    el("td", {}, s.ended ? s.ended.reason : ""),
    // A killed session's tool is stopped with its whole sandbox; until that is done it shows here.
    el("td", { "data-field": "running" }, s.running ? "stopping: " + runningCell(s) : "nothing running"),
    el("td", {}, String(s.actions)),
    el("td", {}, String(s.refused))));
  $("status").textContent = "updated " + new Date().toLocaleTimeString();
}

// ---- a session's timeline ----

function select(id) {
  if (state.watch) state.watch.abort();
  state.selected = id;
  state.after = 0;
  $("timeline").replaceChildren();
  $("timeline-session").textContent = id;
  $("timeline-state").textContent = "";
  $("chain").textContent = "";
  $("timeline-panel").hidden = false;
  refreshSessions().catch(failed);
  watch(id);
}

// Long-polls the session's receipts: each answer holds those after the last one seen, or comes
// empty after a wait; ends when another session is selected or the token is forgotten.
async function watch(id) {
  const ctl = new AbortController();
  state.watch = ctl;
  let ended = false;
  while (!ctl.signal.aborted) {
    let r;
    const started = Date.now();
    try {
      const wait = ended ? 0 : 20000;
      r = await api("GET", "/v1/console/sessions/" + encodeURIComponent(id) + "/receipts?after=" + state.after +
                    "&wait_ms=" + wait, undefined, ctl.signal);
    } catch (e) {
      if (ctl.signal.aborted) return;
      failed(e);
      if (e instanceof Unauthorized) return;
      await new Promise((ok) => setTimeout(ok, 2000));
      continue;
    }
    if (ctl.signal.aborted || state.selected !== id) return;
    const asked = Date.now() - started;
    for (const receipt of r.receipts) $("timeline").append(entry(receipt, r.output_tails));
    state.after = r.next;
    const c = r.chain;
    $("chain").className = c.verified ? "ok" : "broken";
    $("chain").textContent = c.verified
      ? "The receipt chain verifies: " + c.receipts + " receipts, each chained to the one before."
      : "The receipt chain does NOT verify: " + (c.error ? c.error.code + ": " + c.error.message : "broken");
    const s = r.session;
    $("timeline-state").textContent = s.killed ? "(killed)" : s.ended ? "(" + s.ended.how + ")" : "(open)";
    $("timeline-state").className = s.killed ? "error" : "muted";
    // The status is taken before the receipts are read: once it says ended, the answer holds
    // the session's last receipts, and an answer with none after it means there are no more.
    if (s.ended && r.receipts.length === 0) return;
    ended = !!s.ended;
    // An answer that came back at once with nothing (a broken chain, a kill still stopping its
    // tool) is not a reason to ask again at once.
    if (!ended && r.receipts.length === 0 && asked < 1000) await new Promise((ok) => setTimeout(ok, 1000));
  }
}

function outcomeText(o) {
  if (!o) return "";
  const exit = o.signal !== null && o.signal !== undefined ? "signal " + o.signal : "exit " + o.exit_code;
  const notes = [o.timed_out && "timed out", o.stopped && "stopped", o.budget_exhausted && "budget exhausted"].filter(Boolean);
  return exit + ", " + Math.round(o.wall_ms) + " ms" + (notes.length ? " (" + notes.join(", ") + ")" : "");
}

function argv(a) {
  if (!a) return "";
  if (Array.isArray(a)) return a.join(" ");
  return JSON.stringify(a);
}

// One receipt as a timeline entry: what was asked, what was decided, and why.
function entry(r, tails) {
  const refused = r.decision === "refused" || r.decision === "failed" || r.kind === "session.refused";
  const held = r.kind === "approval.requested";
  const detail = [];
  const args = r.args || {};
  switch (r.kind) {
    case "session.open":
      detail.push("on " + (r.sandbox ? r.sandbox.executor + " (tier " + r.sandbox.tier + ")" : "?") +
                  (r.task_id ? ", task " + r.task_id : ""));
      break;
    case "session.close":
      detail.push(r.how + (r.reason ? ": " + r.reason : "") + (r.write_back ? ", written back" : ", nothing written back"));
      break;
    case "read_file": case "write_file": case "list_dir":
      detail.push(args.path);
      break;
    case "http_fetch":
      detail.push((args.method || "GET") + " " + args.url);
      break;
    case "door.request": {
      // A request through the network door: its method, where to (the URL, or host:port for a
      // CONNECT), and the status the door answered.
      const where = r.url || (r.host ? r.host + ":" + r.port : r.target || "");
      detail.push([r.door === "connect" ? "CONNECT" : r.method, where].filter(Boolean).join(" ") +
                  (r.status !== undefined ? " → " + r.status : ""));
      break;
    }
    case "run_tool":
      detail.push((args.tool || "") + " " + argv(args.args));
      if (r.result && r.result.outcome) detail.push(outcomeText(r.result.outcome));
      break;
    case "tool.run":
      detail.push(argv(r.argv));
      if (r.outcome) detail.push(outcomeText(r.outcome));
      break;
    case "approval.requested":
      if (r.approval) detail.push("held for approval: " + r.approval.tool + " (request " + r.approval.id + ")");
      break;
  }
  const li = el("li", { class: refused ? "refused" : held ? "held" : "", "data-seq": r.seq, "data-kind": r.kind },
    el("div", { class: "head" },
      el("span", { class: "muted mono" }, "#" + r.seq),
      el("span", { class: "muted" }, typeof r.ts === "string" ? r.ts.slice(11, 23) : ""),
      el("span", { class: "kind" }, r.kind),
      r.decision ? el("span", { class: refused ? "error" : "ok" }, r.decision) : null,
      r.error ? el("span", { class: "code" }, r.error.code) : null),
    detail.filter((d) => d !== "").map((d) => el("div", { class: "detail" }, d)),
    r.error ? el("div", { class: "error" }, r.error.message) : null);
  const tail = tails && tails[String(r.seq)];
  if (tail) {
    if (tail.stdout) li.append(el("pre", { "data-stream": "stdout", title: "the end of stdout" }, tail.stdout));
    if (tail.stderr) li.append(el("pre", { "data-stream": "stderr", class: "error", title: "the end of stderr" }, tail.stderr));
  }
  return li;
}

// ---- approvals ----

async function refreshApprovals() {
  const r = await api("GET", "/v1/approvals");
  // Oldest first: a new request goes at the end and moves no row under the pointer.
  const pending = r.approvals.filter((a) => a.status === "pending")
    .sort((x, y) => x.requested_at - y.requested_at || (x.id < y.id ? -1 : 1));
  syncRows($("approvals").tBodies[0], pending, (a) => a.id, approvalRow);
  $("approval-count").textContent = "(" + pending.length + ")";
  $("no-approvals").hidden = pending.length > 0;
}

// One held call; answering takes two clicks, the second naming the tool and arguments it answers.
function approvalRow(a) {
  const args = JSON.stringify(a.args);
  const what = a.tool + " " + args;
  const buttons = state.approving === a.id
    ? [el("button", { type: "button", "data-approve-confirm": a.id, title: "approve " + what,
                      onclick: guarded(a.id, () => answer(a.id, "approve")) }, "Approve " + a.tool + " now"),
       el("button", { class: "danger", type: "button", "data-deny-confirm": a.id,
                      onclick: guarded(a.id, () => answer(a.id, "deny")) }, "Deny it"),
       el("button", { type: "button", onclick: () => { state.approving = ""; refreshApprovals().catch(failed); } }, "Cancel")]
    : [el("button", { type: "button", "data-answer": a.id,
                      onclick: guarded(a.id, () => { state.approving = a.id; refreshApprovals().catch(failed); }) },
          "Answer…")];
  return el("tr", { "data-approval": a.id },
    el("td", {}, el("strong", {}, a.tool), " in run ", el("code", {}, a.run_id), " (session ", el("code", {}, short(a.session)), ")",
       el("pre", {}, JSON.stringify(a.args, null, 1)),
       state.approving === a.id ? el("div", { class: "confirm" }, "Answer exactly this call: " + what) : null,
       buttons));
}

async function answer(id, decision) {
  state.approving = "";
  try {
    await api("POST", "/v1/approvals/" + encodeURIComponent(id), { decision });
  } catch (e) {
    failed(e);
  }
  await refreshApprovals().catch(failed);
}

// ---- the host ----

async function refreshHost() {
  let r;
  try {
    r = await api("GET", "/v1/console/host");
  } catch (e) {
    return failed(e);
  }
  $("executors").tBodies[0].replaceChildren(...r.executors.map((x) => el("tr", { "data-executor": x.executor },
    el("td", {}, x.executor), el("td", {}, String(x.level)),
    el("td", { class: x.available ? "ok" : "error" }, x.available ? "yes" : "no"), el("td", {}, x.reason))));
  const f = r.host_facts || {};
  const facts = [
    ["kernel", f.kernel_release],
    ["profile", r.profile],
    ["the built-in default runs on", r.builtin_default && (r.builtin_default.runs_on || (r.builtin_default.refused || {}).code)],
    ["Landlock ABI", f.landlock_abi],
    ["user namespaces", f.user_namespaces],
    ["seccomp filter", f.seccomp_filter],
    ["microVM image verified by the escape suite", f.microvm ? f.microvm.verified : undefined],
    ["running as root", f.running_as_root],
  ];
  $("host-facts").replaceChildren(...facts.filter(([, v]) => v !== undefined)
    .flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, String(v))]));
}

// ---- start ----

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    state.token = $("token").value.trim();
    $("token").value = "";
    start();
  });
  $("forget").addEventListener("click", () => showLogin("Token forgotten."));
  if (state.token) start();
  else showLogin("");
});

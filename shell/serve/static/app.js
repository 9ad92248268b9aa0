// pidurable serve: the live page. Plain JavaScript, no build step, no framework.
// Reads the JSON API with the bearer token (from #token=... once, then
// sessionStorage) and follows a conversation's Server-Sent Events with fetch
// (EventSource cannot send the token): each `view` event is a committed view
// (the first one the conversation as it is now), each `tasks` event its task tree.
"use strict";

const $ = (sel) => document.querySelector(sel);
const state = {
  token: null,
  conversations: [],
  current: null,       // conversation id
  entries: new Map(),  // id -> entry, for the current conversation
  view: null,          // the newest view
  mode: "follow_up",
  stream: null,        // AbortController of the SSE fetch
};

// --- the API ------------------------------------------------------------------
class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error && body.error.message) || `HTTP ${status}`);
    this.status = status;
  }
}

async function api(path, { method = "GET", body } = {}) {
  const headers = { Authorization: `Bearer ${state.token}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const data = await r.json().catch(() => null);
  if (r.status === 401) { showLogin("That token was not accepted."); throw new ApiError(401, data); }
  if (!r.ok) throw new ApiError(r.status, data);
  return data;
}

function toast(message, ms = 3200) {
  const t = $("#toast");
  t.textContent = message;
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, ms);
}

// --- token --------------------------------------------------------------------
function readToken() {
  const m = location.hash.match(/token=([^&]+)/);
  if (m) {
    sessionStorage.setItem("pidurable-token", decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname + location.search + "#/");
  }
  return sessionStorage.getItem("pidurable-token");
}

function showLogin(message) {
  $("#login").hidden = false;
  $("#login-error").hidden = !message;
  $("#login-error").textContent = message || "";
  $("#login-token").focus();
}

// --- rendering helpers ----------------------------------------------------------
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c);
  return node;
}

const fmt = (n) => (n >= 10000 ? `${(n / 1000).toFixed(1)}k` : String(n));

function argsText(args) {
  const parts = Object.entries(args || {}).map(([k, v]) => `${k}=${JSON.stringify(v)}`);
  const s = parts.join(", ");
  return s.length > 80 ? s.slice(0, 79) + "…" : s;
}

function convName(c) {
  return c.title || (c.root ? "Main conversation" : `Conversation ${c.id}`);
}

// --- the conversation list ------------------------------------------------------------
async function loadConversations() {
  state.conversations = await api("/api/conversations");
  renderConversations();
  const c = state.conversations.find((x) => x.id === state.current);
  if (c) $("#conv-title").textContent = convName(c);
}

function renderConversations() {
  const nav = $("#conversations");
  nav.replaceChildren(...state.conversations.filter((c) => c.owner_task_id === null).map((c) => {
    const sub = c.parent_id ? `fork of #${c.parent_id}` : c.idle ? `#${c.id}` : `#${c.id} · working`;
    return el("button", {
      class: "conv-item", "data-id": c.id, "data-idle": String(c.idle), "aria-current": String(c.id === state.current),
      onclick: () => { location.hash = `#/c/${c.id}`; $("#sidebar").classList.remove("open"); },
    }, el("span", { class: "state" }), el("span", { class: "label" },
      el("span", { class: "name" }, convName(c)), el("span", { class: "sub" }, sub)));
  }));
}

// --- the transcript -------------------------------------------------------------------
function entryNode(e) {
  const fork = el("button", { class: "fork", title: "Start a new conversation from this entry", onclick: () => forkAt(e.id) }, "Fork from here");
  if (e.kind === "user") {
    return el("div", { class: "entry user", "data-id": e.id, "data-kind": "user" }, fork, el("div", { class: "entry-role" }, "You"), el("div", { class: "bubble" }, e.text));
  }
  if (e.kind === "assistant") {
    const cls = ["entry", "assistant", e.stop_reason === "error" ? "error" : "", e.stop_reason === "aborted" ? "aborted" : ""].join(" ");
    const role = el("div", { class: "entry-role" }, "Assistant",
      e.stop_reason === "aborted" ? el("span", { class: "badge" }, "interrupted") : null,
      e.stop_reason === "error" ? el("span", { class: "badge error" }, "model error") : null,
      e.usage ? el("span", { class: "badge", title: "tokens in / out" }, `${fmt(e.usage.input_tokens)} in · ${fmt(e.usage.output_tokens)} out`) : null);
    const calls = (e.tool_calls || []).length
      ? el("div", { class: "calls" }, e.tool_calls.map((c) => el("span", { class: "call", title: JSON.stringify(c.arguments) }, `→ ${c.name}(${argsText(c.arguments)})`)))
      : null;
    const body = e.text ? el("div", { class: "bubble" }, e.text) : null;
    return el("div", { class: cls, "data-id": e.id, "data-kind": "assistant" }, fork, role, body, calls);
  }
  if (e.kind === "tool_result") {
    const lines = e.text.split("\n").length;
    return el("div", { class: "entry tool", "data-id": e.id, "data-kind": "tool_result" },
      el("details", { class: "tool-card", open: lines <= 6 || undefined },
        el("summary", {}, el("span", { class: "tool-name" }, e.tool_name || "tool"),
          el("span", { class: `badge ${e.is_error ? "error" : "ok"}` }, e.is_error ? "error" : "ok"),
          el("span", { class: "muted" }, `${lines} line${lines === 1 ? "" : "s"}`)),
        el("pre", {}, e.text)));
  }
  if (e.kind === "system") return null;
  if (e.kind === "compaction" || e.kind === "reset") {
    const label = e.kind === "compaction" ? "Earlier entries compacted - the model sees a summary from here" : "Context reset - the model starts afresh here";
    return el("div", { class: "entry note", "data-id": e.id, "data-kind": e.kind, title: e.text }, el("div", { class: "marker" }, label));
  }
  return el("div", { class: "entry assistant write", "data-id": e.id, "data-kind": e.kind },
    el("div", { class: "entry-role" }, e.kind), el("div", { class: "bubble" }, e.text));
}

function nearBottom() {
  const t = $("#transcript");
  return t.scrollHeight - t.scrollTop - t.clientHeight < 120;
}

function scrollDown(force) {
  const t = $("#transcript");
  if (force || nearBottom()) t.scrollTop = t.scrollHeight;
}

function addEntries(list) {
  const box = $("#entries");
  for (const e of list) {
    if (state.entries.has(e.id)) continue;
    state.entries.set(e.id, e);
    const node = entryNode(e);
    if (!node) continue;
    const after = [...box.children].find((c) => Number(c.dataset.id) > e.id);
    box.insertBefore(node, after || null);
  }
  $("#empty").hidden = [...state.entries.values()].some((e) => e.kind !== "system");
}

async function loadTranscript() {
  const list = await api(`/api/conversations/${state.current}/transcript`);
  state.entries.clear();
  $("#entries").replaceChildren();
  addEntries(list);
  scrollDown(true);
}

// --- live views ------------------------------------------------------------------------
function renderView(v) {
  const stick = nearBottom();
  state.view = v;
  const busy = !v.idle;
  const chip = $("#status-chip");
  chip.dataset.state = busy ? "busy" : "idle";
  chip.textContent = busy ? "Working…" : "Idle";
  $("#abort").disabled = !busy;
  const live = v.live;
  $("#live").hidden = !live;
  const tools = live && live.tools ? live.tools : [];
  $("#live-tools").replaceChildren(...tools.map((s) => el("div", { class: "live-tool", "data-call": s.call_id },
    el("header", {}, el("span", { class: "tool-name" }, s.name), el("span", { class: `badge ${s.status}` }, s.status)),
    s.output ? el("pre", { class: "tool-output" }, s.output) : null)));
  const partial = live && live.partial;
  $("#live-answer").hidden = !partial;
  $("#live-partial").textContent = partial || "";
  $("#live-thinking").hidden = !(live && !partial && !tools.length);
  const retry = live && live.retry_at;
  $("#live-retry").hidden = !retry;
  if (retry) $("#live-retry").textContent = `The model failed (${live.retry_error || "error"}); retrying at ${new Date(retry).toLocaleTimeString()}`;
  renderQueue(v.inbox || []);
  renderUsage(v.usage);
  const agent = v.agent && v.agent.model ? `${v.agent.model.provider}:${v.agent.model.model_id}` : "no model";
  const conv = v.conversation || {};
  const meta = [`#${v.conversation_id}`, agent];
  if (conv.parent_id) meta.push(`forked from #${conv.parent_id} at entry ${conv.fork_at}`);
  $("#conv-meta").textContent = meta.join(" · ");
  const c = state.conversations.find((x) => x.id === v.conversation_id);
  if (c && c.idle !== v.idle) { c.idle = v.idle; renderConversations(); }
  scrollDown(stick);
}

function renderQueue(items) {
  $("#queue-count").textContent = items.length;
  const names = { follow_up: "follow-up", steer: "steer", write: "write" };
  $("#queue").replaceChildren(...(items.length ? items.map((i) => el("div", { class: "queue-item" },
    el("span", { class: "badge" }, names[i.mode] || i.mode), " ", i.content)) : [el("p", { class: "muted" }, "Nothing queued.")]));
}

function usageTable(u) {
  const rows = [...Object.entries(u.models || {}), ...Object.entries(u.tools || {}).map(([k, v]) => [`tool ${k}`, v])];
  if (!rows.length) return el("p", { class: "muted" }, "No model calls yet.");
  return el("table", {}, el("tr", {}, el("th", {}, ""), el("th", {}, "calls"), el("th", {}, "in"), el("th", {}, "out")),
    rows.map(([k, v]) => el("tr", {}, el("td", {}, k), el("td", {}, fmt(v.calls)), el("td", {}, fmt(v.input_tokens)), el("td", {}, fmt(v.output_tokens)))));
}

function renderUsage(u) {
  if (u) $("#usage").replaceChildren(usageTable(u));
}

function renderTasks(msg) {
  const tasks = msg.tasks;
  $("#task-count").textContent = tasks.length;
  if (!tasks.length) { $("#tasks").replaceChildren(el("p", { class: "muted" }, "No live tasks.")); return; }
  const ids = new Set(tasks.map((t) => t.id));
  const byOwner = new Map();
  for (const t of tasks) {
    const owner = t.owner !== null && ids.has(t.owner) ? t.owner : null;
    if (!byOwner.has(owner)) byOwner.set(owner, []);
    byOwner.get(owner).push(t);
  }
  const label = (t) => (t.tool ? t.tool : t.kind.replace(/^pi\./, ""));
  const branch = (owner) => el("ul", {}, (byOwner.get(owner) || []).map((t) => {
    const why = [];
    if (t.phase) why.push(`phase ${t.phase}`);
    if (t.waiting_on.length) why.push(`waiting on ${t.waiting_on.map((i) => { const w = tasks.find((x) => x.id === i); return w ? `${label(w)} #${i}` : `#${i}`; }).join(", ")}`);
    if (t.reason) why.push(t.reason);
    if (t.abort_requested) why.push("abort requested");
    return el("li", { class: "task", "data-task": t.id },
      el("div", { class: "task-line" }, el("span", { class: "task-kind" }, label(t)), el("span", { class: "task-id" }, `#${t.id}`),
        el("span", { class: `badge ${t.state || t.status}` }, t.state || t.status)),
      why.length ? el("div", { class: "task-why" }, why.join(" · ")) : null,
      byOwner.has(t.id) ? branch(t.id) : null);
  }));
  $("#tasks").replaceChildren(branch(null));
}

// --- following a conversation (SSE over fetch) ---------------------------------------------
function setConn(s) {
  $("#conn").dataset.state = s;
  $("#conn .conn-label").textContent = { live: "live", connecting: "connecting", offline: "offline" }[s];
}

async function follow(id) {
  if (state.stream) state.stream.abort();
  const ctl = new AbortController();
  state.stream = ctl;
  let delay = 500;
  while (!ctl.signal.aborted && state.current === id) {
    try {
      setConn("connecting");
      const r = await fetch(`/api/conversations/${id}/events`, { headers: { Authorization: `Bearer ${state.token}` }, signal: ctl.signal });
      if (r.status === 401) { showLogin("That token was not accepted."); return; }
      if (!r.ok) throw new Error(`HTTP ${r.status}`);
      setConn("live");
      delay = 500;
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let cut;
        while ((cut = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          let event = "message", data = "";
          for (const line of block.split("\n")) {
            if (line.startsWith("event:")) event = line.slice(6).trim();
            else if (line.startsWith("data:")) data += line.slice(5).trim();
          }
          if (data && state.current === id) await onEvent(event, JSON.parse(data));
        }
      }
    } catch (err) {
      if (ctl.signal.aborted) return;
    }
    setConn("offline");
    await new Promise((res) => setTimeout(res, delay));
    delay = Math.min(delay * 2, 8000);
  }
}

async function onEvent(event, msg) {
  if (event === "view") {
    const newest = Math.max(0, ...state.entries.keys());
    if (msg.complete && msg.entries.length && msg.entries[0].id > newest && state.entries.size && newest > 0) {
      await loadTranscript(); // entries were missed while away: read them all again
    }
    addEntries(msg.entries);
    renderView(msg);
  } else if (event === "tasks") {
    renderTasks(msg);
  }
}

// --- opening a conversation ---------------------------------------------------------------
async function open(id) {
  state.current = id;
  state.view = null;
  renderConversations();
  const c = state.conversations.find((x) => x.id === id);
  $("#conv-title").textContent = c ? convName(c) : `Conversation ${id}`;
  $("#tasks").replaceChildren(el("p", { class: "muted" }, "No live tasks."));
  $("#task-count").textContent = "0";
  try {
    await loadTranscript();
  } catch (err) {
    toast(err.message);
    return;
  }
  follow(id);
  $("#composer-input").focus();
}

function route() {
  const m = location.hash.match(/^#\/c\/(\d+)/);
  const id = m ? Number(m[1]) : state.conversations.length ? state.conversations[0].id : null;
  if (id !== null && id !== state.current) open(id);
}

// --- actions ---------------------------------------------------------------------------
async function send(ev) {
  ev.preventDefault();
  const box = $("#composer-input");
  const content = box.value;
  if (!content.trim() || state.current === null) return;
  const id = state.current;
  const request_id = (crypto.randomUUID && crypto.randomUUID()) || `${Date.now()}-${Math.random()}`;
  const body = state.mode === "write" ? { content, kind: "write", request_id } : { content, when_busy: state.mode, request_id };
  $("#send").disabled = true;
  try {
    let sub;
    for (let attempt = 0; ; attempt++) {
      try { sub = await api(`/api/conversations/${id}/submissions`, { method: "POST", body }); break; }
      catch (err) { if (err.status || attempt >= 2) throw err; await new Promise((r) => setTimeout(r, 600)); } // network: retry, same request_id
    }
    box.value = "";
    autosize();
    if (sub.status === "queued") toast(state.mode === "steer" ? "Steering: placed after the current tool round" : "Queued: answered after the current run");
    if (!state.conversations.find((c) => c.id === id).title) loadConversations();
  } catch (err) {
    toast(err.message);
  } finally {
    $("#send").disabled = false;
  }
}

async function abortRun() {
  $("#abort").disabled = true;
  try { await api(`/api/conversations/${state.current}/abort`, { method: "POST", body: {} }); toast("Aborted"); }
  catch (err) { toast(err.message); }
}

async function compact() {
  try { await api(`/api/conversations/${state.current}/compact`, { method: "POST", body: {} }); toast("Compaction started"); }
  catch (err) { toast(err.message); }
}

async function forkAt(entryId) {
  try {
    const c = await api(`/api/conversations/${state.current}/fork`, { method: "POST", body: { at: entryId } });
    await loadConversations();
    location.hash = `#/c/${c.id}`;
    toast(`Forked into conversation #${c.id}`);
  } catch (err) { toast(err.message); }
}

async function newConversation() {
  try {
    const c = await api("/api/conversations", { method: "POST", body: {} });
    await loadConversations();
    location.hash = `#/c/${c.id}`;
  } catch (err) { toast(err.message); }
}

function setMode(mode) {
  state.mode = mode;
  for (const b of document.querySelectorAll(".segmented button")) b.setAttribute("aria-checked", String(b.dataset.mode === mode));
  $("#composer-input").placeholder = { follow_up: "Message the agent…", steer: "Steer the running work…", write: "Add a message without starting a run…" }[mode];
}

function autosize() {
  const box = $("#composer-input");
  box.style.height = "auto";
  box.style.height = `${Math.min(box.scrollHeight, 200)}px`;
}

async function refreshTotals() {
  try {
    const u = await api("/api/usage");
    const models = Object.values(u.models || {});
    const sum = (k) => models.reduce((a, m) => a + m[k], 0);
    $("#total-usage").textContent = models.length ? `${fmt(sum("calls"))} calls · ${fmt(sum("input_tokens"))} in · ${fmt(sum("output_tokens"))} out` : "";
  } catch (err) { /* shown elsewhere */ }
}

async function start() {
  state.token = readToken();
  if (!state.token) { showLogin(); return; }
  try { await loadConversations(); } catch (err) { if (err.status !== 401) toast(err.message); return; }
  $("#login").hidden = true;
  route();
  refreshTotals();
  setInterval(() => { loadConversations().catch(() => {}); refreshTotals(); }, 5000);
}

$("#login-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  state.token = $("#login-token").value.trim();
  sessionStorage.setItem("pidurable-token", state.token);
  start();
});
$("#composer").addEventListener("submit", send);
$("#composer-input").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) send(ev);
});
$("#composer-input").addEventListener("input", autosize);
for (const b of document.querySelectorAll(".segmented button")) b.addEventListener("click", () => setMode(b.dataset.mode));
$("#abort").addEventListener("click", abortRun);
$("#compact").addEventListener("click", compact);
$("#new-conversation").addEventListener("click", newConversation);
$("#menu").addEventListener("click", () => $("#sidebar").classList.toggle("open"));
window.addEventListener("hashchange", route);
start();

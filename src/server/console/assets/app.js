// fedgate's operator console. Plain ES module, no build step, no third-party code.
// Everything shown goes through textContent or setAttribute: nothing from the gateway is ever
// parsed as HTML, so a tool name or an error text holding markup shows as text.

import { startRunner } from "./runner.js";

const TOKEN_KEY = "fedgate-admin-token";
const MAX_CALLS = 500; // rows kept in the browser
const POLL_MS = 2000;
const SVG = "http://www.w3.org/2000/svg";

const $ = (id) => document.getElementById(id);

// Builds an element; strings and numbers become text nodes.
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

function setAttrs(el, attrs) {
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "onclick") el.addEventListener("click", v);
    else el.setAttribute(k, String(v));
  }
}

function append(el, children) {
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

const pill = (text) => h("span", { class: `pill ${String(text).replace(/[^a-z_]/gi, "")}`, "data-value": text }, text);
const time = (ms) => (ms ? new Date(ms).toLocaleTimeString() : "");
const fmtMs = (v) => (v === null || v === undefined ? "–" : v < 10 ? `${v.toFixed(2)} ms` : `${Math.round(v)} ms`);

// ---- the admin API ----------------------------------------------------------------------

class Refused extends Error {}

async function api(path, init = {}) {
  const token = sessionStorage.getItem(TOKEN_KEY) || "";
  const resp = await fetch(path, {
    ...init,
    headers: { ...(init.headers || {}), Authorization: `Bearer ${token}` },
    cache: "no-store",
  });
  if (resp.status === 401) {
    signOut("The admin token was refused.");
    throw new Refused("token refused");
  }
  const body = await resp.json().catch(() => ({}));
  if (!resp.ok) throw new Error(body.error || `${resp.status}`);
  return body;
}

const post = (path) => api(path, { method: "POST" });

// ---- sign in and out ----------------------------------------------------------------------

let running = null; // AbortController of everything a signed-in page runs

function signOut(why = "") {
  sessionStorage.removeItem(TOKEN_KEY);
  if (running) running.abort();
  running = null;
  $("app").hidden = true;
  $("logout").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = why;
  setLive("off");
}

async function signIn(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
  try {
    await api("/admin/upstreams");
  } catch (e) {
    if (!(e instanceof Refused)) signOut(`Cannot reach the admin API: ${e.message}`);
    return;
  }
  $("login").hidden = true;
  $("app").hidden = false;
  $("logout").hidden = false;
  $("login-error").textContent = "";
  start();
}

function setLive(state) {
  const el = $("live");
  el.dataset.state = state;
  el.textContent = { on: "live", retrying: "reconnecting", off: "offline" }[state];
}

// ---- polling panels -------------------------------------------------------------------

function every(ms, signal, fn) {
  const tick = async () => {
    if (signal.aborted) return;
    try {
      await fn();
    } catch (e) {
      if (e instanceof Refused) return;
    }
    if (!signal.aborted) setTimeout(tick, ms);
  };
  tick();
}

function start() {
  running = new AbortController();
  const { signal } = running;
  every(POLL_MS, signal, refreshUpstreams);
  every(POLL_MS, signal, refreshPlans);
  every(POLL_MS, signal, refreshViews);
  every(POLL_MS, signal, refreshStages);
  every(POLL_MS, signal, refreshConnections);
  every(POLL_MS, signal, refreshRuns);
  every(5000, signal, refreshLatency);
  calls.length = 0;
  followCalls(signal);
  startRunner({ api, h, $ });
}

async function refreshUpstreams() {
  const [ups, pins] = await Promise.all([api("/admin/upstreams"), api("/admin/pins")]);
  const rows = Object.entries(ups).map(([name, u]) => {
    const b = u.breaker || {};
    const breaker = [pill(b.state || "closed")];
    if (b.retry_in_ms !== undefined) breaker.push(h("span", { class: "sub" }, ` probe in ${Math.ceil(b.retry_in_ms / 1000)} s`));
    const phase = u.phase && typeof u.phase === "object" ? Object.keys(u.phase)[0] : u.phase;
    return h("tr", { "data-upstream": name, "data-state": phase },
      h("td", {}, name, h("div", { class: "sub" }, u.kind, u.server ? ` · ${u.server}` : "")),
      h("td", {}, pill(phase), u.next_attempt_at ? h("div", { class: "sub" }, `next try ${new Date(u.next_attempt_at).toLocaleTimeString()}`) : null),
      h("td", {}, u.era || "–"), h("td", {}, u.protocol_version || "–"), h("td", {}, u.tools),
      h("td", {}, u.restarts), h("td", {}, breaker), h("td", { class: "mono" }, u.last_error || ""));
  });
  $("upstream-rows").replaceChildren(...rows);
  const sel = $("f-upstream");
  for (const name of Object.keys(ups)) {
    if (![...sel.options].some((o) => o.value === name)) sel.append(h("option", { value: name }, name));
  }
  $("pins").replaceChildren(...(pins.length ? [h("h3", {}, "Held-back tool definitions")] : []),
    ...pins.map((p) => h("div", { class: "pin", "data-tool": p.item },
      h("code", {}, `${p.upstream} / ${p.item}`), " ", h("span", { class: "sub" }, p.reason), " ",
      ...(p.flags && p.flags.length ? [h("ul", { class: "flags" },
        ...p.flags.map((f) => h("li", {}, `${f.kind} in ${f.at}: ${f.detail}`)))] : []),
      h("button", { type: "button", onclick: () => acceptPin(p) },
        p.flags && p.flags.length ? "Accept with these flags" : "Accept"))));
}

async function refreshViews() {
  const v = await api("/admin/views");
  const globs = (g) => (g.length ? h("code", {}, g.join(", ")) : h("span", { class: "sub" }, "none"));
  $("listing").textContent = `tool listing: ${v.listing}` +
    (v.searching ? ` · search past ${v.threshold} tools, at most ${v.max_selected} selected · ${v.working_sets} session(s) with a working set` : "");
  $("view-rows").replaceChildren(...v.views.map((x) => h("tr", { "data-view": x.name },
    h("td", {}, x.name, h("div", { class: "sub mono" }, x.path)), h("td", {}, globs(x.tools)),
    h("td", {}, globs(x.prompts)), h("td", {}, globs(x.resources)), h("td", {}, globs(x.pinned)),
    h("td", {}, x.listing), h("td", {}, `${x.tools_selected} tools`))));
}

async function refreshStages() {
  const s = await api("/admin/stages");
  $("stage-workflows").textContent = s.workflows.length
    ? s.workflows.map((w) => `${w.name}: ${Object.keys(w.states).join(" · ")}`).join("; ") +
      ` · ${s.bound_sessions} session(s) in a workspace`
    : "no [stages] configured";
  const when = (ms) => new Date(ms).toLocaleString();
  $("stage-rows").replaceChildren(...s.workspaces.map((w) => h("tr", { "data-workspace": w.workspace, "data-state": w.state },
    h("td", { class: "mono" }, w.workspace), h("td", {}, w.workflow), h("td", {}, pill(w.state)),
    h("td", {}, ...w.history.map((m) => h("div", { class: "sub" },
      `${when(m.at_ms)} ${m.from} → ${m.to} by ${m.by}`, m.reason ? ` — ${m.reason}` : "",
      m.record ? ` (record ${m.record})` : ""))))));
}

// Who connected which per-user upstream (tokens never leave the gateway); an operator
// revokes one, and the person is asked to connect again on their next call.
async function refreshConnections() {
  const c = await api("/admin/credentials");
  $("connection-count").textContent = `${c.connections.length} per-user credential(s)`;
  $("connection-rows").replaceChildren(...c.connections.map((x) => {
    const revoke = async () => {
      try {
        await api(`/admin/credentials/${encodeURIComponent(x.owner)}/${encodeURIComponent(x.upstream)}`, { method: "DELETE" });
        $("connection-error").textContent = "";
      } catch (e) {
        $("connection-error").textContent = `revoke: ${e.message}`;
      }
      refreshConnections();
    };
    const when = (ms) => (ms ? new Date(ms).toLocaleString() : "–");
    return h("tr", { "data-owner": x.owner, "data-upstream": x.upstream },
      h("td", {}, x.owner), h("td", {}, x.upstream), h("td", { class: "account" }, x.account || "–"),
      h("td", {}, when(x.connected_at_ms)), h("td", {}, when(x.refreshed_at_ms)),
      h("td", { class: "used" }, when(x.last_used_ms)), h("td", {}, when(x.expires_at_ms)),
      h("td", { class: "scopes" }, (x.scopes || []).join(" ") || "–"),
      h("td", {}, h("button", { type: "button", class: "revoke", onclick: revoke }, "Revoke")));
  }));
}

async function acceptPin(p) {
  await api("/admin/pins/accept", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    // The flags are shown above the button: pressing it is accepting them.
    body: JSON.stringify({ upstream: p.upstream, tool: p.item, fingerprint: p.fingerprint,
      accept_flags: Boolean(p.flags && p.flags.length) }),
  });
  refreshUpstreams();
}

async function refreshPlans() {
  const plans = await api("/admin/plans");
  $("plan-count").textContent = plans.length;
  $("plan-count").dataset.count = plans.length;
  $("plan-rows").replaceChildren(...plans.map((p) => {
    const decidable = p.state.state === "pending" && p.approvers.length > 0;
    const decide = (verb) => async () => {
      try {
        await post(`/admin/plans/${encodeURIComponent(p.id)}/${verb}`);
        $("plan-error").textContent = "";
      } catch (e) {
        $("plan-error").textContent = `${verb}: ${e.message}`;
      }
      refreshPlans();
    };
    return h("tr", { "data-plan": p.id, "data-state": p.state.state },
      h("td", { class: "mono" }, p.id.slice(0, 12)), h("td", {}, p.caller),
      h("td", {}, p.tool, h("div", { class: "sub" }, p.upstream)),
      h("td", { class: "mono" }, p.summary, safety(p.safety)), h("td", {}, p.approvers.join(", ") || "the caller"),
      h("td", {}, time(p.expires_ms)),
      h("td", {}, pill(p.state.state), p.state.by ? h("div", { class: "sub" }, `by ${p.state.by}`) : null),
      h("td", {}, decidable ? [
        h("button", { type: "button", class: "primary approve", onclick: decide("approve") }, "Approve"), " ",
        h("button", { type: "button", class: "danger deny", onclick: decide("deny") }, "Deny")] : null));
  }));
}

// What the held call may do, as the agent was told.
function safety(sf) {
  if (!sf) return null;
  const marks = [];
  if (sf.writes_code) marks.push(h("span", { class: "pill error", "data-safety": "writes_code" }, "writes code"));
  if (sf.destructive) marks.push(h("span", { class: "pill error", "data-safety": "destructive" }, "destructive"));
  for (const f of sf.touches_files || []) marks.push(h("span", { class: "pill pending", "data-safety": "touches_files" }, f));
  return marks.length ? h("div", { class: "safety" }, marks) : null;
}

// ---- latency -----------------------------------------------------------------------------

async function refreshLatency() {
  const l = await api("/admin/latency");
  $("charts").replaceChildren(...l.upstreams.map((u) => chart(u)));
  $("tool-latency").replaceChildren(...l.tools.map((t) => h("tr", { "data-tool": t.tool },
    h("td", {}, upstreamLabel(t.upstream)), h("td", {}, upstreamLabel(t.tool)), h("td", {}, t.total.calls),
    h("td", {}, fmtMs(t.total.p50_ms)), h("td", {}, fmtMs(t.total.p99_ms)),
    h("td", {}, `${(t.total.error_rate * 100).toFixed(1)} %`), h("td", {}, spark(t.points)))));
}

function scaleY(points, height) {
  const top = Math.max(1, ...points.map((p) => p.p99_ms || 0));
  return (v) => height - (v / top) * (height - 4) - 2;
}

// A line through the slots that had calls, with a dot on each (one busy slot is still seen).
function line(points, key, y, step, cls, dots = true) {
  const at = points.map((p, i) => (p[key] === undefined || p[key] === null ? null : [i * step, y(p[key])])).filter(Boolean);
  if (!at.length) return null;
  return [s("polyline", { class: `line-${cls}`, points: at.map(([x, v]) => `${x.toFixed(1)},${v.toFixed(1)}`).join(" ") }),
    ...(dots ? at.map(([x, v]) => s("circle", { class: `dot-${cls}`, cx: x.toFixed(1), cy: v.toFixed(1), r: 1.8 })) : [])];
}

// Calls that reached no upstream (unknown names) and the gateway's own tools.
const upstreamLabel = (u) => ({ _none: "(no upstream)", _unknown: "(unknown)" }[u] || u);

function chart(u) {
  const w = 240, hgt = 60, step = w / Math.max(1, u.points.length - 1);
  const y = scaleY(u.points, hgt);
  const errs = u.points.map((p, i) => (p.errors ? s("rect", { class: "bar-err", x: i * step - 1, y: hgt - 6, width: 2, height: 6 }) : null));
  const t = u.total;
  return h("div", { class: "chart", "data-upstream": u.upstream },
    h("h3", {}, upstreamLabel(u.upstream)),
    s("svg", { viewBox: `0 0 ${w} ${hgt}`, preserveAspectRatio: "none" },
      line(u.points, "p50_ms", y, step, "p50"), line(u.points, "p99_ms", y, step, "p99"), ...errs),
    h("div", { class: "legend" }, h("span", { class: "p50" }, `p50 ${fmtMs(t.p50_ms)}`), " · ",
      h("span", { class: "p99" }, `p99 ${fmtMs(t.p99_ms)}`), " · ",
      h("span", { class: "err" }, `errors ${(t.error_rate * 100).toFixed(1)} %`), " · ", `${t.calls} calls`));
}

function spark(points) {
  const w = 90, hgt = 18, step = w / Math.max(1, points.length - 1);
  const y = scaleY(points, hgt);
  return s("svg", { class: "spark", viewBox: `0 0 ${w} ${hgt}`, preserveAspectRatio: "none" }, line(points, "p99_ms", y, step, "p99", false));
}

// ---- the live call timeline -----------------------------------------------------------

const calls = []; // newest first, at most MAX_CALLS
let selectedCall = null;

async function followCalls(signal) {
  try {
    const first = await api(`/admin/calls?limit=${MAX_CALLS}`);
    calls.push(...first.calls);
    renderCalls();
  } catch (e) {
    if (e instanceof Refused) return;
  }
  while (!signal.aborted) {
    const after = calls.length ? calls[0].seq : 0;
    try {
      const resp = await fetch(`/admin/calls/stream?after=${after}`, {
        headers: { Authorization: `Bearer ${sessionStorage.getItem(TOKEN_KEY) || ""}` },
        signal,
        cache: "no-store",
      });
      if (resp.status === 401) return signOut("The admin token was refused.");
      if (!resp.ok || !resp.body) throw new Error(`${resp.status}`);
      setLive("on");
      await readEvents(resp.body, (ev) => {
        if (ev.event === "call") {
          const c = JSON.parse(ev.data);
          if (calls.length && c.seq <= calls[0].seq) return;
          calls.unshift(c);
          if (calls.length > MAX_CALLS) calls.length = MAX_CALLS;
          renderCalls();
        }
      });
    } catch (e) {
      if (signal.aborted) return;
    }
    setLive("retrying");
    await new Promise((r) => setTimeout(r, 3000));
  }
}

// Server-sent events over fetch (EventSource cannot send the Authorization header).
async function readEvents(body, onEvent) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      const ev = { event: "message", data: "" };
      for (const l of block.split("\n")) {
        const i = l.indexOf(":");
        if (i <= 0) continue;
        const [k, v] = [l.slice(0, i), l.slice(i + 1).replace(/^ /, "")];
        if (k === "event") ev.event = v;
        else if (k === "data") ev.data += v;
        else if (k === "id") ev.id = v;
      }
      if (ev.data) onEvent(ev);
    }
  }
}

function callFilter() {
  const up = $("f-upstream").value, who = $("f-identity").value.trim(), out = $("f-outcome").value;
  return (c) => (!up || c.upstream === up) && (!who || c.identity.includes(who)) && (!out || c.outcome === out);
}

function renderCalls() {
  const outcomes = $("f-outcome");
  for (const c of calls) {
    if (![...outcomes.options].some((o) => o.value === c.outcome)) outcomes.append(h("option", { value: c.outcome }, c.outcome));
  }
  const shown = calls.filter(callFilter());
  $("call-count").textContent = `${shown.length} of ${calls.length} kept`;
  $("call-rows").replaceChildren(...shown.map((c) => h("tr", {
    class: `clickable${selectedCall === c.seq ? " selected" : ""}`, "data-seq": c.seq, "data-outcome": c.outcome,
    onclick: () => showCall(c.seq),
  },
    h("td", { class: "nowrap" }, time(c.time_ms)), h("td", {}, c.identity), h("td", { class: "mono nowrap" }, c.method),
    h("td", { class: "call-name" }, c.name), h("td", {}, c.upstream || "–"),
    h("td", {}, pill(c.outcome), c.envelope ? h("div", { class: "sub" }, `plan: ${c.envelope}`) : null),
    h("td", { class: "guardrails" }, guardrails(c.guardrails)),
    h("td", { class: "nowrap" }, fmtMs(c.latency_ms)), h("td", { class: "mono" }, c.correlation_id.slice(0, 12)))));
}

// What the guardrails found in a call — a detector and its action, never a value (the gateway
// never records one) — and what its hooks decided.
function guardrails(found) {
  if (!Array.isArray(found) || !found.length) return "–";
  return found.map((f) => f.hook ? `hook ${f.hook} (${f.phase}: ${f.decision})`
    : `${f.detector} (${f.action}, ${f.direction})`).join(", ");
}

async function showCall(seq) {
  selectedCall = seq;
  renderCalls();
  let c;
  try {
    c = await api(`/admin/calls/${seq}`);
  } catch (e) {
    $("call-detail").replaceChildren(h("p", { class: "error" }, e.message));
    return;
  }
  const fields = ["time", "identity", "identity_kind", "method", "name", "upstream", "decision", "reason", "outcome",
    "envelope", "latency_ms", "correlation_id", "trace_id", "arguments_sha256", "plan_id", "approver", "on_behalf_of", "guardrails"];
  $("call-detail").replaceChildren(h("h3", {}, `Call ${c.seq}`),
    h("dl", { "data-seq": c.seq }, ...fields.filter((f) => c[f] !== undefined && c[f] !== null)
      .map((f) => [h("dt", {}, f === "trace_id" ? "trace id" : f),
        h("dd", { class: "mono", "data-field": f },
          f === "latency_ms" ? fmtMs(c[f]) : f === "guardrails" ? guardrails(c[f]) : c[f])])));
}

// ---- flow runs ---------------------------------------------------------------------------

let openRun = null;

async function refreshRuns() {
  let runs;
  try {
    runs = await api("/admin/flows/runs?limit=50");
  } catch (e) {
    if (e instanceof Refused) throw e;
    $("flows-note").textContent = e.message;
    $("run-rows").replaceChildren();
    return;
  }
  $("flows-note").textContent = "";
  const want = $("f-run-status").value;
  $("run-rows").replaceChildren(...runs.filter((r) => !want || r.status === want).map((r) => h("tr", {
    class: `clickable${openRun === r.run_id ? " selected" : ""}`, "data-run": r.run_id, "data-status": r.status,
    onclick: () => showRun(r.run_id),
  }, h("td", { class: "mono" }, r.run_id.slice(0, 16)), h("td", {}, r.flow), h("td", {}, time(r.created_ms)), h("td", {}, pill(r.status)))));
  if (openRun) await showRun(openRun, true);
}

async function showRun(id, quiet = false) {
  if (openRun !== id) quiet = false;
  openRun = id;
  let r;
  try {
    r = await api(`/admin/flows/runs/${encodeURIComponent(id)}`);
  } catch (e) {
    if (!quiet) $("run-detail").replaceChildren(h("p", { class: "error" }, e.message));
    return;
  }
  if (openRun !== id) return;
  const status = r.state.finished || "running";
  const act = async (path) => {
    try {
      await post(path);
    } catch (e) {
      $("run-error").textContent = e.message;
    }
    showRun(id);
  };
  const base = `/admin/flows/runs/${encodeURIComponent(id)}`;
  const actions = h("div", { class: "actions" },
    h("button", { type: "button", class: "danger cancel-run", disabled: status !== "running", onclick: () => act(`${base}/cancel`) }, "Cancel run"));
  $("run-detail").replaceChildren(
    h("h3", {}, `${r.run.flow} · `, pill(status)),
    h("div", { class: "sub mono" }, r.run.run_id), actions, h("p", { id: "run-error", class: "error" }),
    dag(r), timeline(r, status, base, act));
}

function dag(r) {
  const nodes = r.graph ? r.graph.nodes : Object.keys(r.state.nodes).map((id) => ({ id, tool: "", depends_on: [] }));
  const depth = {};
  for (const n of nodes) depth[n.id] = Math.max(0, ...n.depends_on.map((d) => (depth[d] ?? 0) + 1));
  const rows = {};
  const pos = {};
  const W = 150, H = 34, GX = 40, GY = 14;
  for (const n of nodes) {
    const col = depth[n.id];
    const row = (rows[col] = (rows[col] ?? -1) + 1);
    pos[n.id] = { x: 8 + col * (W + GX), y: 8 + row * (H + GY) };
  }
  const width = 16 + (Math.max(0, ...Object.values(depth)) + 1) * (W + GX);
  const height = 16 + (Math.max(0, ...Object.values(rows)) + 1) * (H + GY);
  const edges = nodes.flatMap((n) => n.depends_on.filter((d) => pos[d]).map((d) => s("path", {
    class: "edge", "data-from": d, "data-to": n.id,
    d: `M${pos[d].x + W},${pos[d].y + H / 2} C${pos[d].x + W + GX / 2},${pos[d].y + H / 2} ${pos[n.id].x - GX / 2},${pos[n.id].y + H / 2} ${pos[n.id].x},${pos[n.id].y + H / 2}`,
  })));
  const boxes = nodes.map((n) => {
    const st = (r.state.nodes[n.id] || { status: "PENDING" }).status;
    return s("g", { class: `node st-${st}`, "data-node": n.id, "data-state": st, transform: `translate(${pos[n.id].x},${pos[n.id].y})` },
      s("title", {}, `${n.id} (${n.tool}): ${st}`),
      s("rect", { width: W, height: H }),
      s("text", { x: 8, y: 14 }, n.id.length > 20 ? `${n.id.slice(0, 19)}…` : n.id),
      s("text", { x: 8, y: 27, class: "tool" }, st.toLowerCase()));
  });
  return s("svg", { class: "dag", id: "dag", viewBox: `0 0 ${width} ${height}`, height }, ...edges, ...boxes);
}

function timeline(r, status, base, act) {
  const t0 = r.run.created_ms;
  const perNode = {};
  for (const e of r.events) if (e.node) (perNode[e.node] ||= []).push(e);
  const rows = Object.entries(r.state.nodes).map(([id, n]) => {
    const evs = (perNode[id] || []).map((e) => {
      let what = e.event.replace(/^node_/, "");
      if (e.attempt) what += ` #${e.attempt}`;
      if (e.error) what += `: ${e.error}`;
      if (e.reason) what += `: ${e.reason}`;
      if (e.delay_ms) what += ` (retry in ${e.delay_ms} ms)`;
      if (e.output && e.output.artifact) what += ` → artifact ${e.output.artifact.id} (${e.output.artifact.bytes} B)`;
      return h("div", { class: "sub" }, `+${e.at_ms - t0} ms ${what}`);
    });
    const took = n.started_ms && n.finished_ms ? `${n.finished_ms - n.started_ms} ms` : "";
    const buttons = [];
    if (n.status === "BLOCKED") {
      buttons.push(h("button", { type: "button", onclick: () => act(`${base}/nodes/${encodeURIComponent(id)}/rerun`) }, "Rerun"),
        h("button", { type: "button", onclick: () => act(`${base}/nodes/${encodeURIComponent(id)}/skip`) }, "Skip"));
    } else if (status !== "running") {
      buttons.push(h("button", { type: "button", class: "rerun-node", onclick: () => act(`${base}/rerun/${encodeURIComponent(id)}`) }, "Rerun node"));
    }
    return h("tr", { "data-node": id, "data-state": n.status },
      h("td", { class: "nowrap" }, id), h("td", {}, pill(n.status.toLowerCase())), h("td", {}, n.attempts), h("td", {}, took), h("td", {}, evs), h("td", {}, buttons));
  });
  return h("table", { id: "node-timeline" },
    h("thead", {}, h("tr", {}, h("th", {}, "Node"), h("th", {}, "State"), h("th", {}, "Attempts"), h("th", {}, "Took"), h("th", {}, "Events"), h("th", {}))),
    h("tbody", {}, rows));
}

// ---- wiring ------------------------------------------------------------------------------

$("login-form").addEventListener("submit", (e) => {
  e.preventDefault();
  signIn($("token").value);
  $("token").value = "";
});
$("logout").addEventListener("click", () => signOut());
for (const id of ["f-upstream", "f-outcome"]) $(id).addEventListener("change", renderCalls);
$("f-identity").addEventListener("input", renderCalls);
$("f-run-status").addEventListener("change", refreshRuns);

if (sessionStorage.getItem(TOKEN_KEY)) signIn(sessionStorage.getItem(TOKEN_KEY));

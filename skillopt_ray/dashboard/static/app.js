// skillopt-ray dashboard: polls the server's JSON every few seconds and redraws; no build step, no libraries.
"use strict";

const POLL_MS = 2000;
const state = { tab: "watch", runs: [], runId: null, diffStep: null, launchLog: null, schema: null, nightStamp: null, placeholderAsk: 0 };

const $ = (sel) => document.querySelector(sel);
const num = (x, d = 3) => (x === null || x === undefined || x === "" ? "–" : Number(x).toFixed(d));
const int = (x) => (Number.isFinite(Number(x)) ? Number(x) : 0);

// Everything the page shows from run directories is built as elements and text nodes, never parsed as HTML: a run
// folder is anyone's to write, and what its files hold must stay text. el(tag, attrs, ...children): attrs are set
// with setAttribute (`class`, `data-*`, ...), `style` as an object through the CSSOM, `on` as {event: handler};
// children are nodes or strings (text), arrays are flattened, null/false are skipped.
const SVG_NS = "http://www.w3.org/2000/svg";
function build(node, attrs, children) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "style") Object.assign(node.style, v);
    else if (k === "on") for (const [ev, fn] of Object.entries(v)) node.addEventListener(ev, fn);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}
const el = (tag, attrs, ...children) => build(document.createElement(tag), attrs, children);
const svgEl = (tag, attrs, ...children) => build(document.createElementNS(SVG_NS, tag), attrs, children);
const fill = (node, ...children) => { node.replaceChildren(); return build(node, {}, children); };

// The URL's ?token= is kept in this tab's sessionStorage and sent as a header with every call. sessionStorage belongs
// to this origin, port included; a cookie for 127.0.0.1 would go to every port of it, another user's server too.
// The token leaves the URL at once (out of the history and the screen).
const TOKEN_KEY = "skillopt-dashboard-token";
{
  const given = new URLSearchParams(location.search).get("token");
  if (given) sessionStorage.setItem(TOKEN_KEY, given);
  if (given !== null) history.replaceState(null, "", location.pathname);
}
function withToken(opts = {}) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { ...opts, headers: { ...(opts.headers || {}), Authorization: `Bearer ${token}` } } : opts;
}

function authProblem(r, body) {
  if (r.status !== 401) return;
  const el = $("#auth-error");
  el.textContent = body.error || "missing or wrong token: open the URL the dashboard printed (it ends in ?token=...)";
  el.classList.remove("hidden");
}

async function getJSON(url, opts) {
  const r = await fetch(url, withToken(opts));
  const body = await r.json().catch(() => ({}));
  authProblem(r, body);
  if (!r.ok) throw new Error(body.error || `HTTP ${r.status}`);
  return body;
}
async function getText(url) {
  const r = await fetch(url, withToken());
  if (!r.ok) {
    const body = await r.json().catch(() => ({}));
    authProblem(r, body);
    throw new Error(body.error || `HTTP ${r.status}`);
  }
  return r.text();
}
const postJSON = (url, body) => getJSON(url, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });

// ---------------------------------------------------------------- tabs

function showTab(name) {
  state.tab = name;
  document.querySelectorAll(".tab").forEach((b) => b.classList.toggle("active", b.dataset.tab === name));
  document.querySelectorAll(".view").forEach((v) => v.classList.toggle("active", v.id === `view-${name}`));
  tick();
}
document.querySelectorAll(".tab").forEach((b) => b.addEventListener("click", () => showTab(b.dataset.tab)));

// ---------------------------------------------------------------- charts (SVG)

const COLORS = ["#2563eb", "#16a34a", "#dc2626", "#9333ea", "#f59e0b", "#0891b2", "#db2777", "#65a30d"];

function lineChart(node, series) {
  // series: [{name, color, points: [[x, y|null], ...], dashed}]
  const W = 640, H = 240, L = 40, R = 10, T = 10, B = 28;
  const xs = series.flatMap((s) => s.points.map((p) => int(p[0])));
  const maxX = Math.max(1, ...xs);
  const sx = (x) => L + (int(x) / maxX) * (W - L - R);
  const sy = (y) => T + (1 - Number(y)) * (H - T - B);
  const grey = { "font-size": 10, fill: "#6b7385" };
  const svg = svgEl("svg", { viewBox: `0 0 ${W} ${H}` });
  for (const y of [0, 0.25, 0.5, 0.75, 1]) {
    svg.append(svgEl("line", { x1: L, x2: W - R, y1: sy(y), y2: sy(y), stroke: "#e5e7eb" }));
    svg.append(svgEl("text", { x: L - 6, y: sy(y) + 4, "text-anchor": "end", ...grey }, String(y)));
  }
  for (let x = 0; x <= maxX; x += Math.max(1, Math.ceil(maxX / 10))) {
    svg.append(svgEl("text", { x: sx(x), y: H - 10, "text-anchor": "middle", ...grey }, String(x)));
  }
  svg.append(svgEl("text", { x: W - R, y: H, "text-anchor": "end", ...grey }, "step"));
  for (const s of series) {
    const pts = s.points.filter((p) => p[1] !== null && p[1] !== undefined && Number.isFinite(Number(p[1])));
    if (!pts.length) continue;
    const d = pts.map((p, i) => `${i ? "L" : "M"}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join(" ");
    const dash = s.dash || (s.dashed ? "5 4" : "");
    if (!s.dotsOnly) svg.append(svgEl("path", { d, fill: "none", stroke: s.color, "stroke-width": s.width || 2, "stroke-dasharray": dash || null }));
    for (const p of pts) {
      svg.append(svgEl("circle", { cx: sx(p[0]), cy: sy(p[1]), r: 3, fill: s.color }, svgEl("title", {}, `${s.name} step ${p[0]}: ${num(p[1])}`)));
    }
  }
  fill(node, svg);
}

function diffNodes(text) {
  if (!text) return [el("span", { class: "muted" }, "(no differences)")];
  let inCode = false; // inside a ``` block of the skill: those lines are code, shown as such
  return text.split("\n").map((line) => {
    const body = /^[ +-]/.test(line) && !/^(\+\+\+|---)/.test(line) ? line.slice(1) : null;
    const fence = body !== null && body.trimStart().startsWith("```");
    const code = inCode || fence;
    if (fence) inCode = !inCode;
    let cls = line.startsWith("+") && !line.startsWith("+++") ? "add" : line.startsWith("-") && !line.startsWith("---") ? "del" : line.startsWith("@@") ? "hunk" : "";
    if (code) cls += fence ? " code fence" : " code";
    return el("span", { class: cls }, line);
  }).flatMap((span, i) => (i ? ["\n", span] : [span]));
}

// ---------------------------------------------------------------- watch

function stageKey(stage) {
  stage = String(stage || "");
  if (stage.startsWith("validate")) return "gate";
  if (stage.startsWith("slow_update")) return "slow_update";
  if (stage.startsWith("meta_skill")) return "meta_skill";
  if (stage.startsWith("eval") || stage.startsWith("final")) return "final";
  return stage.split(":")[0];
}

// Which box is current: a step's stages only while a step runs; the initial skill's evaluation (before the first
// step), the epoch boundary and the final evaluation have their own; nothing once the run is done.
function currentStage(live) {
  const phase = live.phase || "";
  const stage = stageKey(live.stage);
  if (phase === "train") return detailStages.includes(stage) ? stage : "";
  if (phase === "epoch_boundary") return stage === "meta_skill" ? "meta_skill" : "slow_update";
  if (phase === "final" || phase === "eval") return "final";
  if (phase === "done") return "";
  return String(live.stage || "").startsWith("validate") ? "initial" : "";
}
const detailStages = ["rollout", "reflect", "aggregate", "select", "update", "gate"];

function drawStrip(detail) {
  const live = detail.live || {};
  const current = currentStage(live);
  const running = detail.row.status === "running";
  const label = (name) => (name === "initial" ? "initial eval" : String(name).replace("_", " "));
  const box = (name, extra) => el("span", { class: `stage ${extra ? "extra" : ""} ${running && current === name ? "current" : ""}`, "data-stage": name }, label(name));
  const arrow = (text) => el("span", { class: "stage arrow" }, text);
  const extras = detail.extra_stages.filter((s) => s !== "initial");
  const parts = [];
  if (detail.extra_stages.includes("initial")) parts.push(box("initial", true), arrow("·"));
  detail.stages.forEach((s, i) => parts.push(...(i ? [arrow("→")] : []), box(s, false)));
  parts.push(arrow("·"), extras.flatMap((s, i) => (i ? [" ", box(s, true)] : [box(s, true)])));
  fill($("#strip"), parts);
}

function drawProgress(detail) {
  const live = detail.live || {};
  const parts = [];
  const running = detail.row.status === "running";
  const kv = (attrs, ...items) => el("span", { class: "kv", ...attrs }, items);
  const bar = (done, total) => el("span", { class: "bar" }, el("div", { style: { width: `${Math.round((100 * int(done)) / int(total))}%` } }));
  if (detail.row.status === "stopped") {
    parts.push(el("div", { class: "muted resume-hint" }, "stopped: press Resume on the Launch tab, or rerun the same command, to resume from the last completed stage"));
  }
  // a run that is not running shows its last record as such, without an ETA
  parts.push(kv({}, el("b", {}, running ? "phase" : "last phase"), " ", live.phase || detail.row.status));
  if (live.stage) parts.push(kv({ id: "live-stage" }, el("b", {}, "stage"), " ", live.stage));
  if (live.epoch) parts.push(kv({}, el("b", {}, "epoch"), ` ${live.epoch}/${live.epochs || "?"}`));
  if (live.global_step !== undefined) parts.push(kv({}, el("b", {}, "step"), ` ${live.global_step}/${live.total_steps || "?"}`));
  if (live.total) parts.push(kv({}, el("b", {}, "episodes"), ` ${live.done || 0}/${live.total} `, bar(live.done, live.total)));
  if (live.run_total) parts.push(kv({}, el("b", {}, "run"), ` ${live.run_done || 0}/${live.run_total} episodes `, bar(live.run_done, live.run_total)));
  if (running && live.eta_s !== undefined && live.eta_s !== null) parts.push(kv({}, el("b", {}, "ETA"), " ", fmtDuration(live.eta_s)));
  parts.push(kv({}, el("b", {}, "accepted"), ` ${live.accept ?? count(detail, "accept")} `, el("b", {}, "rejected"), ` ${live.reject ?? count(detail, "reject")} `,
    el("b", {}, "skipped"), ` ${live.skip ?? count(detail, "skip")}`));
  fill($("#progress"), parts);
}

function count(detail, kind) {
  return detail.steps.filter((s) => String(s.action).startsWith(kind)).length;
}

function fmtDuration(s) {
  s = Math.max(0, Math.round(Number(s)));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
}

// the paired gate's test in one line: the per-task difference, its interval, p and the verdict
function pairedText(t) {
  const level = Math.round(100 * Number(t.level || 0));
  return `${t.test} (alpha ${t.alpha}): difference ${num(t.mean_diff, 4)} [${num(t.lo, 4)}, ${num(t.hi, 4)}] (${level}%) over ${t.n} tasks, p=${num(t.p_value, 4)}: ${t.significant ? "significant" : "not significant"}`;
}

function drawSteps(detail) {
  const rows = detail.steps.map((s) => {
    const flipped = [
      ...(s.flipped.to_pass || []).map((t) => `+${t}`),
      ...(s.flipped.to_fail || []).map((t) => `−${t}`),
    ].join(" ");
    const edits = s.edits && s.edits.total !== undefined ? `${s.edits.applied}/${s.edits.total} applied` : "";
    const test = s.gate_test ? [el("br"), el("span", { class: "muted paired-test" }, pairedText(s.gate_test))] : null;
    return el("tr", { class: `clickable ${state.diffStep === s.id ? "selected" : ""}`, "data-step": s.id, "data-action": s.action, "data-diff": s.has_diff, on: { click: () => openDiff(s.id) } },
      el("td", {}, `e${s.epoch} s${s.step}`), el("td", { class: s.action }, s.action), el("td", {}, s.edit_budget ?? ""), el("td", {}, edits),
      el("td", {}, num(s.candidate)), el("td", {}, num(s.current)), el("td", {}, num(s.best)),
      el("td", { class: "reason" }, s.reason, test), el("td", {}, flipped));
  });
  fill($("#steps tbody"), rows.length ? rows : el("tr", {}, el("td", { colspan: 9, class: "muted" }, "no step yet")));
}

async function openDiff(step) {
  state.diffStep = step;
  const text = await getText(`/api/diff?id=${encodeURIComponent(state.runId)}&step=${encodeURIComponent(step)}`).catch((e) => `(${e.message})`);
  const pre = $("#diff");
  pre.classList.remove("hidden");
  fill(pre, el("b", {}, `diff of step ${step}`), "\n", diffNodes(text));
  document.querySelectorAll("#steps tbody tr").forEach((tr) => tr.classList.toggle("selected", tr.dataset.step === step));
}

function drawEpochs(detail) {
  const blocks = detail.epochs.filter((e) => e.slow_update || e.meta_skill || e.slow_action).map((e) => el("div", { class: "epoch" },
    el("b", {}, `epoch ${e.epoch}`),
    e.slow_update || e.slow_action ? el("div", {}, el("b", {}, "slow update"), " ", el("span", { class: e.slow_action }, e.slow_action), " ",
      el("span", { class: "muted" }, e.slow_reason), el("pre", {}, e.slow_update)) : null,
    e.meta_skill ? el("div", {}, el("b", {}, "meta skill"), " ", el("span", { class: "muted" }, e.meta_action), el("pre", {}, e.meta_skill)) : null));
  fill($("#epochs"), blocks.length ? blocks.flatMap((b, i) => (i ? [el("hr"), b] : [b])) : el("span", { class: "muted" }, "no epoch boundary yet"));
}

function drawCosts(detail) {
  const c = detail.costs, t = c.totals || {}, b = c.budget || {};
  const tokens = int(t.prompt_tokens) + int(t.completion_tokens);
  const cap = (v) => (!v ? "no cap" : `cap ${v}`);
  const parts = [el("div", {}, el("b", {}, tokens.toLocaleString()), ` tokens (${cap(b.max_tokens)}) · `, el("b", {}, String(t.calls || 0)),
    ` calls (${cap(b.max_calls)}) · `, el("b", {}, `$${num(t.cost_usd || 0, 4)}`), ` (${cap(b.max_cost_usd)})`)];
  const rows = Object.entries(c.entries || {}).map(([k, e]) => el("tr", {}, el("td", {}, k), el("td", {}, e.calls),
    el("td", {}, (int(e.prompt_tokens) + int(e.completion_tokens)).toLocaleString()), el("td", {}, num(e.cost_usd, 4))));
  if (rows.length) {
    const head = el("tr", {}, ["role/stage", "calls", "tokens", "$"].map((h) => el("th", {}, h)));
    parts.push(el("table", {}, el("thead", {}, head), el("tbody", {}, rows)));
  }
  fill($("#costs"), parts);
  const infra = Object.entries(detail.errors.infra || {}).map(([k, n]) => `${k}: ${n}`).join(", ");
  fill($("#errors"), `infra: ${infra || "none"} · data errors: ${detail.errors.data || 0}`);
}

async function refreshWatch() {
  if (!state.runId) return;
  let detail;
  try {
    detail = await getJSON(`/api/run?id=${encodeURIComponent(state.runId)}`);
  } catch (e) {
    $("#run-status").textContent = e.message;
    return;
  }
  $("#run-status").textContent = detail.row.status;
  $("#run-status").className = `badge ${detail.row.status}`;
  $("#updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  drawStrip(detail);
  drawProgress(detail);
  const pts = (k) => detail.curve.map((p) => [p.step, p[k]]);
  lineChart($("#score-chart"), [
    { name: "current", color: "#2563eb", points: pts("current") },
    { name: "candidate", color: "#f59e0b", points: pts("candidate"), dotsOnly: true },
    { name: "best", color: "#16a34a", points: pts("best"), dashed: true },
  ]);
  drawSteps(detail);
  drawEpochs(detail);
  drawCosts(detail);
  $("#skill-version").textContent = detail.skill.version === null ? "" : `(v${String(detail.skill.version).padStart(4, "0")})`;
  $("#skill").textContent = detail.skill.text;
}

// ---------------------------------------------------------------- runs list and compare

async function refreshRuns() {
  const data = await getJSON("/api/runs").catch(() => null);
  if (!data) return;
  $("#outputs").textContent = `runs under ${data.outputs}`;
  state.runs = data.runs;
  const sel = $("#run-select");
  const ids = data.runs.map((r) => r.id);
  if (sel.dataset.ids !== ids.join("|")) {
    fill(sel, data.runs.map((r) => el("option", { value: r.id }, r.id)));
    sel.dataset.ids = ids.join("|");
  }
  if (!state.runId || !ids.includes(state.runId)) state.runId = ids[ids.length - 1] || null;
  if (state.runId) sel.value = state.runId;
  const key = JSON.stringify(data.runs);
  if (key === state.runsKey) return; // redraw only what changed, so ticks and clicks are not lost
  state.runsKey = key;
  const checked = new Set([...document.querySelectorAll("#runs input:checked")].map((c) => c.value));
  const watch = (id) => (ev) => {
    ev.preventDefault();
    state.runId = id;
    showTab("watch");
  };
  const rows = data.runs.map((r) => el("tr", {},
    el("td", {}, el("input", { type: "checkbox", value: r.id, checked: checked.has(r.id) })),
    el("td", {}, el("a", { href: "#", "data-watch": r.id, on: { click: watch(r.id) } }, r.id),
      r.sweep ? [" ", el("span", { class: "badge trial", title: `a trial of sweep ${r.sweep}` }, `sweep ${r.sweep} · trial ${r.trial || "?"}`)] : null),
    el("td", {}, r.experiment),
    el("td", {}, Object.entries(r.swept || {}).map(([k, v]) => `${k}=${v}`).join(" ")), el("td", {}, r.seed ?? ""),
    el("td", {}, el("span", { class: `badge ${r.status}` }, r.status)), el("td", {}, r.steps),
    el("td", {}, num(r.best_selection)), el("td", {}, num(r.test_initial)), el("td", {}, num(r.test_best)), el("td", {}, num(r.test_final)),
    el("td", {}, int(r.tokens).toLocaleString()), el("td", {}, num(r.cost_usd, 4))));
  fill($("#runs tbody"), rows.length ? rows : el("tr", {}, el("td", { colspan: 13, class: "muted" }, "no runs under the output folder yet")));
}

function checkedRuns() {
  return [...document.querySelectorAll("#runs input:checked")].map((c) => c.value);
}

$("#plot-curves").addEventListener("click", async () => {
  const ids = checkedRuns();
  if (!ids.length) return;
  const data = await getJSON(`/api/compare?ids=${ids.map(encodeURIComponent).join(",")}`);
  const series = ids.map((id, i) => ({ name: id, color: COLORS[i % COLORS.length], points: data.curves[id].map((p) => [p.step, p.best]) }));
  const notes = markIdentical(series);
  lineChart($("#compare-chart"), series);
  fill($("#compare-legend"), series.map((s) => el("span", { style: { color: s.color } }, s.name)),
    notes.map((n) => el("div", { class: "muted identical" }, n)));
});

// Curves with the same points would hide each other: each copy gets its own dash pattern (the first is drawn
// widest, underneath), and the legend says which ones are identical.
function markIdentical(series) {
  const DASHES = ["", "8 5", "2 4", "12 4 2 4", "4 8"];
  const groups = new Map();
  for (const s of series) {
    const key = JSON.stringify(s.points);
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(s);
  }
  const notes = [];
  for (const same of groups.values()) {
    if (same.length < 2) continue;
    same.forEach((s, i) => { s.dash = DASHES[i % DASHES.length]; s.width = i === 0 ? 4 : 2; });
    notes.push(`${same.length} curves identical: ${same.map((s) => s.name).join(", ")}`);
  }
  return notes;
}

$("#diff-skills").addEventListener("click", async () => {
  const ids = checkedRuns();
  if (ids.length !== 2) {
    $("#skill-diff").textContent = "tick exactly two runs";
    return;
  }
  const text = await getText(`/api/skill_diff?a=${encodeURIComponent(ids[0])}&b=${encodeURIComponent(ids[1])}`).catch((e) => `(${e.message})`);
  fill($("#skill-diff"), diffNodes(text));
});

$("#run-select").addEventListener("change", (ev) => {
  state.runId = ev.target.value;
  state.diffStep = null;
  $("#diff").classList.add("hidden");
  refreshWatch();
});

// ---------------------------------------------------------------- launch

const LABELS = {
  experiment: "experiment", llm: "llm preset", target_model: "target model", optimizer_model: "optimizer model",
  base_url: "endpoint (llm.base_url)", learning_rate: "learning rate (edits/step)", min_learning_rate: "min learning rate",
  lr_schedule: "schedule", epochs: "epochs", batch_size: "batch size", gate_metric: "gate metric",
  slow_update: "slow update", meta_skill: "meta skill", seed: "seed", smoke: "size preset (+smoke)", extra: "extra overrides (key=value ...)",
};

function presetQuery() {
  const pick = (n) => ($(`#launch-form select[name=${n}]`) || {}).value || "";
  return new URLSearchParams({ experiment: pick("experiment"), smoke: pick("smoke"), llm: pick("llm") }).toString();
}

// What an empty field means depends on the presets chosen: ask the server for their composed values. Each change
// asks again, and answers can come back in any order: only the answer to the latest ask is shown.
async function refreshPlaceholders() {
  const ask = ++state.placeholderAsk;
  let schema;
  try {
    schema = await getJSON(`/api/schema?${presetQuery()}`);
  } catch (e) {
    if (ask === state.placeholderAsk) $("#launch-error").textContent = e.message;
    return;
  }
  if (ask !== state.placeholderAsk) return;
  for (const [name, f] of Object.entries(schema)) {
    const el = $(`#launch-form [name=${name}]`);
    if (!el || ["experiment", "smoke", "llm"].includes(name)) continue;
    if (el.tagName === "INPUT") el.placeholder = String(f.placeholder ?? "");
    else if (el.options.length && el.options[0].value === "") {
      el.options[0].textContent = f.kind === "bool" ? `(preset: ${f.placeholder ? "on" : "off"})` : `(preset: ${f.placeholder})`;
    }
  }
}

async function buildForm() {
  // Empty fields keep the config's value (shown as the placeholder); only filled ones become overrides.
  const schema = await getJSON("/api/schema");
  state.schema = schema;
  const form = $("#launch-form");
  fill(form, Object.entries(schema).map(([name, f]) => {
    const label = LABELS[name] || name;
    if (f.kind === "bool") {
      return el("label", {}, label, el("select", { name }, el("option", { value: "" }, `(preset: ${f.placeholder ? "on" : "off"})`),
        el("option", { value: "true" }, "on"), el("option", { value: "false" }, "off")));
    }
    if (f.choices) {
      const first = f.required ? null : el("option", { value: "" }, `(preset: ${f.placeholder})`);
      const opts = f.choices.map((c) => el("option", { value: c, selected: f.required && c === f.placeholder }, c));
      return el("label", {}, label, el("select", { name }, first, opts));
    }
    const type = f.kind === "int" ? "number" : "text";
    return el("label", { class: name === "extra" ? "wide" : null }, label, el("input", { type, name, placeholder: f.placeholder }));
  }));
  for (const n of ["experiment", "smoke", "llm"]) form.querySelector(`select[name=${n}]`).addEventListener("change", refreshPlaceholders);
  refreshPlaceholders();
}

function formData() {
  const out = {};
  for (const el of $("#launch-form").elements) {
    if (!el.name) continue;
    out[el.name] = el.value;
  }
  return out;
}

async function submit(path) {
  $("#launch-error").textContent = "";
  try {
    const res = await postJSON(path, formData());
    $("#command").textContent = `$ ${res.command}`;
    if (res.keys) showKeys(res.keys);
    if (path === "/api/launch") {
      state.launchLog = res.id;
      refreshLaunches();
    }
  } catch (e) {
    $("#command").textContent = "";
    $("#launch-error").textContent = e.message;
  }
}
// Which key the run sends where (the form's URLs get no key meant for another host; see --allow-endpoint).
function showKeys(keys) {
  const line = (k) => el("li", {}, el("code", {}, k.key_env), k.set ? " is sent to " : " (not set: nothing sent) would go to ",
    el("b", {}, k.host || "(no host)"), ` (${k.setting})`);
  fill($("#keys"), keys.length ? [el("span", { class: "muted" }, "keys this run sends:"), el("ul", {}, keys.map(line))] : el("span", { class: "muted" }, "this run sends no key"));
}
$("#check").addEventListener("click", () => submit("/api/check"));
$("#launch").addEventListener("click", () => submit("/api/launch"));

async function refreshLaunches() {
  const data = await getJSON("/api/launches").catch(() => null);
  if (!data) return;
  const act = (kind, l) => async (ev) => {
    ev.stopPropagation();
    ev.target.disabled = true;
    const res = await postJSON(`/api/${kind}`, { id: l.id }).catch((e) => ({ error: e.message }));
    if (kind === "resume") {
      if (res.id) state.launchLog = res.id;
      $("#launch-error").textContent = res.error || "";
    }
    tick(); // the badges say "stopping", then "stopped", without waiting for the next poll
  };
  const pick = (l) => () => {
    state.launchLog = l.id;
    refreshLaunches();
  };
  fill($("#launches tbody"), data.launches.map((l) => el("tr", { class: "clickable", "data-launch": l.id, on: { click: pick(l) } },
    el("td", {}, l.id), el("td", {}, el("span", { class: `badge ${l.status}` }, l.status)), el("td", {}, el("code", {}, l.command)),
    el("td", {}, l.status === "running" ? el("button", { "data-stop": l.id, on: { click: act("stop", l) } }, "Stop") : null,
      l.resumable ? el("button", { "data-resume": l.id, on: { click: act("resume", l) } }, "Resume") : null))));
  const shown = data.launches.find((l) => l.id === state.launchLog);
  $("#launch-log").textContent = shown ? shown.log.join("\n") : "";
}

// ---------------------------------------------------------------- nights (read-only)

function interval(s) {
  if (s.mean_diff === undefined || s.mean_diff === null) return "–";
  const sign = (x) => (x === undefined || x === null ? "?" : (Number(x) >= 0 ? "+" : "") + Number(x).toFixed(3));
  return `${sign(s.mean_diff)} [${sign(s.lo)}, ${sign(s.hi)}]`;
}

async function refreshNights() {
  let data;
  try {
    data = await getJSON("/api/nights");
  } catch (e) {
    $("#nights-note").textContent = e.message;
    return;
  }
  $("#nights-project").textContent = data.project ? `(${data.project})` : "(no project: start the dashboard with --project DIR)";
  const rows = data.nights.map((n) => {
    const s = n.summary || {};
    return el("tr", { class: n.stamp === state.nightStamp ? "selected" : null, "data-stamp": n.stamp, on: { click: () => openNight(n.stamp) } },
      el("td", {}, n.stamp), el("td", {}, n.skill || ""), el("td", {}, n.verdict || ""),
      el("td", {}, num(s.before)), el("td", {}, num(s.after)), el("td", {}, interval(s)), el("td", {}, n.state || ""));
  });
  fill($("#nights tbody"), rows);
  const wal = data.interrupted_problem ? `an adoption record that cannot be trusted: ${data.interrupted_problem}`
    : data.interrupted ? `an adoption was interrupted (${data.interrupted}); the next adopt rolls it back` : "";
  $("#nights-note").textContent = data.nights.length ? wal : "no staged nights";
  if (!state.nightStamp && data.nights.length) await openNight(data.nights[data.nights.length - 1].stamp);
}

async function openNight(stamp) {
  state.nightStamp = stamp;
  let n;
  try {
    n = await getJSON(`/api/night?stamp=${encodeURIComponent(stamp)}`);
  } catch (e) {
    if (state.nightStamp !== stamp) return;
    // a night the server could not answer: its own stamp and why, never the previous night's header and diff
    $("#night-stamp").textContent = `${stamp}: unreadable`;
    $("#night-report").textContent = e.message;
    fill($("#night-diffs"));
    document.querySelectorAll("#nights tbody tr").forEach((r) => r.classList.toggle("selected", r.dataset.stamp === stamp));
    return;
  }
  if (state.nightStamp !== stamp) return; // another night was picked while this one loaded: show that one only
  // a night whose manifest cannot be trusted has no verdict: its state says why, in one line
  $("#night-stamp").textContent = `${n.stamp}: ${[n.verdict, n.state].filter(Boolean).join(", ")}`;
  $("#night-report").textContent = n.report_md; // model-written: text, never HTML
  fill($("#night-diffs"), n.diffs.map((d) => [
    el("div", { class: "muted" }, `${d.rel} -> ${d.live_path} (against: ${d.base})`),
    el("pre", { class: "diff" }, diffNodes(d.diff)),
  ]));
  document.querySelectorAll("#nights tbody tr").forEach((r) => r.classList.toggle("selected", r.dataset.stamp === stamp));
}

// ---------------------------------------------------------------- polling

async function tick() {
  await refreshRuns();
  if (state.tab === "watch") await refreshWatch();
  if (state.tab === "launch") await refreshLaunches();
  if (state.tab === "nights") await refreshNights();
}

buildForm();
tick();
setInterval(tick, POLL_MS);

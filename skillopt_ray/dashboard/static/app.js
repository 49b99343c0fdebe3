// skillopt-ray dashboard: polls the server's JSON every few seconds and redraws; no build step, no libraries.
"use strict";

const POLL_MS = 2000;
const state = { tab: "watch", runs: [], runId: null, diffStep: null, launchLog: null, schema: null };

const $ = (sel) => document.querySelector(sel);
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
const num = (x, d = 3) => (x === null || x === undefined || x === "" ? "–" : Number(x).toFixed(d));

// The URL's ?token= set an HttpOnly cookie when the page loaded; keep the token out of the history and the screen.
if (new URLSearchParams(location.search).has("token")) history.replaceState(null, "", location.pathname);

function authProblem(r, body) {
  if (r.status !== 401) return;
  const el = $("#auth-error");
  el.textContent = body.error || "missing or wrong token: open the URL the dashboard printed (it ends in ?token=...)";
  el.classList.remove("hidden");
}

async function getJSON(url, opts) {
  const r = await fetch(url, opts);
  const body = await r.json().catch(() => ({}));
  authProblem(r, body);
  if (!r.ok) throw new Error(body.error || `HTTP ${r.status}`);
  return body;
}
async function getText(url) {
  const r = await fetch(url);
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

function lineChart(el, series) {
  // series: [{name, color, points: [[x, y|null], ...], dashed}]
  const W = 640, H = 240, L = 40, R = 10, T = 10, B = 28;
  const xs = series.flatMap((s) => s.points.map((p) => p[0]));
  const maxX = Math.max(1, ...xs);
  const sx = (x) => L + (x / maxX) * (W - L - R);
  const sy = (y) => T + (1 - y) * (H - T - B);
  let svg = `<svg viewBox="0 0 ${W} ${H}" xmlns="http://www.w3.org/2000/svg">`;
  for (const y of [0, 0.25, 0.5, 0.75, 1]) {
    svg += `<line x1="${L}" x2="${W - R}" y1="${sy(y)}" y2="${sy(y)}" stroke="#e5e7eb"/>`;
    svg += `<text x="${L - 6}" y="${sy(y) + 4}" font-size="10" text-anchor="end" fill="#6b7385">${y}</text>`;
  }
  for (let x = 0; x <= maxX; x += Math.max(1, Math.ceil(maxX / 10))) {
    svg += `<text x="${sx(x)}" y="${H - 10}" font-size="10" text-anchor="middle" fill="#6b7385">${x}</text>`;
  }
  svg += `<text x="${W - R}" y="${H - 0}" font-size="10" text-anchor="end" fill="#6b7385">step</text>`;
  for (const s of series) {
    const pts = s.points.filter((p) => p[1] !== null && p[1] !== undefined);
    if (!pts.length) continue;
    const d = pts.map((p, i) => `${i ? "L" : "M"}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join(" ");
    const dash = s.dash || (s.dashed ? "5 4" : "");
    if (!s.dotsOnly) svg += `<path d="${d}" fill="none" stroke="${s.color}" stroke-width="${s.width || 2}" ${dash ? `stroke-dasharray="${dash}"` : ""}/>`;
    for (const p of pts) svg += `<circle cx="${sx(p[0])}" cy="${sy(p[1])}" r="3" fill="${s.color}"><title>${esc(s.name)} step ${p[0]}: ${num(p[1])}</title></circle>`;
  }
  el.innerHTML = svg + "</svg>";
}

function diffHtml(text) {
  if (!text) return '<span class="muted">(no differences)</span>';
  let inCode = false; // inside a ``` block of the skill: those lines are code, shown as such
  return text.split("\n").map((line) => {
    const body = /^[ +-]/.test(line) && !/^(\+\+\+|---)/.test(line) ? line.slice(1) : null;
    const fence = body !== null && body.trimStart().startsWith("```");
    const code = inCode || fence;
    if (fence) inCode = !inCode;
    let cls = line.startsWith("+") && !line.startsWith("+++") ? "add" : line.startsWith("-") && !line.startsWith("---") ? "del" : line.startsWith("@@") ? "hunk" : "";
    if (code) cls += fence ? " code fence" : " code";
    return `<span class="${cls}">${esc(line)}</span>`;
  }).join("\n");
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
  const label = (name) => (name === "initial" ? "initial eval" : name.replace("_", " "));
  const box = (name, extra) => `<span class="stage ${extra ? "extra" : ""} ${running && current === name ? "current" : ""}" data-stage="${name}">${esc(label(name))}</span>`;
  const extras = detail.extra_stages.filter((s) => s !== "initial");
  let html = "";
  if (detail.extra_stages.includes("initial")) html += box("initial", true) + '<span class="stage arrow">·</span>';
  html += detail.stages.map((s) => box(s, false)).join('<span class="stage arrow">→</span>');
  html += '<span class="stage arrow">·</span>' + extras.map((s) => box(s, true)).join(" ");
  $("#strip").innerHTML = html;
}

function drawProgress(detail) {
  const live = detail.live || {};
  const parts = [];
  const running = detail.row.status === "running";
  if (detail.row.status === "stopped") {
    parts.push('<div class="muted resume-hint">stopped: press Resume on the Launch tab, or rerun the same command, to resume from the last completed stage</div>');
  }
  // a run that is not running shows its last record as such, without an ETA
  parts.push(`<span class="kv"><b>${running ? "phase" : "last phase"}</b> ${esc(live.phase || detail.row.status)}</span>`);
  if (live.stage) parts.push(`<span class="kv" id="live-stage"><b>stage</b> ${esc(live.stage)}</span>`);
  if (live.epoch) parts.push(`<span class="kv"><b>epoch</b> ${esc(live.epoch)}/${esc(live.epochs || "?")}</span>`);
  if (live.global_step !== undefined) parts.push(`<span class="kv"><b>step</b> ${esc(live.global_step)}/${esc(live.total_steps || "?")}</span>`);
  if (live.total) {
    const pct = Math.round((100 * (live.done || 0)) / live.total);
    parts.push(`<span class="kv"><b>episodes</b> ${esc(live.done || 0)}/${esc(live.total)} <span class="bar"><div style="width:${pct}%"></div></span></span>`);
  }
  if (live.run_total) {
    const pct = Math.round((100 * (live.run_done || 0)) / live.run_total);
    parts.push(`<span class="kv"><b>run</b> ${esc(live.run_done || 0)}/${esc(live.run_total)} episodes <span class="bar"><div style="width:${pct}%"></div></span></span>`);
  }
  if (running && live.eta_s !== undefined && live.eta_s !== null) parts.push(`<span class="kv"><b>ETA</b> ${fmtDuration(live.eta_s)}</span>`);
  parts.push(`<span class="kv"><b>accepted</b> ${esc(live.accept ?? count(detail, "accept"))} <b>rejected</b> ${esc(live.reject ?? count(detail, "reject"))} <b>skipped</b> ${esc(live.skip ?? count(detail, "skip"))}</span>`);
  $("#progress").innerHTML = parts.join("");
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
    const test = s.gate_test ? `<br><span class="muted paired-test">${esc(pairedText(s.gate_test))}</span>` : "";
    return `<tr class="clickable ${state.diffStep === s.id ? "selected" : ""}" data-step="${esc(s.id)}" data-action="${esc(s.action)}" data-diff="${s.has_diff}">
      <td>e${s.epoch} s${s.step}</td><td class="${esc(s.action)}">${esc(s.action)}</td><td>${esc(s.edit_budget ?? "")}</td><td>${esc(edits)}</td>
      <td>${num(s.candidate)}</td><td>${num(s.current)}</td><td>${num(s.best)}</td>
      <td class="reason">${esc(s.reason)}${test}</td><td>${esc(flipped)}</td></tr>`;
  });
  $("#steps tbody").innerHTML = rows.join("") || '<tr><td colspan="9" class="muted">no step yet</td></tr>';
  document.querySelectorAll("#steps tbody tr.clickable").forEach((tr) => tr.addEventListener("click", () => openDiff(tr.dataset.step)));
}

async function openDiff(step) {
  state.diffStep = step;
  const text = await getText(`/api/diff?id=${encodeURIComponent(state.runId)}&step=${encodeURIComponent(step)}`).catch((e) => `(${e.message})`);
  const pre = $("#diff");
  pre.classList.remove("hidden");
  pre.innerHTML = `<b>diff of step ${esc(step)}</b>\n` + diffHtml(text);
  document.querySelectorAll("#steps tbody tr").forEach((tr) => tr.classList.toggle("selected", tr.dataset.step === step));
}

function drawEpochs(detail) {
  const blocks = detail.epochs.filter((e) => e.slow_update || e.meta_skill || e.slow_action).map((e) => `
    <div class="epoch"><b>epoch ${e.epoch}</b>
      ${e.slow_update || e.slow_action ? `<div><b>slow update</b> <span class="${esc(e.slow_action)}">${esc(e.slow_action)}</span> <span class="muted">${esc(e.slow_reason)}</span><pre>${esc(e.slow_update)}</pre></div>` : ""}
      ${e.meta_skill ? `<div><b>meta skill</b> <span class="muted">${esc(e.meta_action)}</span><pre>${esc(e.meta_skill)}</pre></div>` : ""}
    </div>`);
  $("#epochs").innerHTML = blocks.join("<hr>") || '<span class="muted">no epoch boundary yet</span>';
}

function drawCosts(detail) {
  const c = detail.costs, t = c.totals || {}, b = c.budget || {};
  const tokens = (t.prompt_tokens || 0) + (t.completion_tokens || 0);
  const cap = (v) => (!v ? "no cap" : `cap ${v}`);
  let html = `<div><b>${tokens.toLocaleString()}</b> tokens (${cap(b.max_tokens)}) · <b>${t.calls || 0}</b> calls (${cap(b.max_calls)}) · <b>$${num(t.cost_usd || 0, 4)}</b> (${cap(b.max_cost_usd)})</div>`;
  const rows = Object.entries(c.entries || {}).map(([k, e]) => `<tr><td>${esc(k)}</td><td>${e.calls}</td><td>${(e.prompt_tokens + e.completion_tokens).toLocaleString()}</td><td>${num(e.cost_usd, 4)}</td></tr>`);
  if (rows.length) html += `<table><thead><tr><th>role/stage</th><th>calls</th><th>tokens</th><th>$</th></tr></thead><tbody>${rows.join("")}</tbody></table>`;
  $("#costs").innerHTML = html;
  const infra = Object.entries(detail.errors.infra || {}).map(([k, n]) => `${esc(k)}: ${n}`).join(", ");
  $("#errors").innerHTML = `infra: ${infra || "none"} · data errors: ${detail.errors.data || 0}`;
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
    sel.innerHTML = data.runs.map((r) => `<option value="${esc(r.id)}">${esc(r.id)}</option>`).join("");
    sel.dataset.ids = ids.join("|");
  }
  if (!state.runId || !ids.includes(state.runId)) state.runId = ids[ids.length - 1] || null;
  if (state.runId) sel.value = state.runId;
  const key = JSON.stringify(data.runs);
  if (key === state.runsKey) return; // redraw only what changed, so ticks and clicks are not lost
  state.runsKey = key;
  const checked = new Set([...document.querySelectorAll("#runs input:checked")].map((c) => c.value));
  $("#runs tbody").innerHTML = data.runs.map((r) => `<tr>
      <td><input type="checkbox" value="${esc(r.id)}" ${checked.has(r.id) ? "checked" : ""}></td>
      <td><a href="#" data-watch="${esc(r.id)}">${esc(r.id)}</a>${r.sweep ? ` <span class="badge trial" title="a trial of sweep ${esc(r.sweep)}">sweep ${esc(r.sweep)} · trial ${esc(r.trial || "?")}</span>` : ""}</td><td>${esc(r.experiment)}</td>
      <td>${esc(Object.entries(r.swept).map(([k, v]) => `${k}=${v}`).join(" "))}</td><td>${esc(r.seed)}</td>
      <td><span class="badge ${esc(r.status)}">${esc(r.status)}</span></td><td>${r.steps}</td>
      <td>${num(r.best_selection)}</td><td>${num(r.test_initial)}</td><td>${num(r.test_best)}</td><td>${num(r.test_final)}</td>
      <td>${r.tokens.toLocaleString()}</td><td>${num(r.cost_usd, 4)}</td></tr>`).join("") || '<tr><td colspan="13" class="muted">no runs under the output folder yet</td></tr>';
  document.querySelectorAll("#runs a[data-watch]").forEach((a) => a.addEventListener("click", (ev) => {
    ev.preventDefault();
    state.runId = a.dataset.watch;
    showTab("watch");
  }));
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
  $("#compare-legend").innerHTML = series.map((s) => `<span style="color:${s.color}">${esc(s.name)}</span>`).join("") +
    notes.map((n) => `<div class="muted identical">${esc(n)}</div>`).join("");
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
  $("#skill-diff").innerHTML = diffHtml(text);
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

// What an empty field means depends on the presets chosen: ask the server for their composed values.
async function refreshPlaceholders() {
  let schema;
  try {
    schema = await getJSON(`/api/schema?${presetQuery()}`);
  } catch (e) {
    $("#launch-error").textContent = e.message;
    return;
  }
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
  form.innerHTML = Object.entries(schema).map(([name, f]) => {
    const label = LABELS[name] || name;
    if (f.kind === "bool") {
      return `<label>${esc(label)}<select name="${name}"><option value="">(preset: ${f.placeholder ? "on" : "off"})</option><option value="true">on</option><option value="false">off</option></select></label>`;
    }
    if (f.choices) {
      const first = f.required ? "" : `<option value="">(preset: ${esc(f.placeholder)})</option>`;
      const opts = f.choices.map((c) => `<option value="${esc(c)}" ${f.required && c === f.placeholder ? "selected" : ""}>${esc(c)}</option>`).join("");
      return `<label>${esc(label)}<select name="${name}">${first}${opts}</select></label>`;
    }
    const type = f.kind === "int" ? "number" : "text";
    return `<label class="${name === "extra" ? "wide" : ""}">${esc(label)}<input type="${type}" name="${name}" placeholder="${esc(f.placeholder)}"></label>`;
  }).join("");
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
    if (path === "/api/launch") {
      state.launchLog = res.id;
      refreshLaunches();
    }
  } catch (e) {
    $("#command").textContent = "";
    $("#launch-error").textContent = e.message;
  }
}
$("#check").addEventListener("click", () => submit("/api/check"));
$("#launch").addEventListener("click", () => submit("/api/launch"));

async function refreshLaunches() {
  const data = await getJSON("/api/launches").catch(() => null);
  if (!data) return;
  $("#launches tbody").innerHTML = data.launches.map((l) => `<tr class="clickable" data-launch="${esc(l.id)}">
      <td>${esc(l.id)}</td><td><span class="badge ${esc(l.status)}">${esc(l.status)}</span></td><td><code>${esc(l.command)}</code></td>
      <td>${l.status === "running" ? `<button data-stop="${esc(l.id)}">Stop</button>` : ""}${l.resumable ? `<button data-resume="${esc(l.id)}">Resume</button>` : ""}</td></tr>`).join("");
  document.querySelectorAll("#launches button[data-stop]").forEach((b) => b.addEventListener("click", async (ev) => {
    ev.stopPropagation();
    b.disabled = true;
    await postJSON("/api/stop", { id: b.dataset.stop }).catch(() => null);
    tick(); // the badges say "stopping", then "stopped", without waiting for the next poll
  }));
  document.querySelectorAll("#launches button[data-resume]").forEach((b) => b.addEventListener("click", async (ev) => {
    ev.stopPropagation();
    b.disabled = true;
    const res = await postJSON("/api/resume", { id: b.dataset.resume }).catch((e) => ({ error: e.message }));
    if (res.id) state.launchLog = res.id;
    $("#launch-error").textContent = res.error || "";
    tick();
  }));
  document.querySelectorAll("#launches tr[data-launch]").forEach((tr) => tr.addEventListener("click", () => {
    state.launchLog = tr.dataset.launch;
    refreshLaunches();
  }));
  const shown = data.launches.find((l) => l.id === state.launchLog);
  $("#launch-log").textContent = shown ? shown.log.join("\n") : "";
}

// ---------------------------------------------------------------- polling

async function tick() {
  await refreshRuns();
  if (state.tab === "watch") await refreshWatch();
  if (state.tab === "launch") await refreshLaunches();
}

buildForm();
tick();
setInterval(tick, POLL_MS);

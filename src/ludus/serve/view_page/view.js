// ludus view: the page over the JSON API of src/ludus/serve/view.py.
// Everything a run holds is model-written text: it reaches the page through textContent and
// setAttribute on known attributes only, never as HTML, its bidirectional controls shown (visible())
// and its values checked for their type before use (a run folder may come from anyone).
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const COLORS = ["#2457a6", "#c0392b", "#1c7c3a", "#8e44ad", "#d35400", "#16a085", "#7f8c8d"];
const DEFAULT_CURVES = ["reward/mean", "eval/accuracy"];
// characters that reorder the text after them ("Trojan Source"): a reply or reason holding them
// would read otherwise than it is, so they are shown as their code points
const BIDI_CONTROLS = /[\u202a-\u202e\u2066-\u2069]/g;
let runs = [];
let lastTable = "#/table";

// ---- small helpers ----------------------------------------------------------------------------
function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(visible(child)));
  }
  return node;
}

function visible(value) {
  return String(value).replace(BIDI_CONTROLS, (c) => `[U+${c.codePointAt(0).toString(16).toUpperCase()}]`);
}

function objects(value) {
  return Array.isArray(value) ? value.filter((item) => item !== null && typeof item === "object") : [];
}

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = String(text);
  return node;
}

// The API's token comes in the address's fragment (#token=…), which browsers never send: it is kept
// for this tab in sessionStorage, taken out of the address bar (and so out of history and bookmarks),
// and sent in a header, never in a URL.
const TOKEN_KEY = "ludus-view-token";

function takeToken() {
  const given = /^#token=([^&?#]+)$/.exec(location.hash);
  if (given) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(given[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
}

function authorized() {
  return { Authorization: `Bearer ${sessionStorage.getItem(TOKEN_KEY) || ""}` };
}

async function api(path, params) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params || {})) {
    if (value !== undefined && value !== null && value !== "" && value !== false) query.set(key, String(value));
  }
  const url = query.toString() ? `${path}?${query}` : path;
  const reply = await fetch(url, { credentials: "same-origin", headers: authorized() });
  const body = await reply.json().catch(() => ({}));
  if (!reply.ok) throw new Error(typeof body.detail === "string" ? body.detail : `${reply.status} ${url}`);
  return body;
}

// an <img src> cannot send a header: the screenshot is fetched with it and shown from an object URL
function screenshot(url, alt) {
  const image = el("img", { class: "shot", alt });
  image.addEventListener("load", () => URL.revokeObjectURL(image.src), { once: true });
  fetch(url, { credentials: "same-origin", headers: authorized() })
    .then((reply) => (reply.ok ? reply.blob() : Promise.reject(new Error(`${reply.status} ${url}`))))
    .then((blob) => { image.src = URL.createObjectURL(blob); })
    .catch(() => image.replaceWith(el("p", { class: "note" }, `screenshot ${alt}: could not be read`)));
  return image;
}

function hashState() {
  const hash = location.hash || "#/table";
  const [route, query] = hash.slice(1).split("?");
  return { route: route || "/table", params: new URLSearchParams(query || "") };
}

function go(route, params) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "" && value !== false) query.set(key, String(value));
  }
  location.hash = `#${route}${query.toString() ? "?" + query : ""}`;
}

function number(value, digits = 3) {
  if (value === null || value === undefined) return "–";
  if (typeof value !== "number" || Number.isInteger(value)) return String(value);
  return String(Number(value.toFixed(digits)));
}

function statusSpan(status) {
  return el("span", { class: `status status-${String(status).replace(/[^a-z_]/g, "")}` }, status || "–");
}

function looksLikeDiff(text) {
  return /^(---|\+\+\+) /m.test(text) && /^@@ /m.test(text);
}

function textBlock(text) {
  const value = typeof text === "string" ? text : String(JSON.stringify(text, null, 2));
  if (!looksLikeDiff(value)) return el("pre", {}, value);
  const block = el("pre", { class: "diff" });
  for (const line of value.split("\n")) {
    let kind = "";
    if (line.startsWith("+++ ") || line.startsWith("--- ") || line.startsWith("diff ")) kind = "file";
    else if (line.startsWith("@@")) kind = "hunk";
    else if (line.startsWith("+")) kind = "add";
    else if (line.startsWith("-")) kind = "del";
    block.append(kind ? el("span", { class: kind }, line) : document.createTextNode(visible(line) + "\n"));
  }
  return block;
}

function facts(pairs) {
  const list = el("dl", { class: "facts" });
  for (const [name, value] of pairs) {
    if (value === undefined || value === null || value === "") continue;
    list.append(el("dt", {}, name), el("dd", {}, value instanceof Node ? value : String(value)));
  }
  return list;
}

function show(...nodes) {
  const main = document.getElementById("main");
  main.replaceChildren(...nodes);
  return main;
}

function failure(error) {
  show(el("p", { class: "error" }, String(error.message || error)));
}

function runSelect(name, chosen, filter, onchange) {
  const select = el("select", { name, onchange });
  for (const run of runs.filter(filter)) {
    select.append(el("option", { value: run.index, selected: run.index === chosen }, `${run.index}: ${run.name}`));
  }
  return select;
}

// ---- the table of trajectories ------------------------------------------------------------------
const COLUMNS = [
  ["line", "line", "num"], ["task_id", "task", "task"], ["env", "env"], ["step", "step", "num"],
  ["status", "status"], ["reward", "reward", "num"],
];
const TAIL_COLUMNS = [["tokens", "tokens", "num"], ["chars", "chars", "num"], ["turns", "turns", "num"],
  ["policy_version", "weights", "num"]];

async function tableView(params) {
  const withFiles = runs.filter((run) => run.files.length);
  if (!withFiles.length) return show(el("p", { class: "note" }, "No run holds trajectories; see Curves."));
  const asked = runs[Number(params.get("run") ?? withFiles[0].index)];
  const run = asked && asked.files.length ? asked : withFiles[0];
  const file = params.get("file") || run.files[0].name;
  const state = {
    run: run.index, file, env: params.get("env") || "", status: params.get("status") || "",
    text: params.get("text") || "", changed: params.get("changed") === "1", sort: params.get("sort") || "line",
    desc: params.get("desc") === "1", start: Number(params.get("start") || 0),
  };
  const update = (change) => go("/table", { ...state, changed: state.changed ? 1 : "", desc: state.desc ? 1 : "", ...change });
  const page = await api(`/api/runs/${state.run}/files/${encodeURIComponent(file)}/rows`, {
    start: state.start, limit: 50, env: state.env, status: state.status, text: state.text,
    changed: state.changed ? "true" : "", sort: state.sort, descending: state.desc ? "true" : "",
  });
  lastTable = location.hash || "#/table";

  const fileSelect = el("select", { name: "file", onchange: (e) => update({ file: e.target.value, start: 0 }) });
  for (const f of run.files) fileSelect.append(el("option", { value: f.name, selected: f.name === file }, f.name));
  const envSelect = el("select", { name: "env", onchange: (e) => update({ env: e.target.value, start: 0 }) },
    el("option", { value: "" }, "all"));
  for (const env of page.envs) envSelect.append(el("option", { value: env, selected: env === state.env }, env || "(none)"));
  const statusSelect = el("select", { name: "status", onchange: (e) => update({ status: e.target.value, start: 0 }) },
    el("option", { value: "" }, "all"));
  for (const s of page.statuses) statusSelect.append(el("option", { value: s, selected: s === state.status }, s));
  const search = el("input", { name: "text", type: "search", placeholder: "task id contains…", value: state.text });
  let typing;
  search.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => update({ text: search.value, start: 0 }), 300);
  });
  const controls = el("div", { class: "controls" },
    el("label", {}, "run", runSelect("run", run.index, (r) => r.files.length, (e) => go("/table", { run: e.target.value }))),
    el("label", {}, "file", fileSelect), el("label", {}, "env", envSelect), el("label", {}, "status", statusSelect),
    el("label", {}, "task", search),
    page.rescored && el("label", {}, el("input", {
      type: "checkbox", name: "changed", checked: state.changed,
      onchange: (e) => update({ changed: e.target.checked ? 1 : "", start: 0 }),
    }), "changed by rescore"));

  const columns = [...COLUMNS, ...page.components.map((c) => [`c:${c}`, c, "num"]), ...TAIL_COLUMNS];
  if (page.rescored) columns.push(["new_status", "rescored status", "rescore"], ["new_reward", "rescored reward", "rescore"]);
  const head = el("tr");
  for (const [key, label] of columns) {
    const sorted = state.sort === key ? (state.desc ? "sorted-desc" : "sorted-asc") : "";
    head.append(el("th", {
      class: `sortable ${sorted}`, "data-sort": key,
      onclick: () => update({ sort: key, desc: state.sort === key && !state.desc ? 1 : "", start: 0 }),
    }, label));
  }
  const body = el("tbody");
  for (const row of page.rows) {
    const target = { run: state.run, file, offset: row.offset };
    const tr = el("tr", {
      class: `pick${row.rescore && row.rescore.changed ? " changed" : ""}`, tabindex: 0, "data-offset": row.offset,
      onclick: () => go("/trajectory", target),
      onkeydown: (e) => { if (e.key === "Enter") go("/trajectory", target); },
    });
    for (const [key, , kind] of columns) tr.append(cell(row, key, kind));
    body.append(tr);
  }
  const end = Math.min(state.start + page.rows.length, page.total);
  const indexing = page.complete ? "" : ` — reading the file: ${page.indexed.toLocaleString()} lines so far`;
  const pager = el("div", { class: "pager" },
    el("button", { disabled: state.start === 0, onclick: () => update({ start: Math.max(0, state.start - 50) }) }, "← previous"),
    el("span", { id: "range" }, page.total ? `rows ${state.start + 1}–${end} of ${page.total.toLocaleString()}${indexing}` : `no rows${indexing}`),
    el("button", { disabled: end >= page.total, onclick: () => update({ start: state.start + 50 }) }, "next →"));
  show(el("h2", {}, `${run.name} · ${file}`), controls, pager, el("table", { id: "rows" }, el("thead", {}, head), body));
  if (!page.complete) {
    const here = location.hash;
    setTimeout(() => { if (location.hash === here) render(); }, 700);
  }
}

function cell(row, key, kind) {
  if (key.startsWith("c:")) return el("td", { class: "num" }, number(row.components ? row.components[key.slice(2)] : null));
  if (kind === "rescore") {
    const verdict = row.rescore;
    if (!verdict) return el("td", { class: "rescore" }, "–");
    if (!verdict.changed) {  // the same verdict: shown once, quietly
      return el("td", { class: `rescore same${key === "new_reward" ? " num" : ""}` },
        key === "new_status" ? statusSpan(verdict.new_status) : number(verdict.new_reward), verdict.diverged && key === "new_status" ? " (diverged)" : "");
    }
    if (key === "new_status") {
      return el("td", { class: "rescore" }, statusSpan(verdict.old_status), " → ", statusSpan(verdict.new_status),
        verdict.diverged ? " (diverged)" : "");
    }
    return el("td", { class: "rescore num" }, `${number(verdict.old_reward)} → ${number(verdict.new_reward)}`);
  }
  if (key === "status") return el("td", {}, statusSpan(row.status), row.problem ? ` ${row.problem}` : "");
  const value = row[key];
  return el("td", { class: kind || "" }, kind === "num" ? number(value) : value === null || value === "" ? "–" : value);
}

// ---- one trajectory ---------------------------------------------------------------------------
async function trajectoryView(params) {
  const run = Number(params.get("run"));
  const file = params.get("file");
  const record = await api(`/api/runs/${run}/files/${encodeURIComponent(file)}/records/${Number(params.get("offset"))}`);
  const back = el("a", { href: lastTable }, "← back to the table");
  show(back, el("h2", {}, `${runs[run] ? runs[run].name : run} · ${file}, line ${record.row.line}`),
    trajectoryCard(record));
}

function trajectoryCard(record) {
  const t = record.trajectory;
  const score = t.score || {};
  const box = el("div", { class: "trajectory" });
  const components = Object.entries(score.components || {}).map(([name, value]) => `${name} ${number(value)}`).join(", ");
  box.append(el("div", { class: "card verdict" }, el("h3", {}, "Verdict"), facts([
    ["status", statusSpan(score.status || "unscored")], ["reward", number(record.row.reward)],
    ["score value", number(score.value)], ["reason", score.reason], ["components", components],
    ["extracted", score.extracted],
  ])));
  if (record.rescore) {
    const r = record.rescore;
    box.append(el("div", { class: "card rescore" }, el("h3", {}, "Rescore: old → new"), facts([
      ["old", el("span", {}, statusSpan((r.old || {}).status || "unscored"), ` ${number(r.old_reward)} — ${(r.old || {}).reason || ""}`)],
      ["new", el("span", {}, statusSpan((r.new || {}).status), ` ${number(r.new_reward)} — ${(r.new || {}).reason || ""}`)],
      ["graded by", r.env], ["diverged", r.diverged],
    ])));
  }
  const task = t.task || {};
  box.append(el("div", { class: "card task" }, el("h3", {}, "Task"), facts([
    ["id", task.id], ["env", t.env], ["seed", t.seed], ["weights", t.policy_version], ["step", t.step],
    ["source", task.source],
  ]), el("details", { class: "answer" }, el("summary", {}, "the grader's answer (never shown to the model)"),
    textBlock(task.answer ?? ""))));

  const shots = {};
  record.screenshots.forEach((shot, k) => { (shots[shot.message] = shots[shot.message] || []).push([k, shot]); });
  const all = Array.isArray(t.messages) ? t.messages : [];
  const messages = el("div", { class: "card messages" }, el("h3", {}, `Messages (${all.length})`));
  all.forEach((message, k) => {  // k: the message's place, which the screenshots name
    if (message === null || typeof message !== "object") return;
    const block = el("div", { class: `message ${message.role}`, "data-role": message.role },
      el("div", { class: "role" }, message.role, message.name ? ` · ${message.name}` : "",
        message.tool_call_id ? ` · reply to ${message.tool_call_id}` : ""),
      message.content || !objects(message.tool_calls).length ? textBlock(message.content || "") : null);
    for (const call of objects(message.tool_calls)) {
      block.append(el("div", { class: "call" }, `→ ${call.name}`, call.id ? ` (${call.id})` : ""),
        textBlock(JSON.stringify(call.arguments, null, 2)));
    }
    for (const [number_, shot] of shots[k] || []) {
      const url = `/api/runs/${record.run}/files/${encodeURIComponent(record.file)}/records/${record.row.offset}/screenshots/${number_}`;
      block.append(shot.served ? screenshot(url, shot.path)
        : el("p", { class: "note" }, `screenshot ${shot.path}: not served (not a PNG inside the run folder or its screenshot folder)`));
    }
    messages.append(block);
  });
  box.append(messages);

  const info = t.info || {};
  const diff = info.env && typeof info.env.diff === "string" ? info.env.diff : null;
  if (diff) box.append(el("div", { class: "card change" }, el("h3", {}, "The change (info.env.diff)"), textBlock(diff)));
  if (record.turns.length) {
    const table = el("table", {}, el("thead", {}, el("tr", {},
      ["turn", "prompt tokens", "completion tokens", "mean log-prob", "reward", "finish"].map((h) => el("th", {}, h)))));
    const body = el("tbody");
    record.turns.forEach((turn, k) => body.append(el("tr", {}, el("td", { class: "num" }, k), el("td", { class: "num" }, turn.prompt_tokens),
      el("td", { class: "num" }, turn.completion_tokens), el("td", { class: "num" }, number(turn.mean_logprob)),
      el("td", { class: "num" }, number(turn.reward)), el("td", {}, turn.finish_reason))));
    table.append(body);
    box.append(el("div", { class: "card" }, el("h3", {}, "Policy turns"), table));
  }
  const tools = objects(t.tools);
  if (tools.length) {
    box.append(el("details", { class: "card" }, el("summary", {}, `Tools (${tools.length})`),
      textBlock(tools.map((tool) => `${tool.name}: ${tool.description || ""}`).join("\n"))));
  }
  box.append(el("details", { class: "card info" }, el("summary", {}, "Info"), textBlock(JSON.stringify(info, null, 2))));
  return box;
}

// ---- curves -----------------------------------------------------------------------------------
async function curvesView(params) {
  const known = await api("/api/metrics");
  const chosen = params.has("keys") ? params.get("keys").split(",").filter(Boolean)
    : DEFAULT_CURVES.filter((key) => known.keys.includes(key));
  const data = await api("/api/metrics", { keys: chosen.join(",") });
  const picker = el("select", { name: "metric" }, el("option", { value: "" }, "add a metric…"));
  for (const key of known.keys) if (!chosen.includes(key)) picker.append(el("option", { value: key }, key));
  picker.addEventListener("change", () => { if (picker.value) go("/curves", { keys: [...chosen, picker.value].join(",") }); });
  const legend = el("div", { class: "legend" });
  data.runs.forEach((run, k) => {
    const swatch = el("span", { class: "swatch" });
    swatch.style.background = COLORS[k % COLORS.length];
    legend.append(el("span", {}, swatch, run.name));
  });
  const charts = el("div", { class: "charts" });
  for (const key of chosen) {
    const remove = el("button", { onclick: () => go("/curves", { keys: chosen.filter((c) => c !== key).join(",") }) }, "×");
    charts.append(el("div", { class: "chart", "data-metric": key }, el("div", { class: "chart-head" }, key, remove),
      chart(data.runs.map((run) => run.series[key] || []))));
  }
  const withMetrics = runs.filter((run) => run.metrics).length;
  show(el("div", { class: "controls" }, picker), legend,
    withMetrics ? charts : el("p", { class: "note" }, "No run has metrics.jsonl (evaluations have none: see their summary)."),
    summaries());
}

function chart(series) {
  const width = 560, height = 240, left = 48, right = 12, top = 10, bottom = 28;
  const points = series.flat();
  const box = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img" });
  if (!points.length) {
    box.append(svg("text", { x: width / 2, y: height / 2, "text-anchor": "middle" }, "no values"));
    return box;
  }
  let [x0, x1, y0, y1] = [Infinity, -Infinity, Infinity, -Infinity];
  for (const [a, b] of points) { x0 = Math.min(x0, a); x1 = Math.max(x1, a); y0 = Math.min(y0, b); y1 = Math.max(y1, b); }
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (y0 === y1) { y0 -= 0.5; y1 += 0.5; }
  const x = (v) => left + ((v - x0) / (x1 - x0)) * (width - left - right);
  const y = (v) => top + (1 - (v - y0) / (y1 - y0)) * (height - top - bottom);
  for (let k = 0; k <= 4; k++) {
    const value = y0 + ((y1 - y0) * k) / 4;
    box.append(svg("line", { class: "grid", x1: left, x2: width - right, y1: y(value), y2: y(value) }),
      svg("text", { x: left - 4, y: y(value) + 4, "text-anchor": "end" }, number(value, 3)));
    const step = x0 + ((x1 - x0) * k) / 4;
    box.append(svg("text", { x: x(step), y: height - 8, "text-anchor": "middle" }, number(step, 1)));
  }
  box.append(svg("line", { class: "axis", x1: left, x2: left, y1: top, y2: height - bottom }),
    svg("line", { class: "axis", x1: left, x2: width - right, y1: height - bottom, y2: height - bottom }));
  series.forEach((values, k) => {
    const color = COLORS[k % COLORS.length];
    if (!values.length) return;
    box.append(svg("polyline", { fill: "none", stroke: color, "stroke-width": 1.6,
      points: values.map(([a, b]) => `${x(a).toFixed(1)},${y(b).toFixed(1)}`).join(" ") }));
    if (values.length <= 60) for (const [a, b] of values) box.append(svg("circle", { cx: x(a), cy: y(b), r: 2.5, fill: color }));
  });
  return box;
}

function summaries() {
  const cards = el("div");
  for (const run of runs) {
    const summary = run.settings["summary.json"];
    if (!summary) continue;
    cards.append(el("div", { class: "card" }, el("h3", {}, `${run.name}: evaluation summary`), facts([
      ["tasks", summary.tasks], ["samples", summary.samples], ["mean reward", number(summary.mean_reward, 4)],
      ["accuracy", number(summary.accuracy, 4)], ["infra errors", summary.infra_errors],
      ["statuses", Object.entries(summary.statuses || {}).map(([k, v]) => `${k} ${v}`).join(", ")],
    ])));
  }
  return cards;
}

// ---- two runs side by side --------------------------------------------------------------------
async function compareView(params) {
  const withFiles = runs.filter((run) => run.files.length);
  if (withFiles.length < 2) return show(el("p", { class: "note" }, "Open two runs with trajectories to compare them: ludus view RUN_A RUN_B"));
  const a = Number(params.get("a") ?? withFiles[0].index);
  const b = Number(params.get("b") ?? withFiles[1].index);
  const start = Number(params.get("start") || 0);
  const text = params.get("text") || "";
  const state = { a, b, start, text };
  const shared = await api("/api/compare", { a, b, start, limit: 50, text });
  const search = el("input", { name: "text", type: "search", placeholder: "task id contains…", value: text });
  search.addEventListener("change", () => go("/compare", { ...state, text: search.value, start: 0 }));
  const controls = el("div", { class: "controls" },
    el("label", {}, "run A", runSelect("a", a, (r) => r.files.length, (e) => go("/compare", { ...state, a: e.target.value, start: 0 }))),
    el("label", {}, "run B", runSelect("b", b, (r) => r.files.length, (e) => go("/compare", { ...state, b: e.target.value, start: 0 }))),
    el("label", {}, "task", search));
  const body = el("tbody");
  for (const task of shared.tasks) {
    const pick = { ...state, task: task.task_id, ao: task.a.offset, bo: task.b.offset };
    body.append(el("tr", { class: "pick", tabindex: 0, onclick: () => go("/compare", pick) },
      el("td", { class: "task" }, task.task_id), el("td", {}, statusSpan(task.a.status), " ", number(task.a.reward)),
      el("td", {}, statusSpan(task.b.status), " ", number(task.b.reward))));
  }
  const table = el("table", { id: "shared" }, el("thead", {}, el("tr", {},
    el("th", {}, "task"), el("th", {}, `A: ${runs[a].name}`), el("th", {}, `B: ${runs[b].name}`))), body);
  const end = Math.min(start + shared.tasks.length, shared.total);
  const pager = el("div", { class: "pager" },
    el("button", { disabled: start === 0, onclick: () => go("/compare", { ...state, start: Math.max(0, start - 50) }) }, "← previous"),
    el("span", {}, shared.total ? `tasks ${start + 1}–${end} of ${shared.total.toLocaleString()} both runs did` : "the two runs share no task"),
    el("button", { disabled: end >= shared.total, onclick: () => go("/compare", { ...state, start: start + 50 }) }, "next →"));
  const parts = [el("h2", {}, "Two runs on the same tasks"), controls];
  if (params.has("task")) {
    const [left, right] = await Promise.all([
      api(`/api/runs/${a}/files/${encodeURIComponent(shared.a_file)}/records/${Number(params.get("ao"))}`),
      api(`/api/runs/${b}/files/${encodeURIComponent(shared.b_file)}/records/${Number(params.get("bo"))}`),
    ]);
    parts.push(el("h2", {}, `Task ${params.get("task")}`), el("div", { class: "columns" },
      el("div", { class: "column", id: "side-a" }, el("h3", {}, `A: ${runs[a].name}`), trajectoryCard(left)),
      el("div", { class: "column", id: "side-b" }, el("h3", {}, `B: ${runs[b].name}`), trajectoryCard(right))));
  }
  parts.push(pager, table);
  show(...parts);
}

// ---- routing ----------------------------------------------------------------------------------
const VIEWS = { "/table": tableView, "/trajectory": trajectoryView, "/curves": curvesView, "/compare": compareView };

async function render() {
  const { route, params } = hashState();
  for (const link of document.querySelectorAll("header nav a")) {
    link.classList.toggle("here", route === link.getAttribute("href").slice(1) || (route === "/trajectory" && link.id === "nav-table"));
  }
  try {
    await (VIEWS[route] || tableView)(params);
  } catch (error) {
    failure(error);
  }
}

async function start() {
  try {
    takeToken();
    runs = await api("/api/runs");
  } catch (error) {
    return failure(error);
  }
  document.getElementById("runs-line").textContent = runs.map((run) => run.name).join(" · ");
  window.addEventListener("hashchange", render);
  await render();
}

start();

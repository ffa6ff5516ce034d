// The evals page: your evals, an eval's runs with their progress, and two runs side by side
// (per criterion, then per item, by default only where they differ). Talks to /v1/evals like
// any client; the API key is the dashboard's (sessionStorage).
"use strict";

const KEY = "gradacc_api_key";
const $ = (id) => document.getElementById(id);
const state = { evalId: null, runs: [], criteria: [] };

function headers() {
  const key = sessionStorage.getItem(KEY);
  return key ? { Authorization: `Bearer ${key}` } : {};
}

async function api(path) {
  const response = await fetch(path, { headers: headers() });
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    const error = body?.error || { message: response.statusText };
    throw Object.assign(new Error(error.message), { status: response.status });
  }
  return body;
}

async function all(path) {
  const found = [];
  let after = null;
  for (;;) {
    const page = await api(`${path}${path.includes("?") ? "&" : "?"}limit=100${after ? `&after=${after}` : ""}`);
    found.push(...page.data);
    if (!page.has_more) return found;
    after = page.last_id;
  }
}

function banner(text) {
  $("banner").textContent = text || "";
  $("banner").hidden = !text;
}

function failed(error) {
  banner(error.status === 401 ? "an API key is required: enter it above" : error.message);
}

function cell(row, text, title) {
  const td = row.insertCell();
  td.textContent = text;
  if (title) td.title = title;
  return td;
}

async function showEvals() {
  try {
    const evals = await all("/v1/evals?order=desc");
    banner("");
    const body = $("evals").tBodies[0];
    body.replaceChildren();
    for (const found of evals) {
      const row = body.insertRow();
      const link = document.createElement("a");
      link.href = `?eval=${found.id}`;
      link.textContent = found.name;
      row.insertCell().append(link);
      cell(row, found.id);
      cell(row, found.testing_criteria.map((c) => c.name).join(", "));
      cell(row, new Date(found.created_at * 1000).toLocaleString());
    }
  } catch (error) {
    failed(error);
  }
}

function tokens(run) {
  return run.per_model_usage.reduce((sum, u) => sum + u.total_tokens, 0);
}

async function showRuns(evalId, chosen) {
  const found = await api(`/v1/evals/${evalId}`);
  state.evalId = evalId;
  state.criteria = found.testing_criteria.map((c) => c.name);
  state.runs = await all(`/v1/evals/${evalId}/runs?order=desc`);
  $("eval-title").textContent = `${found.name} (${found.id})`;
  const body = $("runs").tBodies[0];
  body.replaceChildren();
  state.runs.forEach((run, i) => {
    const row = body.insertRow();
    row.dataset.run = run.id;
    for (const side of ["a", "b"]) {
      const radio = Object.assign(document.createElement("input"), { type: "radio", name: side, value: run.id });
      radio.checked = chosen[side] ? chosen[side] === run.id : (side === "a" ? i === 1 : i === 0);
      row.insertCell().append(radio);
    }
    const c = run.result_counts;
    cell(row, run.name, run.id);
    cell(row, run.model || "(samples given)");
    cell(row, run.status);
    cell(row, `${c.passed + c.failed + c.errored} / ${c.total}`);
    cell(row, c.passed);
    cell(row, c.failed);
    cell(row, c.errored);
    cell(row, tokens(run));
  });
  $("runs-view").hidden = false;
}

function picked(side) {
  return document.querySelector(`input[name=${side}]:checked`)?.value;
}

function passes(item) {
  return Object.fromEntries((item?.results || []).map((r) => [r.name, r.passed]));
}

function text(item) {
  if (!item) return "(not graded yet)";
  if (item.sample.error) return `error: ${item.sample.error.message}`;
  return item.sample.output.map((o) => o.content).join("\n");
}

async function compare() {
  const [a, b] = [picked("a"), picked("b")];
  if (!a || !b) return banner("choose run A and run B");
  history.replaceState(null, "", `?eval=${state.evalId}&a=${a}&b=${b}`);
  const [itemsA, itemsB] = await Promise.all([a, b].map((id) => all(`/v1/evals/${state.evalId}/runs/${id}/output_items`)));
  const byA = new Map(itemsA.map((i) => [i.datasource_item_id, i]));
  const byB = new Map(itemsB.map((i) => [i.datasource_item_id, i]));
  const runA = state.runs.find((r) => r.id === a), runB = state.runs.find((r) => r.id === b);
  const criteria = $("criteria").tBodies[0];
  criteria.replaceChildren();
  for (const name of state.criteria) {
    const row = criteria.insertRow();
    const count = (run) => run.per_testing_criteria_results.find((r) => r.testing_criteria === name)?.passed ?? 0;
    cell(row, name);
    cell(row, count(runA));
    cell(row, count(runB));
    cell(row, Math.max(runA.result_counts.total, runB.result_counts.total));
  }
  const head = $("items").tHead;
  head.replaceChildren();
  const titles = ["#", "item", `A: ${runA.name}`, `B: ${runB.name}`, ...state.criteria.map((n) => `${n} A/B`)];
  const top = head.insertRow();
  for (const t of titles) top.append(Object.assign(document.createElement("th"), { textContent: t }));
  const ids = [...new Set([...byA.keys(), ...byB.keys()])].sort((x, y) => x - y);
  const body = $("items").tBodies[0];
  body.replaceChildren();
  let differing = 0;
  for (const id of ids) {
    const [ia, ib] = [byA.get(id), byB.get(id)];
    const [pa, pb] = [passes(ia), passes(ib)];
    const differs = text(ia) !== text(ib) || state.criteria.some((n) => pa[n] !== pb[n]);
    differing += differs;
    if (!differs && $("differ").checked) continue;
    const row = body.insertRow();
    row.className = differs ? "differs" : "";
    cell(row, id);
    cell(row, JSON.stringify((ia || ib).datasource_item).slice(0, 160));
    cell(row, text(ia));
    cell(row, text(ib));
    const mark = (p) => (p === undefined ? "·" : p ? "✓" : "✗");
    for (const n of state.criteria) cell(row, `${mark(pa[n])} ${mark(pb[n])}`);
  }
  $("differ-count").textContent = `${differing} of ${ids.length} differ`;
  $("compare-view").hidden = false;
}

$("key-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(KEY, $("api-key").value.trim());
  start();
});
$("compare").addEventListener("click", () => compare().catch(failed));
$("differ").addEventListener("change", () => { if (!$("compare-view").hidden) compare().catch(failed); });

async function start() {
  const query = new URLSearchParams(location.search);
  await showEvals();
  const evalId = query.get("eval");
  if (!evalId) return;
  try {
    await showRuns(evalId, { a: query.get("a") || query.get("run"), b: query.get("b") });
    if (query.get("a") && query.get("b")) await compare();
  } catch (error) {
    failed(error);
  }
}

start();

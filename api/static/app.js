// The dashboard: the job list, a job page fed by the job's stream, a submit form. Plain JS, no
// build step; the API key (if any) lives in sessionStorage and goes out as a bearer header.
"use strict";

const KEY = "gradacc_api_key";
const TERMINAL = ["succeeded", "failed", "cancelled"];
const $ = (id) => document.getElementById(id);
let listTimer = null;
let current = null; // {id, abort, charts}

function headers(extra = {}) {
  const key = sessionStorage.getItem(KEY);
  return key ? { ...extra, Authorization: `Bearer ${key}` } : extra;
}

async function api(path, options = {}) {
  const response = await fetch(path, { ...options, headers: headers(options.headers) });
  const body = response.headers.get("content-type")?.includes("json") ? await response.json() : null;
  if (!response.ok) {
    const error = body?.error || { message: response.statusText };
    const failure = new Error(error.param ? `${error.param}: ${error.message}` : error.message);
    failure.status = response.status;
    throw failure;
  }
  return body;
}

// One banner for what stops the page from working (a missing key); cleared by the next success.
function setBanner(text) {
  $("banner").textContent = text || "";
  $("banner").hidden = !text;
}

function failed(what, error) {
  setBanner(error.status === 401 ? "an API key is required: enter it above" : `${what}: ${error.message}`);
}

function span(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  return s >= 86400 ? `${Math.floor(s / 86400)}d` : s >= 3600 ? `${Math.floor(s / 3600)}h`
    : s >= 60 ? `${Math.floor(s / 60)}m` : `${s}s`;
}

function age(unix) {
  return span(Date.now() / 1000 - unix);
}

function progressText(job) {
  const p = job.progress;
  let text = `epoch ${p.epoch} · step ${p.step}/${p.total_steps ?? "?"}`;
  if (p.train_loss != null) text += ` · loss ${p.train_loss.toFixed(4)}`;
  // An ETA from the first steps is noise (126 s shown at step 24 of 625): only once 5 % of the
  // steps are done or the job has run 30 s.
  const ran = job.started_at ? Date.now() / 1000 - job.started_at : 0;
  const stable = p.total_steps && (p.step >= 0.05 * p.total_steps || ran >= 30);
  if (p.eta_seconds != null && job.status === "running" && stable) text += ` · ETA ${span(p.eta_seconds)}`;
  return text;
}

// "#2 · in 3m": the queue position (1 = next) and, when a duration can be estimated, the start.
function queueText(job) {
  if (job.queue_position == null) return "";
  let text = `#${job.queue_position}`;
  if (job.estimated_start != null) text += ` · in ${span(job.estimated_start - Date.now() / 1000)}`;
  return text;
}

async function refreshList() {
  try {
    const query = new URLSearchParams({ limit: "50" });
    const filter = $("filter-form");
    if (filter.name.value.trim()) query.set("name", filter.name.value.trim());
    const pair = filter.metadata.value.split("=");
    if (pair.length === 2 && pair[0].trim()) query.set(`metadata[${pair[0].trim()}]`, pair[1].trim());
    const page = await api(`/v1/jobs?${query}`);
    setBanner(null);
    const rows = page.data.map((job) => {
      const tr = document.createElement("tr");
      const b = job.micro_batch_size ?? job.spec.per_device_train_batch_size;
      const k = job.gradient_accumulation_steps ?? job.spec.gradient_accumulation_steps;
      // The name given, a fine-tuning job's suffix, or the id when it has neither.
      const name = [job.name, job.suffix].filter(Boolean).join(" / ") || job.id;
      const metadata = Object.entries(job.metadata || {}).map(([k, v]) => `${k}=${v}`).join(", ");
      const cells = [name, metadata, job.spec.model, job.spec.dataset, job.spec.backend,
        `${b}×${k}`, job.status, progressText(job), job.priority, queueText(job), age(job.created_at)];
      for (const value of cells) {
        const td = document.createElement("td");
        td.textContent = String(value ?? "");
        tr.appendChild(td);
      }
      tr.title = job.id;
      tr.dataset.id = job.id;
      tr.children[6].className = `status-${job.status}`;
      tr.onclick = () => { location.hash = `#/jobs/${job.id}`; };
      return tr;
    });
    $("jobs").querySelector("tbody").replaceChildren(...rows);
  } catch (error) {
    failed("job list", error);
  }
}

async function submitJob(event) {
  event.preventDefault();
  const form = event.target;
  $("submit-error").textContent = "";
  const spec = { model: form.model.value.trim(), dataset: form.dataset.value.trim(), backend: form.backend.value };
  const generative = ["builtin:tiny-gpt2", "builtin:tiny-chat"].includes(spec.model);
  spec.task = form.task.value || (generative ? "causal-lm" : "sequence-classification");
  if (spec.task === "causal-lm" && spec.dataset === "builtin:sentiment") {
    spec.dataset = spec.model === "builtin:tiny-chat" ? "builtin:chat-arithmetic" : "builtin:tiny-stories";
  }
  if (spec.task === "sequence-classification" && spec.dataset === "builtin:chat-arithmetic") {
    spec.dataset = "builtin:sentiment"; // the form's chat default, with a classifier chosen
  }
  for (const name of ["eval_dataset", "text_column", "label_column", "name"]) {
    if (form[name].value.trim()) spec[name] = form[name].value.trim();
  }
  for (const name of ["gradient_accumulation_steps", "per_device_train_batch_size", "num_train_epochs", "max_train_samples"]) {
    if (form[name].value) spec[name] = parseInt(form[name].value, 10);
  }
  spec.learning_rate = parseFloat(form.learning_rate.value);
  try {
    if (form.upload.files.length) {
      const data = new FormData();
      data.append("file", form.upload.files[0]);
      data.append("purpose", "dataset");
      spec.dataset = (await api("/v1/files", { method: "POST", body: data })).id;
    }
    const job = await api("/v1/jobs", { method: "POST", headers: { "content-type": "application/json" },
                                       body: JSON.stringify(spec) });
    location.hash = `#/jobs/${job.id}`;
  } catch (error) {
    $("submit-error").textContent = error.message;
  }
}

// Server-Sent Events over fetch (EventSource cannot send an Authorization header).
async function readStream(jobId, signal, onMessage) {
  const response = await fetch(`/v1/jobs/${jobId}/stream`, { headers: headers(), signal });
  if (!response.ok) throw new Error(`stream: HTTP ${response.status}`);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replace(/\r\n/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const fields = { event: "message", data: [] };
      for (const line of block.split("\n")) {
        if (!line || line.startsWith(":")) continue;
        const at = line.indexOf(":");
        const name = at < 0 ? line : line.slice(0, at);
        const text = at < 0 ? "" : line.slice(at + 1).replace(/^ /, "");
        if (name === "data") fields.data.push(text); else fields[name] = text;
      }
      if (fields.data.length) onMessage(fields.event, JSON.parse(fields.data.join("\n")));
    }
  }
}

function showJob(job) {
  $("job-title").textContent = `${job.name ? `${job.name} · ` : ""}${job.id} · ${job.spec.backend} · K=${job.spec.gradient_accumulation_steps} · effective batch ${job.effective_batch_size}`;
  const status = $("job-status");
  status.textContent = `${job.status} · ${progressText(job)}` + (job.error ? ` · ${job.error.code}: ${job.error.message}` : "");
  status.className = `status-${job.status}`;
  status.dataset.status = job.status;
  $("job-details").textContent = jobDetails(job);
  showControls(job);
  $("cancel").disabled = TERMINAL.includes(job.status);
  $("download").disabled = job.status !== "succeeded";
  updateChat(job);
}

function onJobMessage(charts, kind, data) {
  if (kind === "job") {
    if (current && current.job.status !== data.status) refreshCheckpoints(current.id);
    if (current) current.job = data;
    return showJob(data);
  }
  if (kind === "event") {
    if (current) refreshCheckpoints(current.id); // a checkpoint, a pause: the list may change
    const li = document.createElement("li");
    li.textContent = `${new Date(data.created_at * 1000).toLocaleTimeString()} ${data.kind}: ${data.message}`;
    return $("events").appendChild(li);
  }
  const step = kind === "epoch" ? data.optimizer_steps : data.step;
  const prefix = kind === "epoch" ? "epoch" : "step";
  charts.loss.add(step, { [`${prefix} train_loss`]: data.train_loss });
  charts.eval.add(step, { eval_loss: data.eval_loss });
  // DPO, GRPO: an epoch's train means would overwrite its last window's at that step; DPO's eval stays.
  const epochOfWindows = kind === "epoch" && charts.rewards;
  charts.quality.add(step, epochOfWindows ? { "eval_rewards/accuracies": data["eval_rewards/accuracies"] } : data);
  if (data.eval_loss != null && current) refreshReports(current.id);
  if (kind === "step") charts.lr.add(step, { learning_rate: data.learning_rate });
  // DPO, GRPO: the window's rewards (step records); an epoch's means would hide the last window's.
  if (kind === "step" && charts.rewards) charts.rewards.add(step, data);
}

async function openJob(jobId) {
  closeJob();
  $("list-view").hidden = true;
  $("job-view").hidden = false;
  $("events").replaceChildren();
  let job;
  try {
    job = await api(`/v1/jobs/${jobId}`);
  } catch (error) {
    return failed("job", error);
  }
  setBanner(null);
  showJob(job);
  const causal = job.spec.task === "causal-lm";
  const plan = chartPlan(job);
  $("quality-caption").textContent = plan.caption;
  const ended = TERMINAL.includes(job.status);
  const waiting = ended ? "no evaluation ran in this job (no validation data, or it ended first)"
    : "waiting for the first evaluation";
  const firstStep = ended ? "no step was trained in this job" : "waiting for the first step";
  const charts = {
    loss: new LineChart($("chart-loss"), ["step train_loss", "epoch train_loss"], firstStep),
    eval: new LineChart($("chart-eval"), ["eval_loss"], waiting),
    quality: new LineChart($("chart-quality"), plan.quality, plan.perStep ? firstStep : waiting),
    lr: new LineChart($("chart-lr"), ["learning_rate"], firstStep),
  };
  $("rewards-figure").hidden = !plan.rewards;
  $("rewards-caption").textContent = plan.rewardsCaption;
  if (plan.rewards) charts.rewards = new LineChart($("chart-rewards"), plan.rewards, firstStep);
  const abort = new AbortController();
  current = { id: jobId, abort, charts, job };
  openChat(job);
  previewLink(job);
  $("confusion").replaceChildren();
  $("confusion-step").textContent = "";
  $("try-output").replaceChildren();
  $("confusion").closest("section").hidden = causal;
  $("checkpoints").querySelector("tbody").replaceChildren();
  refreshReports(jobId);
  refreshCheckpoints(jobId);
  readStream(jobId, abort.signal, (kind, data) => onJobMessage(charts, kind, data))
    .catch((error) => { if (!abort.signal.aborted) $("job-status").textContent += ` (stream: ${error.message})`; })
    .finally(() => refreshLog(jobId));
  refreshLog(jobId);
}

// The newest evaluation's confusion matrix, and every evaluation's samples, newest first.
async function refreshReports(jobId) {
  let reports;
  try {
    reports = (await api(`/v1/jobs/${jobId}/metrics?granularity=evaluation&limit=50`)).data;
  } catch (error) {
    return;
  }
  const classified = reports.find((r) => r.classification);
  if (classified) drawConfusion(classified);
  const rows = [];
  for (const report of reports) {
    for (const sample of report.samples || []) rows.push([report.step, sample.prompt, sample.reference, sample.output]);
    for (const wrong of report.misclassified || []) rows.push([report.step, wrong.text, wrong.label, wrong.predicted]);
  }
  const head = classified ? ["step", "text", "label", "predicted"] : ["step", "prompt", "reference", "output"];
  $("samples").querySelector("thead").replaceChildren(row("th", head));
  $("samples").querySelector("tbody").replaceChildren(...rows.map((cells) => row("td", cells)));
  $("samples-empty").hidden = rows.length > 0;
}

function row(tag, cells) {
  const tr = document.createElement("tr");
  for (const value of cells) {
    const cell = document.createElement(tag);
    cell.textContent = String(value);
    tr.appendChild(cell);
  }
  return tr;
}

function drawConfusion(report) {
  const { labels, confusion_matrix: matrix, per_class: perClass } = report.classification;
  const table = document.createElement("table");
  table.appendChild(row("th", ["true \\ predicted", ...labels, "recall", "F1", "support"]));
  const most = Math.max(1, ...matrix.flat());
  matrix.forEach((counts, i) => {
    const c = perClass[labels[i]];
    const tr = row("td", [labels[i], ...counts, c.recall.toFixed(3), c.f1.toFixed(3), c.support]);
    counts.forEach((count, j) => {
      const shade = Math.round(255 - 155 * (count / most));
      tr.children[j + 1].style.background = i === j ? `rgb(${shade},255,${shade})` : `rgb(255,${shade},${shade})`;
    });
    table.appendChild(tr);
  });
  table.appendChild(row("td", ["precision", ...labels.map((l) => perClass[l].precision.toFixed(3)), "", "", ""]));
  $("confusion").replaceChildren(table);
  $("confusion-step").textContent = `(step ${report.step})`;
}

async function tryIt(event) {
  event.preventDefault();
  const text = event.target.text.value;
  const job = current.job;
  let body;
  if (job.spec.task !== "causal-lm") body = { inputs: text.split("\n").filter((line) => line.trim()) };
  else if (job.dataset_format === "messages") body = { messages: [{ role: "user", content: text }] };
  else body = { prompt: text };
  $("try-output").textContent = "…";
  try {
    const answer = await api(`/v1/jobs/${job.id}/predict`, {
      method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    const lines = answer.data
      ? answer.data.map((d) => `${d.label} (${d.score.toFixed(3)})`)
      : [answer.text];
    $("try-output").replaceChildren(...lines.map((line) => {
      const p = document.createElement("p");
      p.className = "answer";
      p.textContent = line;
      return p;
    }));
  } catch (error) {
    $("try-output").textContent = error.message;
  }
}

async function refreshLog(jobId) {
  try {
    const response = await fetch(`/v1/jobs/${jobId}/logs?tail=50`, { headers: headers() });
    $("log").textContent = response.ok ? await response.text() : "(no log available from this server)";
  } catch (error) {
    $("log").textContent = `(log: ${error.message})`;
  }
}

async function downloadModel() {
  const response = await fetch(`/v1/jobs/${current.id}/artifacts/model`, { headers: headers() });
  if (!response.ok) { $("job-status").textContent += ` (download: HTTP ${response.status})`; return; }
  const link = document.createElement("a");
  link.href = URL.createObjectURL(await response.blob());
  link.download = `${current.id}-model.tar.gz`;
  link.click();
}

function closeJob() {
  if (!current) return;
  current.abort.abort();
  closeChat();
  Object.values(current.charts).forEach((chart) => chart.destroy());
  current = null;
}

function route() {
  const match = location.hash.match(/^#\/jobs\/(job_[0-9a-f]+)$/);
  clearInterval(listTimer);
  $("preview-view").hidden = true;
  if (match) return openJob(match[1]);
  closeJob();
  $("job-view").hidden = true;
  if (location.hash.startsWith("#/preview")) return openPreview(location.hash);
  $("list-view").hidden = false;
  refreshList();
  listTimer = setInterval(refreshList, 2000);
}

$("key-form").onsubmit = (event) => {
  event.preventDefault();
  sessionStorage.setItem(KEY, $("api-key").value.trim());
  setBanner(null);
  route();
};
$("filter-form").onsubmit = (event) => { event.preventDefault(); refreshList(); };
$("try-form").onsubmit = tryIt;
$("api-key").value = sessionStorage.getItem(KEY) || "";
$("submit-form").onsubmit = submitJob;
$("cancel").onclick = () => api(`/v1/jobs/${current.id}/cancel`, { method: "POST" }).catch((e) => alert(e.message));
$("download").onclick = downloadModel;
$("pause").onclick = () => control("pause");
$("resume").onclick = () => control("resume");
window.addEventListener("hashchange", route);
route();

// The preview view (#/preview/file-…?job=job_…): which tokens of a file's first rows a job would
// train on, from POST /v1/files/{id}/preview (docs/what-is-trained.md). Trained tokens get a
// background, the rest are dimmed, and whitespace is drawn (a newline as ↵) so that a trained
// separator cannot hide. Coming from a job's page, the form starts from the job's data fields.
// Loaded before app.js, whose $() and api() it calls; app.js calls openPreview and previewLink.
"use strict";

const PREVIEW_TEXT = ["chat_template", "messages_column", "prompt_column", "completion_column", "text_column"];
const PREVIEW_FLAGS = ["assistant_only_loss", "completion_only_loss", "train_empty_reasoning"];
const FILE_ID = /^file-[0-9a-f]{20}$/; // trainer_core.spec.sources.FILE_ID_PATTERN

// The job page's "What is trained" link: only for a job that trains on rows of an uploaded file
// (preference pairs are not previewed).
function previewLink(job) {
  const link = $("preview-link");
  const rows = job.spec.task === "causal-lm" && (job.spec.method ?? "sft") === "sft";
  link.hidden = !(rows && FILE_ID.test(job.spec.dataset));
  link.href = link.hidden ? "" : `#/preview/${job.spec.dataset}?job=${job.id}`;
}

async function openPreview(hash) {
  $("list-view").hidden = true;
  $("preview-view").hidden = false;
  const [path, query] = hash.slice("#/preview".length).split("?");
  const form = $("preview-form");
  form.file.value = path.replace(/^\//, "");
  $("preview-rows").replaceChildren();
  $("preview-summary").textContent = "";
  $("preview-error").textContent = "";
  const jobId = new URLSearchParams(query || "").get("job");
  try {
    if (jobId) fillFromJob(form, (await api(`/v1/jobs/${jobId}`)).spec);
  } catch (error) {
    $("preview-error").textContent = `job ${jobId}: ${error.message}`;
    return;
  }
  if (form.file.value) runPreview();
}

// The job's data fields, as the preview body names them (JobSpec's names).
function fillFromJob(form, spec) {
  form.model.value = spec.model;
  form.dataset_format.value = spec.dataset_format ?? "auto";
  form.max_seq_length.value = spec.max_seq_length ?? "";
  for (const name of PREVIEW_TEXT) form[name].value = spec[name] ?? "";
  for (const name of PREVIEW_FLAGS) form[name].checked = spec[name] ?? true;
}

function previewBody(form) {
  const body = { model: form.model.value.trim(), rows: parseInt(form.rows.value, 10) || 5,
                 dataset_format: form.dataset_format.value };
  if (form.max_seq_length.value) body.max_seq_length = parseInt(form.max_seq_length.value, 10);
  for (const name of PREVIEW_TEXT) if (form[name].value.trim()) body[name] = form[name].value;
  for (const name of PREVIEW_FLAGS) body[name] = form[name].checked;
  return body;
}

async function runPreview(event) {
  event?.preventDefault();
  const form = $("preview-form");
  $("preview-error").textContent = "";
  $("preview-summary").textContent = "tokenizing… (the first load of a model takes a while)";
  $("preview-rows").replaceChildren();
  try {
    const answer = await api(`/v1/files/${form.file.value.trim()}/preview`, {
      method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(previewBody(form)) });
    $("preview-summary").textContent = `format ${answer.format} · max_seq_length ${answer.max_length}`;
    $("preview-rows").replaceChildren(...answer.rows.map(previewRow));
  } catch (error) {
    $("preview-summary").textContent = "";
    $("preview-error").textContent = error.message;
  }
}

function previewRow(r) {
  const li = document.createElement("li");
  li.dataset.index = r.index;
  const head = document.createElement("p");
  head.className = "preview-counts";
  head.textContent = `row ${r.index + 1}: ${r.trained} of ${r.total} tokens trained`;
  const warnings = document.createElement("ul");
  warnings.className = "preview-warnings";
  warnings.replaceChildren(...r.warnings.map((text) => Object.assign(document.createElement("li"), { textContent: text })));
  const tokens = document.createElement("div");
  tokens.className = "preview-tokens";
  tokens.replaceChildren(...r.tokens.map(tokenSpan));
  li.append(head, warnings, tokens);
  return li;
}

// A token as drawn: a newline as ↵ (then the break), a tab as →, a space-only token as ·, an
// empty one as ∅, each mark in its own colour; the exact text in the tooltip.
const MARKS = { "\n": "↵\n", "\t": "→", "\r": "␍" };

function tokenSpan(token) {
  const span = document.createElement("span");
  span.className = token.trained ? "tok trained" : "tok";
  span.title = JSON.stringify(token.text);
  if (token.text === "" || /^ +$/.test(token.text)) {
    span.append(mark(token.text ? "·".repeat(token.text.length) : "∅"));
    return span;
  }
  for (const piece of token.text.split(/([\n\t\r])/)) {
    if (piece) span.append(MARKS[piece] ? mark(MARKS[piece]) : piece);
  }
  return span;
}

function mark(text) {
  return Object.assign(document.createElement("span"), { className: "ws", textContent: text });
}

document.getElementById("preview-form").onsubmit = runPreview;

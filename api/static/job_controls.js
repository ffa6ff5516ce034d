// The job page's controls beyond cancel: pause and resume (POST /v1/jobs/{id}/pause, /resume)
// and the kept checkpoints (GET /v1/jobs/{id}/checkpoints), and what the user gave (name,
// suffix, metadata) with the model the job made. Loaded before app.js, whose api() and $() it
// calls.
"use strict";

const PAUSABLE = ["queued", "running"];

function jobDetails(job) {
  const parts = [];
  if (job.name) parts.push(`name ${job.name}`);
  if (job.suffix) parts.push(`suffix ${job.suffix}`);
  const pairs = Object.entries(job.metadata || {}).map(([k, v]) => `${k}=${v}`);
  if (pairs.length) parts.push(`metadata ${pairs.join(", ")}`);
  parts.push(`model ${job.spec.model}`);
  if (job.fine_tuned_model) parts.push(`fine_tuned_model ${job.fine_tuned_model}`);
  return parts.join(" · ");
}

function showControls(job) {
  $("pause").disabled = !PAUSABLE.includes(job.status);
  $("resume").disabled = job.status !== "paused";
}

async function refreshCheckpoints(jobId) {
  let listed;
  try {
    listed = (await api(`/v1/jobs/${jobId}/checkpoints`)).data;
  } catch (error) {
    return;
  }
  if (!current || current.id !== jobId) return; // another page opened meanwhile
  chatCheckpoints(jobId, listed);
  const number = (value) => (typeof value === "number" ? value.toFixed(4) : "");
  const rows = listed.map((c) => {
    const tr = row("td", [c.step_number, c.epoch, number(c.metrics.train_loss),
      number(c.metrics.eval_loss), c.is_best ? "best" : "", c.model]);
    tr.dataset.step = c.step_number;
    return tr;
  });
  $("checkpoints").querySelector("tbody").replaceChildren(...rows);
  $("checkpoints-empty").hidden = rows.length > 0;
}

// Pause or resume, then show the answer at once (the stream follows with the rest).
async function control(action) {
  try {
    const job = await api(`/v1/jobs/${current.id}/${action}`, { method: "POST" });
    showJob(job);
  } catch (error) {
    $("job-status").textContent += ` (${action}: ${error.message})`;
  }
}

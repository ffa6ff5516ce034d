// Line charts over uPlot (vendored): one x axis (optimizer step), one or more series; points
// arrive one by one from the stream. Each chart's container carries data-points (a count) so
// that a test, or a curious user, can see that it was drawn.
"use strict";

// Tick labels with as many digits as the spacing between ticks needs, so that no two labels of
// an axis read the same (an eval loss moving within 1.10-1.12 got "1.1, 1.1, 1.1" from a fixed
// 3 significant digits). Small values (learning rates) in exponent notation.
function ticks(values) {
  const finite = values.filter((v) => Number.isFinite(v));
  if (finite.length < 2) return values.map((v) => String(v));
  const spacing = Math.min(...finite.slice(1).map((v, i) => Math.abs(v - finite[i])).filter((d) => d > 0));
  const largest = Math.max(...finite.map(Math.abs));
  if (largest < 0.01 && largest > 0) {
    const digits = Math.max(1, Math.ceil(Math.log10(largest / spacing)));
    return values.map((v) => (v === 0 ? "0" : v.toExponential(Math.min(digits, 6))));
  }
  const decimals = Math.max(0, Math.min(8, Math.ceil(-Math.log10(spacing))));
  return values.map((v) => v.toFixed(decimals));
}

class LineChart {
  constructor(el, names, empty = "no points yet") {
    this.el = el;
    this.el.dataset.empty = empty;
    this.names = names;
    this.rows = new Map(); // step -> values by series
    const series = [{ label: "step" }].concat(names.map((name, i) => ({
      label: name, stroke: ["#2563eb", "#dc2626", "#16a34a"][i % 3], width: 2,
      points: { show: true, size: 4 }, spanGaps: true,
    })));
    // The y labels drawn last are kept in data-y-ticks (uPlot draws on a canvas): a test reads them.
    const axes = [{}, { size: 72, values: (u, values) => {
      const labels = ticks(values);
      this.el.dataset.yTicks = JSON.stringify(labels);
      return labels;
    } }];
    this.plot = new uPlot({ width: 440, height: 220, series, axes, scales: { x: { time: false } } },
                          [[]].concat(names.map(() => [])), el);
    this.el.dataset.points = "0";
  }

  add(step, values) {
    const row = this.rows.get(step) || {};
    let added = 0;
    for (const [name, value] of Object.entries(values)) {
      if (this.names.includes(name) && typeof value === "number") { row[name] = value; added++; }
    }
    if (!added) return;
    this.rows.set(step, row);
    const steps = [...this.rows.keys()].sort((a, b) => a - b);
    const data = [steps].concat(this.names.map((n) => steps.map((s) => this.rows.get(s)[n] ?? null)));
    this.plot.setData(data);
    this.el.dataset.points = String(data.slice(1).flat().filter((v) => v !== null).length);
  }

  destroy() { this.plot.destroy(); }
}

// What a job's page plots beyond loss and learning rate, by method: the quality chart's series
// and caption, and the rewards figure's (DPO: per-window rewards; GRPO: the graded reward).
function chartPlan(job) {
  const method = job.spec.method;
  if (method === "dpo") {
    return { caption: "reward accuracy (train window, eval)", quality: ["rewards/accuracies", "eval_rewards/accuracies"],
             perStep: true, rewardsCaption: "DPO rewards (chosen, rejected, margin)",
             rewards: ["rewards/chosen", "rewards/rejected", "rewards/margins"] };
  }
  if (method === "grpo") {
    return { caption: "completion length (tokens)", quality: ["completion_length", "eval_completion_length"],
             perStep: true, rewardsCaption: "reward (window mean, eval mean)",
             rewards: ["reward_mean", "eval_reward_mean"] };
  }
  const causal = job.spec.task === "causal-lm";
  return { caption: causal ? "perplexity" : "accuracy and F1", quality: causal ? ["eval_perplexity"] : ["eval_accuracy", "eval_f1"],
           perStep: false, rewardsCaption: "", rewards: null };
}

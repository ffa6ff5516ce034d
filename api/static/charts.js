// Line charts over uPlot (vendored): one x axis (optimizer step), one or more series; points
// arrive one by one from the stream. Each chart's container carries data-points (a count) so
// that a test, or a curious user, can see that it was drawn.
"use strict";

// Learning rates are small: 3 significant digits, exponent notation below 0.01.
const tick = (v) => (v === 0 ? "0" : Math.abs(v) < 0.01 ? v.toExponential(1) : String(+v.toPrecision(3)));

class LineChart {
  constructor(el, names) {
    this.el = el;
    this.names = names;
    this.rows = new Map(); // step -> values by series
    const series = [{ label: "step" }].concat(names.map((name, i) => ({
      label: name, stroke: ["#2563eb", "#dc2626", "#16a34a"][i % 3], width: 2,
      points: { show: true, size: 4 }, spanGaps: true,
    })));
    const axes = [{}, { size: 64, values: (u, ticks) => ticks.map(tick) }];
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

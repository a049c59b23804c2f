/* The dashboard's charts, drawn by uPlot (uplot.min.js, MIT): /charts and the overview's
   sparklines. Every chart keeps its uPlot instance in window.pgqCharts[id], so what it draws
   (u.data) can be read back (the browser tests compare it with the database). */
(function () {
  "use strict";
  const charts = (window.pgqCharts = window.pgqCharts || {});
  const colours = { completed: "#2a7d4f", failed: "#c0392b", p50: "#2f6db5", p95: "#8e44ad", running: "#d4861b" };
  const bars = window.uPlot && uPlot.paths && uPlot.paths.bars ? uPlot.paths.bars({ size: [0.8, 30] }) : null;

  const SPECS = [
    { id: "chart-completed", unit: "jobs", series: [{ key: "completed", label: "completed", stroke: colours.completed, fill: "rgba(42,125,79,0.35)", bars: true }] },
    { id: "chart-failed", unit: "jobs", series: [{ key: "failed", label: "discarded or cancelled", stroke: colours.failed, fill: "rgba(192,57,43,0.35)", bars: true }] },
    { id: "chart-wait", unit: "seconds", series: [
      { key: "wait_p50", label: "wait p50 (s)", stroke: colours.p50 },
      { key: "wait_p95", label: "wait p95 (s)", stroke: colours.p95 },
    ] },
    { id: "chart-running", unit: "jobs", series: [{ key: "running", label: "running", stroke: colours.running, fill: "rgba(212,134,27,0.2)" }] },
  ];

  function width(el) {
    return Math.max(240, Math.floor(el.getBoundingClientRect().width) || 240);
  }

  function columns(spec, d) {
    return [d.t].concat(spec.series.map(function (s) { return d[s.key]; }));
  }

  function number(u, v) {
    return v == null ? "-" : (Math.round(v * 1000) / 1000).toLocaleString();
  }

  function make(spec, d) {
    const el = document.getElementById(spec.id);
    if (!el) return;
    el.textContent = "";
    const opts = {
      width: width(el),
      height: 180,
      series: [{ label: "time" }].concat(spec.series.map(function (s) {
        return { label: s.label, stroke: s.stroke, fill: s.fill, width: 2, paths: s.bars ? bars : undefined,
                 // Waits exist only where jobs started: points, never a line across the gaps.
                 points: { show: !s.bars && !s.fill, size: 5 }, value: number, spanGaps: false };
      })),
      axes: [{ stroke: "#555" }, { stroke: "#555", label: spec.unit, size: 60, values: function (u, ticks) { return ticks.map(function (t) { return t.toLocaleString(); }); } }],
      scales: { x: { time: true }, y: { range: function (u, min, max) { return [0, Math.max(max || 0, 1) * 1.1]; } } },
      legend: { live: true },
    };
    charts[spec.id] = new uPlot(opts, columns(spec, d), el);
  }

  function drawPage() {
    const holder = document.getElementById("chart-data");
    if (!holder) return;
    let d = JSON.parse(holder.textContent);
    window.pgqChartData = d;
    SPECS.forEach(function (spec) { make(spec, d); });
    const every = Number(holder.dataset.refresh || 0);
    if (every > 0) {
      setInterval(function () {
        fetch(holder.dataset.url, { headers: { Accept: "application/json" } })
          .then(function (r) { if (!r.ok) throw new Error(r.status); return r.json(); })
          .then(function (fresh) {
            window.pgqChartData = d = fresh;
            SPECS.forEach(function (spec) { if (charts[spec.id]) charts[spec.id].setData(columns(spec, d)); });
            const note = document.getElementById("chart-updated");
            if (note) note.textContent = new Date().toISOString().slice(11, 19) + " UTC";
          })
          .catch(function () { /* a failed refresh keeps the last figures */ });
      }, every * 1000);
    }
    // Follow the box's width (a window resized, a scrollbar that appeared after the first draw).
    const watcher = new ResizeObserver(function () {
      SPECS.forEach(function (spec) {
        const el = document.getElementById(spec.id);
        const u = charts[spec.id];
        if (el && u && Math.abs(u.width - width(el)) > 1) u.setSize({ width: width(el), height: 180 });
      });
    });
    SPECS.forEach(function (spec) {
      const el = document.getElementById(spec.id);
      if (el) watcher.observe(el);
    });
  }

  function drawSparks(root) {
    (root || document).querySelectorAll("[data-spark]").forEach(function (el) {
      const d = JSON.parse(el.dataset.spark);
      const id = el.id;
      if (charts[id]) charts[id].destroy();
      el.textContent = "";
      charts[id] = new uPlot({
        width: 180, height: 34, legend: { show: false }, cursor: { show: true, points: { show: false } },
        axes: [{ show: false }, { show: false }],
        scales: { x: { time: true }, y: { range: function (u, min, max) { return [0, Math.max(max || 0, 1)]; } } },
        series: [{}, { label: "completed", stroke: colours.completed, fill: "rgba(42,125,79,0.35)", paths: bars, points: { show: false } },
                     { label: "discarded", stroke: colours.failed, fill: "rgba(192,57,43,0.5)", paths: bars, points: { show: false } }],
      }, [d.t, d.completed, d.discarded], el);
    });
  }

  document.addEventListener("DOMContentLoaded", function () { drawPage(); drawSparks(); });
  // The overview's live part is swapped in by htmx at each refresh: draw its sparklines again.
  document.addEventListener("htmx:afterSettle", function (e) { drawSparks(e.target); });
})();

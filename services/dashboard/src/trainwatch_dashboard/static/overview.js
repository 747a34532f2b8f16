// The overview's charts, drawn with the vendored Chart.js from the data the page was rendered
// with (#overview-data). Bucket times are shown in the viewer's local time.
(function () {
  "use strict";

  const messages = JSON.parse(document.body.dataset.messages || "{}");
  const msg = (key) => messages[key] || key;
  const css = getComputedStyle(document.documentElement);
  const colour = (name, fallback) => (css.getPropertyValue(name) || "").trim() || fallback;

  function durationLabel(seconds) {
    if (seconds < 60) return seconds + "s";
    if (seconds < 3600) return seconds / 60 + "m";
    if (seconds < 86400) return seconds / 3600 + "h";
    return seconds / 86400 + "d";
  }

  // Edges [10, 30, 60] -> "< 10s", "10s–30s", "30s–1m", "≥ 1m".
  function histogramLabels(edges) {
    const labels = [];
    edges.forEach((edge, i) => {
      labels.push(i === 0 ? "< " + durationLabel(edge) : durationLabel(edges[i - 1]) + "–" + durationLabel(edge));
    });
    if (edges.length) labels.push("≥ " + durationLabel(edges[edges.length - 1]));
    return labels;
  }

  function hourLabels(buckets) {
    const format = new Intl.DateTimeFormat(document.documentElement.lang || undefined, {
      month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", hourCycle: "h23",
    });
    return buckets.map((b) => format.format(new Date(b.start)));
  }

  const charts = {};

  function draw(id, config) {
    const canvas = document.getElementById(id);
    if (!canvas || !window.Chart) return;
    config.options = Object.assign({
      responsive: true, maintainAspectRatio: false, animation: false,
      plugins: { legend: { display: false } },
      scales: { y: { beginAtZero: true, ticks: { precision: 0 } } },
    }, config.options || {});
    charts[id] = new window.Chart(canvas, config);
    canvas.dataset.drawn = "yes";
  }

  function bars(id, labels, data, colourName, fallback, label) {
    draw(id, { type: "bar", data: { labels, datasets: [{ label, data, backgroundColor: colour(colourName, fallback) }] } });
  }

  document.addEventListener("DOMContentLoaded", () => {
    const source = document.getElementById("overview-data");
    if (!source) return;
    const data = JSON.parse(source.textContent || "{}");
    const activity = data.activity || {};
    const failures = activity.failures || [];
    const running = activity.running || [];
    bars("chart-failures", hourLabels(failures), failures.map((b) => b.count), "--failed", "#d64545", msg("overview.failures"));
    draw("chart-running", {
      type: "line",
      data: {
        labels: hourLabels(running),
        datasets: [{
          label: msg("overview.running"), data: running.map((b) => b.count), fill: true, tension: 0.25,
          borderColor: colour("--running", "#2f6fed"), backgroundColor: "rgba(47, 111, 237, 0.15)", pointRadius: 0,
        }],
      },
    });
    const durations = data.durations || {};
    for (const [id, key, name] of [["chart-queue-wait", "queue_wait", "--pending"], ["chart-run-time", "run_time", "--succeeded"]]) {
      const h = durations[key] || { edges_seconds: [], counts: [] };
      bars(id, histogramLabels(h.edges_seconds), h.counts, name, "#8a94a6", msg("overview.jobs"));
    }
    const reasons = (data.reasons || {}).reasons || [];
    draw("chart-reasons", {
      type: "bar",
      data: {
        labels: reasons.map((r) => r.reason || msg("overview.no_reason")),
        datasets: [{ label: msg("overview.jobs"), data: reasons.map((r) => r.count), backgroundColor: colour("--failed", "#d64545") }],
      },
      options: { indexAxis: "y", scales: { x: { beginAtZero: true, ticks: { precision: 0 } } } },
    });
    window.__overviewCharts = charts; // for the browser tests
  });
})();

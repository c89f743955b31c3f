// Headroom console: small progressive enhancements. Every page works without this file;
// it adds live slider labels, auto-submitting pickers, confirmations and the charts.
(function () {
  "use strict";

  var STATUS_COLOURS = { active: "#1a7f37", retired: "#6e7781", rejected: "#c62828" };
  var SERIES = ["#2457c5", "#d1242f", "#1a7f37", "#9a6700", "#8250df"];

  function readJson(id) {
    var node = document.getElementById(id);
    return node ? JSON.parse(node.textContent) : null;
  }

  function clock(ms) {
    var d = new Date(ms);
    return d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  }

  var builders = {
    // Held-out MAPE of every version, in order of creation, coloured by status.
    mape: function (data) {
      var times = data.map(function (v) { return Date.parse(v.at); });
      var first = Math.min.apply(null, times), last = Math.max.apply(null, times);
      var pad = Math.max((last - first) * 0.03, 30000);  // one version alone still gets an axis
      return {
        type: "scatter",
        data: {
          datasets: [{
            label: "held-out MAPE (%)",
            data: data.map(function (v) { return { x: Date.parse(v.at), y: v.mape * 100, id: v.id, status: v.status }; }),
            showLine: true,
            borderColor: "#9aa4b2",
            borderWidth: 1,
            pointRadius: 3.5,
            pointBackgroundColor: data.map(function (v) { return STATUS_COLOURS[v.status] || "#2457c5"; }),
            pointBorderWidth: 0
          }]
        },
        options: {
          animation: false, maintainAspectRatio: false,
          scales: {
            x: { type: "linear", min: first - pad, max: last + pad, title: { display: true, text: "trained at" }, ticks: { callback: clock, maxTicksLimit: 8 } },
            y: { beginAtZero: true, title: { display: true, text: "MAPE (%)" } }
          },
          plugins: {
            legend: { display: false },
            tooltip: { callbacks: { label: function (c) { return "v" + c.raw.id + " (" + c.raw.status + "): " + c.raw.y.toFixed(2) + " %"; } } }
          }
        }
      };
    },
    // Predicted against actual on the held-out rows; the diagonal is a perfect prediction.
    scatter: function (data) {
      var points = data.points.map(function (p) { return { x: p[0], y: p[1] }; });
      var hi = 0, lo = Infinity;
      points.forEach(function (p) { hi = Math.max(hi, p.x, p.y); lo = Math.min(lo, p.x, p.y); });
      return {
        type: "scatter",
        data: {
          datasets: [
            { label: "held-out rows", data: points, pointRadius: 2, backgroundColor: "rgba(36,87,197,0.45)" },
            { label: "perfect", data: [{ x: lo, y: lo }, { x: hi, y: hi }], type: "line", borderColor: "#c62828", borderWidth: 1, pointRadius: 0, borderDash: [5, 4] }
          ]
        },
        options: {
          animation: false, maintainAspectRatio: false,
          scales: {
            // Latencies span orders of magnitude (idle pod to saturated): log axes show them all.
            x: { type: "logarithmic", title: { display: true, text: "actual (ms, log scale)" } },
            y: { type: "logarithmic", title: { display: true, text: "predicted (ms, log scale)" } }
          }
        }
      };
    },
    // What-if: one line per policy (e.g. a CDF or a metric over time), from {labels?, series}.
    lines: function (data) {
      return {
        type: "scatter",
        data: {
          datasets: data.series.map(function (s, i) {
            return { label: s.label, data: s.points.map(function (p) { return { x: p[0], y: p[1] }; }), showLine: true, pointRadius: 0, borderWidth: 2, borderColor: SERIES[i % SERIES.length], backgroundColor: SERIES[i % SERIES.length] };
          })
        },
        options: {
          animation: false, maintainAspectRatio: false,
          scales: {
            x: { type: data.xlog ? "logarithmic" : "linear", title: { display: true, text: data.x } },
            y: { title: { display: true, text: data.y }, beginAtZero: true }
          }
        }
      };
    },
    // What-if: grouped bars, one group per metric, one bar per policy.
    bars: function (data) {
      return {
        type: "bar",
        data: {
          labels: data.labels,
          datasets: data.series.map(function (s, i) {
            return { label: s.label, data: s.values, backgroundColor: SERIES[i % SERIES.length] };
          })
        },
        options: { animation: false, maintainAspectRatio: false, scales: { y: { beginAtZero: true, title: { display: true, text: data.y } } } }
      };
    }
  };

  function drawCharts(root) {
    if (typeof window.Chart === "undefined") return;  // the tables carry the same numbers
    root.querySelectorAll("canvas[data-chart]").forEach(function (canvas) {
      var build = builders[canvas.dataset.chart];
      var data = readJson(canvas.dataset.source);
      if (!build || data === null) return;
      var old = window.Chart.getChart(canvas);
      if (old) old.destroy();
      new window.Chart(canvas, build(data));
    });
  }

  function weightLabel(input) {
    var out = document.querySelector("output[for='" + input.id + "']");
    if (!out) return;
    var ttft = Math.round(parseFloat(input.value) * 100);
    out.textContent = "TTFT " + ttft + " / TPOT " + (100 - ttft);
  }

  document.addEventListener("input", function (e) {
    if (e.target.matches && e.target.matches("input[data-weight]")) weightLabel(e.target);
  });
  document.addEventListener("change", function (e) {
    if (e.target.matches && e.target.matches("[data-autosubmit]")) e.target.form.requestSubmit();
  });
  document.addEventListener("submit", function (e) {
    var message = e.target.dataset ? e.target.dataset.confirm : null;
    if (message && !window.confirm(message)) e.preventDefault();
  });

  function ready() {
    drawCharts(document);
    document.querySelectorAll("input[data-weight]").forEach(weightLabel);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", ready);
  else ready();
  // Fragments swapped in by htmx (what-if progress, overview refresh) may carry new charts.
  document.addEventListener("htmx:afterSettle", function (e) { drawCharts(e.target); });
})();

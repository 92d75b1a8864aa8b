// Charts drawn by Chart.js (node_modules/chart.js, served as a static file) from the JSON the
// page carries beside each <canvas data-chart="JSON element id">. The page also shows the same
// numbers as a table, so a chart that cannot be drawn loses no information.
(() => {
  "use strict";
  const PALETTE = ["#1f4e79", "#2e7d6b", "#d08c2f", "#8e44ad", "#c0392b", "#16a085", "#6c757d"];

  const utcText = (milliseconds, withTime) => {
    const text = new Date(milliseconds).toISOString();
    return withTime ? `${text.slice(0, 10)} ${text.slice(11, 16)}` : text.slice(0, 10);
  };

  // Amounts as the pages write them (computeshare/figures.py): to the cent, "< 0.01" for a
  // value under a cent but not zero; prices (rates) with the digits they have, at least two.
  // Never Chart.js's own format, which writes a small axis as "1.00000E-4".
  const moneyText = (value) => {
    if (value !== 0 && Math.abs(value) < 0.005) return value > 0 ? "< 0.01" : "> -0.01";
    return value.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
  };
  const priceText = (value) =>
    value.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 6 });

  // A money axis steps by whole cents and reaches a cent at least: a day of a few seconds'
  // jobs still draws, on an axis of 0.00 to 0.01.
  const moneyAxis = (unit) => ({
    suggestedMax: 0.01,
    ticks: { precision: 2, callback: (value) => moneyText(value) },
    title: { display: true, text: unit },
  });

  function seriesChart(canvas, data) {
    const stacked = canvas.dataset.kind === "stacked";
    const y = data.money
      ? { stacked, beginAtZero: true, ...moneyAxis(data.unit) }
      : { stacked, beginAtZero: true, title: { display: true, text: data.unit } };
    const tooltip = data.money
      ? { callbacks: { label: (item) => `${item.dataset.label}: ${moneyText(item.parsed.y)} ${data.unit}` } }
      : {};
    return {
      type: "bar",
      data: {
        labels: data.labels,
        datasets: data.datasets.map((dataset, index) => ({
          label: dataset.label,
          data: dataset.data,
          backgroundColor: PALETTE[index % PALETTE.length],
        })),
      },
      options: {
        scales: {
          x: { stacked, ticks: { maxRotation: 0, autoSkip: true, maxTicksLimit: 8 } },
          y,
        },
        plugins: { tooltip },
      },
    };
  }

  // The price history: x is when each auction closed (milliseconds since 1970, UTC), y the
  // clearing price; a linear axis whose ticks are written as UTC dates, so no date adapter.
  function priceChart(canvas, data) {
    const span = data.points.length > 1 ? data.points.at(-1).x - data.points[0].x : 0;
    const withTime = span < 7 * 86400 * 1000;
    return {
      type: "line",
      data: {
        datasets: [{
          label: `Clearing price (${data.unit} per unit)`,
          data: data.points,
          borderColor: PALETTE[0],
          backgroundColor: PALETTE[1],
          pointRadius: 4,
          tension: 0,
        }],
      },
      options: {
        parsing: false,
        scales: {
          x: {
            type: "linear",
            min: span ? undefined : data.points[0].x - 3600 * 1000,
            max: span ? undefined : data.points[0].x + 3600 * 1000,
            title: { display: true, text: "auction closed (UTC)" },
            ticks: { maxTicksLimit: 5, callback: (value) => utcText(value, withTime) },
          },
          y: {
            beginAtZero: true,
            ticks: { callback: (value) => priceText(value) },
            title: { display: true, text: `${data.unit} per unit` },
          },
        },
        plugins: {
          legend: { display: false },
          tooltip: {
            callbacks: {
              title: (items) => `${utcText(items[0].parsed.x, true)} UTC`,
              label: (item) => `${item.raw.label} ${data.unit}`,
            },
          },
        },
      },
    };
  }

  function draw(canvas) {
    const source = document.getElementById(canvas.dataset.chart);
    if (!source || typeof Chart === "undefined") return;
    const data = JSON.parse(source.textContent);
    const config = canvas.dataset.kind === "price" ? priceChart(canvas, data) : seriesChart(canvas, data);
    config.options.responsive = true;
    config.options.maintainAspectRatio = false;
    // Drawn at once: no motion to sit through, and a screenshot never catches one half-drawn.
    config.options.animation = false;
    canvas.chart = new Chart(canvas, config);
  }

  document.addEventListener("DOMContentLoaded", () => {
    document.querySelectorAll("canvas[data-chart]").forEach(draw);
  });
})();

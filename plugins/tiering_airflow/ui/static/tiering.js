/* The Tiering page's behaviour: the topic filter (kept in the URL's ?topic= and in localStorage,
   so it survives a reload, also inside Airflow's iframe), the open topics (localStorage), and on
   opening a topic its partitions (fragments/partitions, a page of rows at a time) and its charts
   (api/series, drawn with uPlot). Every URL is relative to the page. */
(function () {
  "use strict";
  var FILTER_KEY = "tiering.page.filter";
  var OPEN_KEY = "tiering.page.open";
  var config = JSON.parse(document.getElementById("tiering-data").textContent);
  var topics = Array.prototype.slice.call(document.querySelectorAll("details.topic"));
  var input = document.getElementById("topic-filter");
  var charts = [];
  /* Each chart spans its whole window, ending now, however few points it has yet. */
  var WINDOW_SECONDS = { "24h": 86400, "7d": 7 * 86400 };

  function store(key, value) {
    try { window.localStorage.setItem(key, value); } catch (e) { /* storage off: the URL still keeps it */ }
  }
  function stored(key) {
    try { return window.localStorage.getItem(key); } catch (e) { return null; }
  }

  /* Axis and legend labels in the units of tiering_core.humanize.fmt_bytes. */
  function size(n) {
    if (n == null) return "-";
    var units = ["B", "KiB", "MiB", "GiB"];
    for (var i = 0; i < units.length; i++) {
      if (Math.abs(n) < 1024 || i === units.length - 1) return i === 0 ? Math.round(n) + " B" : n.toFixed(1) + " " + units[i];
      n /= 1024;
    }
  }

  function applyFilter(value, remember) {
    var needle = value.trim().toLowerCase();
    topics.forEach(function (d) {
      d.hidden = needle !== "" && d.getAttribute("data-topic").toLowerCase().indexOf(needle) < 0;
    });
    if (!remember) return;
    store(FILTER_KEY, value);
    var url = new URL(window.location.href);
    if (value) url.searchParams.set("topic", value); else url.searchParams.delete("topic");
    window.history.replaceState(null, "", url.toString());
  }

  function openTopics() {
    try { return JSON.parse(stored(OPEN_KEY) || "[]"); } catch (e) { return []; }
  }

  function fetchText(url) {
    return fetch(url, { credentials: "same-origin" }).then(function (r) {
      return r.text().then(function (t) { if (!r.ok) throw new Error("HTTP " + r.status); return t; });
    });
  }

  function drawChart(figure, topic) {
    var plot = figure.querySelector(".plot");
    var url = "api/series?topic=" + encodeURIComponent(topic) + "&window=" + encodeURIComponent(figure.getAttribute("data-window"));
    fetchText(url).then(function (t) {
      var s = JSON.parse(t);
      var span = WINDOW_SECONDS[figure.getAttribute("data-window")] || 86400;
      var opts = {
        width: Math.max(plot.clientWidth, 200),
        height: 200,
        scales: {
          x: { time: true, range: function () { var now = Date.now() / 1000; return [now - span, now]; } },
          y: { range: function (u, min, max) { return [0, max > 0 ? max * 1.1 : 1024]; } }
        },
        axes: [{}, { size: 70, values: function (u, ticks) { return ticks.map(size); } }],
        series: [
          {},
          { label: "Remote size", stroke: "#0b5cad", width: 2, fill: "rgba(11,92,173,0.12)", value: function (u, v) { return size(v); } },
          { label: "Copy lag", stroke: "#b3261e", width: 2, value: function (u, v) { return size(v); } }
        ]
      };
      var chart = new uPlot(opts, [s.at, s.remote_bytes, s.copy_lag_bytes], plot);
      chart.root.setAttribute("data-points", String(s.at.length));
      charts.push({ chart: chart, plot: plot });
      if (!s.at.length) plot.insertAdjacentHTML("beforeend", "<p class='empty'>No observations in this window yet.</p>");
    }).catch(function (e) {
      plot.textContent = "Chart unavailable: " + e.message;
    });
  }

  /* A broker's view (?broker=N) narrows every partition table to that broker's replicas. */
  function partitionsUrl(topic, offset) {
    var url = "fragments/partitions?topic=" + encodeURIComponent(topic) + "&offset=" + offset;
    return config.broker == null ? url : url + "&broker=" + encodeURIComponent(config.broker);
  }

  /* The first screen's chart: the bytes copied per bucket over the last 24 hours, from the store's
     recorded history (embedded in the page: no request of its own). */
  function drawCopyHistory() {
    var figure = document.querySelector("figure.copy-history");
    var h = config.copy_history;
    if (!figure || !h) return;
    var plot = figure.querySelector(".plot");
    var opts = {
      width: Math.max(plot.clientWidth, 200),
      height: 160,
      scales: {
        x: { time: true, range: function () { var now = Date.now() / 1000; return [now - 86400, now]; } },
        y: { range: function (u, min, max) { return [0, max > 0 ? max * 1.1 : 1024]; } }
      },
      axes: [{}, { size: 70, values: function (u, ticks) { return ticks.map(size); } }],
      series: [
        {},
        { label: "Copied", stroke: "#2f7d32", width: 2, fill: "rgba(47,125,50,0.15)", paths: uPlot.paths.bars({ size: [0.9, 12] }), value: function (u, v) { return size(v); } }
      ]
    };
    var chart = new uPlot(opts, [h.at, h.bytes], plot);
    chart.root.setAttribute("data-points", String(h.at.length));
    charts.push({ chart: chart, plot: plot, height: 160 });
    if (!h.at.length) plot.insertAdjacentHTML("beforeend", "<p class='empty'>No copy finished in the last 24 hours.</p>");
  }

  /* The next rows of a topic's table: appended to its table, the button replaced by the next one. */
  function more(wrap, topic, button) {
    button.disabled = true;
    fetchText(partitionsUrl(topic, button.getAttribute("data-offset"))).then(function (t) {
      var next = document.createElement("div");
      next.innerHTML = t;
      var body = wrap.querySelector("table.partitions tbody");
      Array.prototype.slice.call(next.querySelectorAll("table.partitions tbody tr")).forEach(function (tr) { body.appendChild(tr); });
      var old = wrap.querySelector("p.more");
      var fresh = next.querySelector("p.more");
      if (fresh) old.replaceWith(fresh); else old.remove();
    }).catch(function (e) { button.disabled = false; button.textContent = "Retry (" + e.message + ")"; });
  }

  function load(d) {
    if (d.getAttribute("data-loaded")) return;
    d.setAttribute("data-loaded", "1");
    var topic = d.getAttribute("data-topic");
    var wrap = d.querySelector(".partitions-wrap");
    fetchText(partitionsUrl(topic, 0)).then(function (t) { wrap.innerHTML = t; }).catch(function (e) {
      wrap.textContent = "Partitions unavailable: " + e.message;
    });
    wrap.addEventListener("click", function (ev) {
      var button = ev.target.closest("p.more button");
      if (button) more(wrap, topic, button);
    });
    Array.prototype.forEach.call(d.querySelectorAll("figure.chart"), function (f) { drawChart(f, topic); });
  }

  topics.forEach(function (d) {
    d.addEventListener("toggle", function () {
      var open = openTopics().filter(function (t) { return t !== d.getAttribute("data-topic"); });
      if (d.open) { open.push(d.getAttribute("data-topic")); load(d); }
      store(OPEN_KEY, JSON.stringify(open));
    });
  });

  drawCopyHistory();

  var initial = new URL(window.location.href).searchParams.get("topic");
  if (initial === null) initial = stored(FILTER_KEY) || "";
  input.value = initial;
  applyFilter(initial, false);
  input.addEventListener("input", function () { applyFilter(input.value, true); });

  var remembered = openTopics();
  var visible = topics.filter(function (d) { return !d.hidden; });
  topics.forEach(function (d) {
    if (remembered.indexOf(d.getAttribute("data-topic")) >= 0) d.open = true;
  });
  if (visible.length === 1) visible[0].open = true;  /* a filter that names one topic: open it */

  /* Links into Airflow's UI (DAG grids, task logs). Airflow shows this page in a sandboxed iframe
     of the same origin that may not navigate the top window: the link is handed to Airflow's own
     router (its history and a popstate event), so the DAG opens in Airflow's frame, not nested in
     this one. Anything else (the page opened on its own, a modified click) is a plain link. */
  document.addEventListener("click", function (ev) {
    var a = ev.target.closest ? ev.target.closest("a.airflow") : null;
    if (!a || window.top === window || ev.button !== 0 || ev.metaKey || ev.ctrlKey || ev.shiftKey || ev.altKey) return;
    try {
      var url = new URL(a.getAttribute("href"), window.location.href);
      var top = window.top;
      if (top.location.origin !== url.origin) return;
      top.history.pushState(null, "", url.pathname + url.search + url.hash);
      top.dispatchEvent(new top.PopStateEvent("popstate", { state: null }));
      ev.preventDefault();
    } catch (e) { /* Airflow's frame is out of reach: the link opens here */ }
  });

  var resizing = null;
  window.addEventListener("resize", function () {
    clearTimeout(resizing);
    resizing = setTimeout(function () {
      charts.forEach(function (c) { c.chart.setSize({ width: Math.max(c.plot.clientWidth, 200), height: c.height || 200 }); });
    }, 100);
  });
  window.tieringPage = { windows: config.windows, charts: charts };
})();

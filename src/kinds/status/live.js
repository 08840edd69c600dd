// pika's live status view (served at the status page's own path with ?js, so a
// Content-Security-Policy of script-src 'self' allows it). Every second it reads
// ?json from the same path and draws the last five minutes: requests per second,
// and busy and idle workers, as SVG polylines; it refreshes the figures, the
// scoreboard, the workers' table and the upstreams' from the same answer. It writes text with
// textContent and draws with attributes, never with markup or style attributes.
"use strict";
(function () {
  const PERIOD = 1000; // ms between reads of ?json
  const KEEP = 300; // samples kept: five minutes at one a second
  const W = 600; // the charts' viewBox width; heights are read from each svg
  const PAD = 4; // room above and below, so a line at the top or at 0 shows
  const samples = []; // {rps, busy, idle}
  let last = null; // the previous answer's {at, total}

  const byId = (id) => document.getElementById(id);

  // Ceiling of the y axis: 1, 2 or 5 times a power of ten, at least the largest value.
  function scale(max) {
    if (!(max > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(max)));
    for (const m of [1, 2, 5, 10]) {
      if (m * p >= max) return m * p;
    }
    return 10 * p;
  }

  // The points of one series: the newest sample at the right edge.
  function points(values, top, height) {
    const step = W / (KEEP - 1);
    const off = KEEP - values.length;
    const out = [];
    values.forEach((v, i) => {
      if (v === null) return;
      const y = PAD + (height - 2 * PAD) * (1 - v / top);
      out.push(((off + i) * step).toFixed(1) + "," + y.toFixed(1));
    });
    return out.join(" ");
  }

  // Draws `series` (name → values) into the chart `id`; says the scale in its caption.
  function chart(id, series, unit) {
    const svg = byId(id);
    if (!svg) return;
    const height = svg.viewBox.baseVal.height;
    const max = Math.max(0, ...Object.values(series).flat().filter((v) => v !== null));
    const top = scale(max);
    for (const [name, values] of Object.entries(series)) {
      const line = svg.querySelector("polyline." + name);
      if (line) line.setAttribute("points", points(values, top, height));
    }
    svg.dataset.samples = String(samples.length);
    const axis = byId(id + "-top");
    if (axis) axis.textContent = "0–" + top + " " + unit;
  }

  function put(key, text) {
    for (const e of document.querySelectorAll('[data-k="' + key + '"]')) e.textContent = text;
  }

  function cell(row, text) {
    row.insertCell().textContent = text;
  }

  // The workers' table: its header row kept, one row per worker after it.
  function table(workers) {
    const t = byId("workers");
    if (!t) return;
    while (t.rows.length > 1) t.deleteRow(1);
    for (const w of workers) {
      const r = t.insertRow();
      cell(r, w.slot);
      cell(r, w.pid);
      cell(r, w.generation);
      cell(r, w.state);
      cell(r, w.requests);
      cell(r, w.worker_requests);
      cell(r, w.bytes);
      cell(r, w.seconds.toFixed(1));
      cell(r, w.conns_keepalive);
      cell(r, w.conns_closing);
      cell(r, w.cpu === null ? "" : w.cpu);
      cell(r, w.client);
      cell(r, w.request);
    }
  }

  // The upstreams' table (the proxy locations'), as the page draws it: its header
  // row kept, one row per upstream after it.
  function upstreams(list) {
    const t = byId("upstreams");
    if (!t || !list) return;
    while (t.rows.length > 1) t.deleteRow(1);
    for (const u of list) {
      const r = t.insertRow();
      cell(r, u.name);
      cell(r, u.up ? "up" : "down (" + u.down_for + " s more)");
      cell(r, u.backup ? "backup" : "primary");
      cell(r, u.active);
      for (const c of ["1xx", "2xx", "3xx", "4xx", "5xx"]) cell(r, u.answered[c]);
      cell(r, u.failed);
    }
  }

  function show(s) {
    const at = performance.now();
    let rps = null;
    if (last && s.total_accesses >= last.total && at > last.at) {
      rps = ((s.total_accesses - last.total) * 1000) / (at - last.at);
    }
    last = { at: at, total: s.total_accesses };
    samples.push({ rps: rps, busy: s.busy_workers, idle: s.idle_workers });
    if (samples.length > KEEP) samples.shift();
    chart("chart-rps", { rps: samples.map((x) => x.rps) }, "req/s");
    chart("chart-workers", { busy: samples.map((x) => x.busy), idle: samples.map((x) => x.idle) }, "workers");
    put("rps-now", rps === null ? "…" : rps.toFixed(1));
    put("busy_workers", s.busy_workers);
    put("idle_workers", s.idle_workers);
    for (const k of ["pid", "generation", "uptime", "total_accesses", "conns_total", "conns_keepalive", "conns_writing", "conns_closing", "conns_tunnels"]) {
      put(k, s[k]);
    }
    put("total_kb", Math.floor(s.total_bytes / 1024));
    put("req_per_sec", s.req_per_sec.toFixed(2));
    put("scoreboard", s.scoreboard);
    put("updated", new Date().toLocaleTimeString());
    table(s.workers);
    upstreams(s.upstreams);
  }

  function tick() {
    fetch(location.pathname + "?json", { cache: "no-store" })
      .then((r) => (r.ok ? r.json() : Promise.reject(new Error("HTTP " + r.status))))
      .then(show, (e) => put("updated", "not updated: " + e.message))
      .finally(() => setTimeout(tick, PERIOD));
  }

  byId("live").hidden = false;
  tick();
})();

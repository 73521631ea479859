// Phaseless dashboard: instant filtering of the device list, and the live
// pools page, which polls /ui/api/live once a second. No framework, no build.
"use strict";

(function () {
  const page = document.body.dataset.page;

  function filterDevices() {
    const input = document.getElementById("device-filter");
    if (!input) return;
    const apply = () => {
      const q = input.value.trim().toLowerCase();
      for (const tr of document.querySelectorAll("#devices tbody tr[data-search]")) {
        tr.hidden = q !== "" && !tr.dataset.search.toLowerCase().includes(q);
      }
    };
    input.addEventListener("input", apply);
  }

  const fmt = (v, digits) => (v === null || v === undefined || Number.isNaN(v)) ? "–" : v.toFixed(digits);
  const pct = (v) => fmt(v * 100, 1) + "%";

  function drawChart(canvas, points, keyA, keyB) {
    const ctx = canvas.getContext("2d");
    const w = canvas.width, h = canvas.height, pad = 28;
    ctx.clearRect(0, 0, w, h);
    ctx.strokeStyle = "#ccd"; ctx.lineWidth = 1;
    ctx.strokeRect(pad, 4, w - pad - 4, h - pad);
    const vals = points.flatMap((p) => [p[keyA], p[keyB]]).filter((v) => v !== null);
    const top = vals.length ? Math.max(...vals) * 1.1 : 1;
    ctx.fillStyle = "#556"; ctx.font = "11px sans-serif";
    ctx.fillText(fmt(top, top < 10 ? 2 : 0), 2, 12);
    ctx.fillText("0", 2, h - pad);
    if (points.length < 2) return;
    const t0 = points[0].t, t1 = points[points.length - 1].t;
    const x = (t) => pad + (w - pad - 4) * (t1 === t0 ? 1 : (t - t0) / (t1 - t0));
    const y = (v) => 4 + (h - pad) * (1 - v / top);
    for (const [key, color] of [[keyA, "#2a6fdb"], [keyB, "#e0782f"]]) {
      ctx.strokeStyle = color; ctx.lineWidth = 2; ctx.beginPath();
      let pen = false;
      for (const p of points) {
        if (p[key] === null) { pen = false; continue; }
        if (pen) ctx.lineTo(x(p.t), y(p[key])); else ctx.moveTo(x(p.t), y(p[key]));
        pen = true;
      }
      ctx.stroke();
    }
    ctx.fillStyle = "#556";
    ctx.fillText(Math.round((t1 - t0) / 1000) + " s", w - 40, h - 8);
  }

  function setCells(selector, attr, rows, cells) {
    for (const row of rows) {
      const tr = document.querySelector(selector + " tr[" + attr + '="' + CSS.escape(row.key) + '"]');
      if (!tr) continue;
      for (const [cls, text] of Object.entries(cells(row.v))) {
        const td = tr.querySelector("." + cls);
        if (td && td.textContent !== text) td.textContent = text;
      }
    }
  }

  function lastWith(points, key) {
    for (let i = points.length - 1; i >= 0; i--) if (points[i][key] !== null) return points[i][key];
    return null;
  }

  async function poll() {
    const status = document.getElementById("live-status");
    try {
      const resp = await fetch("/ui/api/live", { headers: { Accept: "application/json" }, credentials: "same-origin" });
      if (!resp.ok) throw new Error("HTTP " + resp.status);
      const v = await resp.json();
      drawChart(document.getElementById("chart-ttft"), v.points, "ttft_p50_ms", "ttft_p95_ms");
      drawChart(document.getElementById("chart-itl"), v.points, "itl_p50_ms", "itl_p95_ms");
      document.getElementById("ttft-now").textContent = fmt(lastWith(v.points, "ttft_p50_ms"), 1) + " ms";
      document.getElementById("itl-now").textContent = fmt(lastWith(v.points, "itl_p50_ms"), 2) + " ms";
      document.getElementById("tokens-total").textContent = String(v.output_tokens_total);
      const last = v.points[v.points.length - 1];
      document.getElementById("tokens-ps").textContent = last ? fmt(last.tokens_per_s, 1) : "–";
      document.getElementById("batch-mean").textContent = fmt(lastWith(v.points, "batch_mean"), 2);
      setCells("#pools", "data-pool", (v.pools || []).map((p) => ({ key: p.name, v: p })), (p) => ({
        "v-workers": String(p.workers), "v-run": p.running + " / " + p.capacity, "v-util": pct(p.utilization), "v-queue": String(p.queued),
      }));
      setCells("#workers", "data-worker", (v.workers || []).map((w) => ({ key: w.Name, v: w })), (w) => ({
        "v-inflight": String(w.Inflight), "v-queue": String(w.Queued), "v-cap": String(w.Capacity),
        "v-kv": pct(w.KVUsage), "v-tokens": String(w.OutputTokens),
        "v-hits": w.PromptTokens ? pct(w.PrefixHitTokens / w.PromptTokens) : "0.0%",
      }));
      status.textContent = "live · updated " + new Date().toLocaleTimeString();
      status.className = "";
    } catch (err) {
      status.textContent = "live updates paused: " + err.message;
      status.className = "error";
    }
  }

  if (page === "devices") filterDevices();
  if (page === "pools") {
    poll();
    setInterval(poll, 1000);
  }
})();

// Inline-SVG charts for the dashboard (no library, no CDN).
"use strict";
const SS_COLORS = ["#2d6cdf", "#e07b39", "#1f8a4c", "#8e44ad", "#c0392b", "#16a085", "#7f8c8d"];
const SVG_NS = "http://www.w3.org/2000/svg";

function svgEl(tag, attrs, parent) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}

function fmtNum(v) {
  if (v === null || v === undefined || isNaN(v)) return "-";
  const a = Math.abs(v);
  if (a >= 1e9) return (v / 1e9).toFixed(1) + "G";
  if (a >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (a >= 1e4) return (v / 1e3).toFixed(0) + "k";
  if (a >= 100) return v.toFixed(0);
  if (a >= 1) return v.toFixed(1);
  return v.toFixed(3);
}

// series: [{name, points: [[x, y], ...]}]; draws into the <svg> `svg` (replacing its content).
function lineChart(svg, series, opts) {
  opts = opts || {};
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const W = svg.clientWidth || 600, H = svg.clientHeight || 200;
  const L = 48, R = 10, T = 10, B = 22;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const pts = series.flatMap(s => s.points);
  svg.dataset.points = String(pts.length);
  if (!pts.length) {
    svgEl("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, svg).textContent = "no data yet";
    return;
  }
  let x0 = Math.min(...pts.map(p => p[0])), x1 = Math.max(...pts.map(p => p[0]));
  let y1 = Math.max(...pts.map(p => p[1])) * 1.1 || 1;
  if (x1 === x0) { x1 = x0 + 1; }
  const sx = x => L + (x - x0) / (x1 - x0) * (W - L - R);
  const sy = y => H - B - (y / y1) * (H - T - B);
  svgEl("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis" }, svg);
  svgEl("line", { x1: L, y1: T, x2: L, y2: H - B, class: "axis" }, svg);
  for (let i = 0; i <= 4; i++) {
    const y = y1 * i / 4;
    svgEl("text", { x: L - 4, y: sy(y) + 3, "text-anchor": "end" }, svg).textContent = fmtNum(y);
    if (i) svgEl("line", { x1: L, y1: sy(y), x2: W - R, y2: sy(y), class: "axis", "stroke-dasharray": "2,3" }, svg);
  }
  // x is an epoch or checkpoint id: whole-number ticks
  const step = Math.max(1, Math.ceil((x1 - x0) / 6));
  for (let x = Math.ceil(x0); x <= x1; x += step) {
    svgEl("text", { x: sx(x), y: H - 6, "text-anchor": "middle" }, svg).textContent = String(x);
  }
  series.forEach((s, i) => {
    if (!s.points.length) return;
    const d = s.points.map((p, j) => (j ? "L" : "M") + sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1)).join(" ");
    svgEl("path", { d, class: "series", stroke: s.color || SS_COLORS[i % SS_COLORS.length] }, svg)
      .appendChild(svgEl("title", {})).textContent = s.name;
    if (s.points.length === 1) {
      const p = s.points[0];
      svgEl("circle", { cx: sx(p[0]), cy: sy(p[1]), r: 3, fill: s.color || SS_COLORS[i % SS_COLORS.length] }, svg);
    }
  });
}

function legend(el, names) {
  el.innerHTML = names.map((n, i) =>
    `<span><i style="background:${SS_COLORS[i % SS_COLORS.length]}"></i>${escapeHtml(n)}</span>`).join("");
}

function escapeHtml(s) {
  return String(s).replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

// vertices: [{id, name, parallelism, upstream: [ids]}]: boxes in columns by depth, edges as arrows.
function operatorGraph(svg, vertices) {
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const depth = {};
  const byId = Object.fromEntries(vertices.map(v => [v.id, v]));
  const d = v => depth[v.id] !== undefined ? depth[v.id]
    : (depth[v.id] = v.upstream.length ? 1 + Math.max(...v.upstream.map(u => byId[u] ? d(byId[u]) : 0)) : 0);
  vertices.forEach(d);
  const cols = {};
  vertices.forEach(v => (cols[depth[v.id]] = cols[depth[v.id]] || []).push(v));
  const BW = 230, BH = 54, GX = 60, GY = 18;
  const ncol = Object.keys(cols).length, nrow = Math.max(...Object.values(cols).map(c => c.length));
  const W = ncol * (BW + GX), H = nrow * (BH + GY) + 10;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("height", H);
  const defs = svgEl("defs", {}, svg);
  const m = svgEl("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" }, defs);
  svgEl("path", { d: "M0,0 L10,5 L0,10 z", fill: "#8a93a5" }, m);
  const pos = {};
  Object.entries(cols).forEach(([c, vs]) => vs.forEach((v, r) => (pos[v.id] = [c * (BW + GX) + 5, r * (BH + GY) + 5])));
  vertices.forEach(v => v.upstream.forEach(u => {
    if (!pos[u]) return;
    const [ax, ay] = pos[u], [bx, by] = pos[v.id];
    svgEl("path", { class: "edge", d: `M${ax + BW},${ay + BH / 2} C${ax + BW + GX / 2},${ay + BH / 2} ${bx - GX / 2},${by + BH / 2} ${bx},${by + BH / 2}` }, svg);
  }));
  vertices.forEach(v => {
    const [x, y] = pos[v.id];
    const g = svgEl("g", { class: "vertex" }, svg);
    svgEl("rect", { x, y, width: BW, height: BH }, g);
    const name = v.name.length > 36 ? v.name.slice(0, 35) + "…" : v.name;
    svgEl("text", { x: x + 8, y: y + 18, "font-weight": 600 }, g).textContent = `stage ${v.id} · parallelism ${v.parallelism}`;
    svgEl("text", { x: x + 8, y: y + 34 }, g).textContent = name;
    svgEl("text", { x: x + 8, y: y + 48, fill: "#6b7384" }, g).textContent = `${fmtNum(v.metrics["read-records"])} records`;
    svgEl("title", {}, g).textContent = v.name;
  });
}

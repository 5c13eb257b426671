// The streamstate dashboard: a jobs list and a job page, polling the driver's REST API.
"use strict";
const REFRESH_MS = 1000;
let timer = null;
let selectedCheckpoint = null;

// A server bound to a non-loopback address needs the job's token on every read: opened as
// /?token=T, the page keeps T for this tab and takes it out of the address bar.
const TOKEN = (() => {
  const url = new URL(location.href);
  const given = url.searchParams.get("token");
  if (given) {
    sessionStorage.setItem("streamstate-token", given);
    url.searchParams.delete("token");
    history.replaceState(null, "", url.pathname + url.search + url.hash);
  }
  return sessionStorage.getItem("streamstate-token");
})();

async function api(path) {
  const headers = { Accept: "application/json" };
  if (TOKEN) headers.Authorization = "Bearer " + TOKEN;
  const r = await fetch(path, { headers });
  if (r.status === 401) throw new Error("this server needs the job's token: open it as /?token=TOKEN (rest.token)");
  if (!r.ok) throw new Error(`${path}: HTTP ${r.status}`);
  return r.json();
}

function fmtTime(ms) { return ms && ms > 0 ? new Date(ms).toLocaleTimeString() : "-"; }
function fmtDur(ms) {
  if (ms === null || ms === undefined || ms < 0) return "-";
  if (ms < 1000) return ms.toFixed(0) + " ms";
  if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
  return Math.floor(ms / 60000) + " min " + Math.round(ms % 60000 / 1000) + " s";
}
function fmtBytes(b) {
  if (b === null || b === undefined) return "-";
  const u = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
  return (i ? b.toFixed(1) : b) + " " + u[i];
}
const status = s => `<span class="status ${escapeHtml(s)}">${escapeHtml(s)}</span>`;

function setRefreshState(ok, text) {
  document.getElementById("refresh-state").textContent = text || (ok ? "updated " + new Date().toLocaleTimeString() : "");
}

// -- jobs list -----------------------------------------------------------------------------
async function renderJobs(view) {
  const { jobs } = await api("/jobs/overview");
  document.getElementById("job-nav").innerHTML = "";
  view.innerHTML = `<section><h2>Jobs</h2><table id="jobs-table"><thead><tr>
    <th>Name</th><th>Job id</th><th>Status</th><th>Started</th><th>Duration</th><th>Epochs</th>
    <th>Restarts</th><th>Tasks</th></tr></thead><tbody>${jobs.map(j => `
    <tr class="clickable" data-jid="${escapeHtml(j.jid)}"><td><a href="#/job/${escapeHtml(j.jid)}">${escapeHtml(j.name)}</a></td>
    <td class="muted">${escapeHtml(j.jid)}</td><td>${status(j.state)}</td><td>${fmtTime(j["start-time"])}</td>
    <td>${fmtDur(j.duration)}</td><td>${j.epochs}</td><td>${j.restarts}</td><td>${j.tasks.total}</td></tr>`).join("")}
    </tbody></table>${jobs.length ? "" : '<p class="muted">No jobs in this driver.</p>'}</section>`;
  view.querySelectorAll("tr[data-jid]").forEach(tr =>
    tr.addEventListener("click", () => { location.hash = "#/job/" + tr.dataset.jid; }));
}

// -- job page ------------------------------------------------------------------------------
function jobSkeleton(view, jid) {
  document.getElementById("job-nav").innerHTML = ["overview", "checkpoints", "scaling", "exceptions", "configuration"]
    .map(s => `<a href="#/job/${jid}" data-section="${s}">${s[0].toUpperCase() + s.slice(1)}</a>`).join("");
  document.querySelectorAll("#job-nav a").forEach(a => a.addEventListener("click", ev => {
    ev.preventDefault();
    document.getElementById("sec-" + a.dataset.section).scrollIntoView();
  }));
  view.innerHTML = `
  <section id="sec-overview"><h1 id="job-title"></h1><div class="muted" id="job-sub"></div><div class="kv" id="job-kv"></div></section>
  <section><h2>Operator graph</h2><svg class="graph" id="operator-graph"></svg></section>
  <div class="grid">
    <section><h2>Throughput (source records/s per epoch)</h2><svg class="chart" id="throughput-chart"></svg></section>
    <section><h2>Epoch duration (ms)</h2><svg class="chart" id="epoch-chart"></svg></section>
  </div>
  <section><h2>Time per stage per epoch (slowest subtask, s)</h2><div class="legend" id="stage-legend"></div>
    <svg class="chart" id="stage-chart"></svg><table id="stage-table"></table></section>
  <section id="sec-checkpoints"><h2>Checkpoints</h2><div class="kv" id="cp-counts"></div>
    <div class="grid" style="margin-top:12px">
      <div><div class="muted">State size (bytes)</div><svg class="chart" id="cp-size-chart"></svg></div>
      <div><div class="muted">Duration (ms)</div><svg class="chart" id="cp-duration-chart"></svg></div>
    </div>
    <h2 style="margin-top:14px">History</h2>
    <table id="checkpoint-table"><thead><tr><th>Id</th><th>Status</th><th>Epoch</th><th>Triggered</th>
      <th>Duration</th><th>State size</th><th>Path</th></tr></thead><tbody></tbody></table>
    <h2 style="margin-top:14px">Per subtask <span class="muted" id="cp-detail-id"></span></h2>
    <table id="checkpoint-detail"></table></section>
  <section id="sec-scaling"><h2>Autoscaler decisions</h2><div class="muted" id="scaling-state"></div>
    <table id="scaling-table"><thead><tr><th>Time</th><th>Operator</th><th>Parallelism</th>
      <th>Applied</th><th>Reason</th></tr></thead><tbody></tbody></table></section>
  <section id="sec-exceptions"><h2>Restarts and exceptions</h2><div id="exceptions"></div></section>
  <section id="sec-configuration"><h2>Configuration</h2><table id="config-table"></table></section>`;
}

function renderJobHeader(job) {
  document.getElementById("job-title").innerHTML = `${escapeHtml(job.name)} ${status(job.state)}`;
  document.getElementById("job-sub").textContent = `${job.jid} · ${job.runner} · started ${fmtTime(job["start-time"])}`;
  const s = job.stats, recs = Object.values(job.records).reduce((a, b) => a + b, 0);
  document.getElementById("job-kv").innerHTML = [
    ["epochs", s.epochs], ["restarts", s.restarts], ["checkpoints", s.checkpoints],
    ["records processed (all operators)", fmtNum(recs)], ["duration", fmtDur(job.duration)],
  ].map(([k, v]) => `<div><b>${v}</b><span>${k}</span></div>`).join("");
}

function renderEpochCharts(job) {
  const ep = job.epochs;
  lineChart(document.getElementById("throughput-chart"), [{ name: "records/s",
    points: ep.map(e => [e.epoch, e.duration_ms > 0 ? e.source_records * 1000 / e.duration_ms : 0]) }]);
  lineChart(document.getElementById("epoch-chart"), [{ name: "duration ms", points: ep.map(e => [e.epoch, e.duration_ms]) }]);
  const stages = [...new Set(ep.flatMap(e => e.stages.map(s => s.stage)))].sort((a, b) => a - b);
  const names = Object.fromEntries(job.vertices.map(v => [Number(v.id), v.name]));
  legend(document.getElementById("stage-legend"), stages.map(s => `stage ${s}: ${names[s] || ""}`));
  lineChart(document.getElementById("stage-chart"), stages.map(sid => ({ name: "stage " + sid,
    points: ep.flatMap(e => e.stages.filter(s => s.stage === sid).map(s => [e.epoch, s.max_subtask_s])) })));
  const last = ep[ep.length - 1];
  document.getElementById("stage-table").innerHTML = last ? `<thead><tr><th>Stage (epoch ${last.epoch})</th>
    <th>Restore s</th><th>Process s</th><th>Commit s</th><th>Slowest subtask s</th></tr></thead><tbody>${last.stages.map(s =>
    `<tr><td>${s.stage}: ${escapeHtml(names[s.stage] || "")}</td><td>${s.restore_s.toFixed(3)}</td><td>${s.process_s.toFixed(3)}</td>
     <td>${s.commit_s.toFixed(3)}</td><td>${s.max_subtask_s.toFixed(3)}</td></tr>`).join("")}</tbody>` : "";
}

function renderScaling(job) {
  const a = job.autoscaler || { enabled: false, decisions: [] };
  document.getElementById("scaling-state").textContent = a.enabled
    ? `${a.decisions.length} decision(s), newest first` : "off (job.autoscaler.enabled: false)";
  document.querySelector("#scaling-table tbody").innerHTML = a.decisions.slice().reverse().flatMap(d =>
    d.vertices.map(v => `<tr><td>${fmtTime(d.timestamp)}</td><td>${escapeHtml(v.uid)}</td>
      <td>${v.from} → ${v.to}</td><td>${d.applied ? "yes" : "no"}</td>
      <td>${escapeHtml(v.reason)}${d.note ? `<div class="muted">${escapeHtml(d.note)}</div>` : ""}</td></tr>`)).join("");
}

function renderCheckpoints(cps, jid) {
  const c = cps.counts;
  document.getElementById("cp-counts").innerHTML = [["completed", c.completed], ["failed", c.failed],
    ["in progress", c.in_progress], ["restored", c.restored]].map(([k, v]) => `<div><b>${v}</b><span>${k}</span></div>`).join("");
  const done = cps.history.filter(h => h.status !== "FAILED" && h.end_to_end_duration !== null).slice().reverse();
  lineChart(document.getElementById("cp-size-chart"), [{ name: "state size", points: done.map(h => [h.id, h.state_size]) }]);
  lineChart(document.getElementById("cp-duration-chart"), [{ name: "duration", points: done.map(h => [h.id, h.end_to_end_duration]) }]);
  const body = document.querySelector("#checkpoint-table tbody");
  body.innerHTML = cps.history.slice(0, 200).map(h => `<tr class="clickable${h.id === selectedCheckpoint ? " selected" : ""}" data-id="${h.id}">
    <td>${h.id}${h.is_savepoint ? " (savepoint)" : ""}</td><td>${status(h.status)}</td><td>${h.epoch ?? "-"}</td>
    <td>${fmtTime(h.trigger_timestamp)}</td><td>${fmtDur(h.end_to_end_duration)}</td><td>${fmtBytes(h.state_size)}</td>
    <td class="muted">${escapeHtml(h.external_path || h.failure_message || "")}</td></tr>`).join("");
  body.querySelectorAll("tr").forEach(tr => tr.addEventListener("click", () => {
    selectedCheckpoint = Number(tr.dataset.id);
    renderCheckpointDetail(jid).catch(showError);
  }));
  if (selectedCheckpoint === null && cps.latest.completed) selectedCheckpoint = cps.latest.completed.id;
}

async function renderCheckpointDetail(jid) {
  if (selectedCheckpoint === null) return;
  const d = await api(`/jobs/${jid}/checkpoints/details/${selectedCheckpoint}`);
  document.getElementById("cp-detail-id").textContent = `(checkpoint ${d.id})`;
  const width = Math.max(0, ...Object.values(d.tasks).map(t => t.subtasks.length));
  document.getElementById("checkpoint-detail").innerHTML = `<thead><tr><th>Operator</th><th>Total</th>${
    [...Array(width).keys()].map(i => `<th>Subtask ${i}</th>`).join("")}</tr></thead><tbody>${
    Object.entries(d.tasks).map(([uid, t]) => `<tr><td>${escapeHtml(uid)}</td><td>${fmtBytes(t.state_size)}</td>${
      t.subtasks.map(s => `<td>${fmtBytes(s)}</td>`).join("")}</tr>`).join("")}</tbody>`;
}

function renderExceptions(exc) {
  const entries = exc.exceptionHistory.entries;
  document.getElementById("exceptions").innerHTML = entries.length ? entries.map(e => `
    <div><b>${escapeHtml(e.exceptionName)}</b>: ${escapeHtml(e.message)}
    <span class="muted">(epoch ${e.epoch}, attempt ${e.attempt}, ${fmtTime(e.timestamp)}, ${e.will_restart ? "restarted" : "job failed"})</span>
    <pre>${escapeHtml(e.stacktrace)}</pre></div>`).join("") : '<p class="muted">No failures.</p>';
}

function renderConfig(conf) {
  const rows = Object.entries(conf["execution-config"]["user-config"]).sort();
  document.getElementById("config-table").innerHTML = `<thead><tr><th>Key</th><th>Value</th></tr></thead><tbody>${
    rows.map(([k, v]) => `<tr><td>${escapeHtml(k)}</td><td>${escapeHtml(v)}</td></tr>`).join("")}</tbody>`;
}

async function renderJob(view, jid, first) {
  if (first) jobSkeleton(view, jid);
  const [job, cps, exc] = await Promise.all([api(`/jobs/${jid}`), api(`/jobs/${jid}/checkpoints`), api(`/jobs/${jid}/exceptions`)]);
  renderJobHeader(job);
  if (first) {
    operatorGraph(document.getElementById("operator-graph"), job.vertices);
    renderConfig(await api(`/jobs/${jid}/config`));
  }
  renderEpochCharts(job);
  renderScaling(job);
  renderCheckpoints(cps, jid);
  renderExceptions(exc);
  await renderCheckpointDetail(jid);
  return ["FINISHED", "CANCELED", "FAILED"].includes(job.state);
}

// -- routing and polling -------------------------------------------------------------------
function showError(e) {
  setRefreshState(false, "update failed: " + e.message);
}

async function route() {
  clearTimeout(timer);
  const view = document.getElementById("view");
  const m = location.hash.match(/^#\/job\/([0-9a-zA-Z_-]+)/);
  selectedCheckpoint = null;
  let first = true;
  const tick = async () => {
    try {
      const done = m ? await renderJob(view, m[1], first) : (await renderJobs(view), false);
      first = false;
      setRefreshState(true);
      if (done) { setRefreshState(true, "job ended"); return; }
    } catch (e) { showError(e); }
    timer = setTimeout(tick, REFRESH_MS);
  };
  await tick();
}

window.addEventListener("hashchange", route);
route();

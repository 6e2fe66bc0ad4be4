// tfdist dashboard: the page's script. Plain DOM, no framework, nothing fetched but this server's /api/...
// Every value from the coordinator is put in the page as text (textContent), never as markup.
"use strict";

(function () {
  const POLL_MS = 2000;      // jobs, nodes, a job's state and metrics
  const LOG_MS = 1000;       // a running job's log lines
  const HIDDEN_MS = 10000;   // any poll while the tab is not visible
  const MAX_LOG_LINES = 5000;
  const TERMINAL = ["SUCCEEDED", "FAILED", "CANCELED"];
  const VERBS = {cancel: "Cancel", preempt: "Preempt", resume: "Resume"};
  const main = document.getElementById("main");
  let session = null;
  let diagnose = null;  // the diagnose pages (diagnose.js), made in start() with this file's helpers

  // ------------------------------------------------------------------ helpers
  function el(tag, attrs, ...children) {
    const node = document.createElementNS(tag.startsWith("svg:") ? "http://www.w3.org/2000/svg" : "http://www.w3.org/1999/xhtml",
                                          tag.replace(/^svg:/, ""));
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "text") node.textContent = String(value);
      else if (key === "on") for (const [event, fn] of Object.entries(value)) node.addEventListener(event, fn);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.appendChild(typeof child === "string" || typeof child === "number" ? document.createTextNode(String(child)) : child);
    }
    return node;
  }

  function replace(node, ...children) {
    node.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  }

  function ago(seconds) {
    if (seconds === null || seconds === undefined || !isFinite(seconds)) return "–";
    seconds = Math.max(0, seconds);
    if (seconds < 60) return `${seconds < 10 ? seconds.toFixed(1) : Math.round(seconds)} s`;
    if (seconds < 3600) return `${Math.floor(seconds / 60)} min`;
    if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ${Math.floor((seconds % 3600) / 60)} min`;
    return `${Math.floor(seconds / 86400)} d ${Math.floor((seconds % 86400) / 3600)} h`;
  }

  function clock(epoch) {
    return epoch ? new Date(epoch * 1000).toLocaleString() : "–";
  }

  function bytes(n) {
    if (n === null || n === undefined) return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return `${n < 10 && i ? n.toFixed(1) : Math.round(n)} ${units[i]}`;
  }

  function num(v) {
    if (v === null || v === undefined) return "–";
    const a = Math.abs(v);
    return a !== 0 && (a < 1e-3 || a >= 1e6) ? v.toExponential(3) : String(Number(v.toPrecision(5)));
  }

  function badge(state) {
    return el("span", {class: `badge state-${state.toLowerCase()}`, text: state});
  }

  // Problems, one line per source (the coordinator not answering is said once, not by every poll).
  const problems = new Map();
  function problem(source, message) {
    if (message) problems.set(source, message); else problems.delete(source);
    const banner = document.getElementById("banner");
    const lines = [...new Set(problems.values())];
    banner.hidden = lines.length === 0;
    replace(banner, lines.map((l) => el("div", {text: l})));
  }

  class ApiError extends Error {
    constructor(message, status) { super(message); this.status = status; }
  }

  async function api(path, options) {
    let answer;
    try {
      answer = await fetch(path, Object.assign({credentials: "same-origin", headers: {Accept: "application/json"}}, options || {}));
    } catch (e) {
      throw new ApiError(`the dashboard at ${location.host} does not answer (stopped?)`, 0);
    }
    let body;
    try { body = await answer.json(); } catch (e) { body = {error: `the dashboard answered ${answer.status}`}; }
    if (answer.status === 401) {  // the dashboard restarted (a new token) or the session was forgotten
      location.assign("/login");
      throw new ApiError(body.error || "log in first", 401);
    }
    if (!answer.ok) throw new ApiError(body.error || `the dashboard answered ${answer.status}`, answer.status);
    return body;
  }

  function post(path) {
    return api(path, {method: "POST", headers: {Accept: "application/json", "X-Tfdist-Csrf": session.csrf}});
  }

  // A poll: fn now, then again `ms` after each answer (slower while the tab is hidden, at once when it shows
  // again); stop() ends it.
  const polls = new Set();
  document.addEventListener("visibilitychange", () => { if (!document.hidden) for (const p of polls) p.now(); });

  function every(ms, fn) {
    let timer = null, stopped = false, busy = false;
    async function tick() {
      timer = null;
      if (busy || stopped) return;
      busy = true;
      let next = ms;
      try { const asked = await fn(); if (typeof asked === "number") next = asked; }
      catch (e) { console.error(e); }
      finally {
        busy = false;
        if (!stopped && next >= 0) timer = setTimeout(tick, document.hidden ? Math.max(next, HIDDEN_MS) : next);
      }
    }
    const poll = {
      stop() { stopped = true; clearTimeout(timer); polls.delete(poll); },
      now() { if (!busy && !stopped && timer !== null) { clearTimeout(timer); tick(); } },
    };
    polls.add(poll);
    tick();
    return poll;
  }

  function updated() {
    document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  }

  // A poll of one API path: its answer to `show`, its failure to the banner.
  function watch(source, path, show, ms) {
    return every(ms || POLL_MS, async () => {
      try {
        const answer = await api(typeof path === "function" ? path() : path);
        problem(source, null);
        updated();
        return show(answer);
      } catch (e) {
        if (e.status !== 401) problem(source, e.message);
      }
    });
  }

  // ------------------------------------------------------------------ the jobs page
  function summaryOf(agents, jobs) {
    const alive = agents.filter((a) => a.state === "ALIVE");
    const slots = alive.reduce((s, a) => s + a.slots, 0), free = alive.reduce((s, a) => s + a.free_slots, 0);
    const count = (state) => jobs.filter((j) => j.state === state).length;
    const parts = [`${alive.length} of ${agents.length} nodes alive`, `${free} of ${slots} slots free`];
    if (jobs.length) parts.push(`${count("RUNNING")} running, ${count("STARTING")} starting, ${count("QUEUED")} queued, ${count("PAUSED")} paused`);
    return parts.join(" · ");
  }

  function jobRow(job, now) {
    const waiting = ["QUEUED", "STARTING"].includes(job.state) || (job.state === "RUNNING" && job.waiting_reason);
    const info = waiting ? job.waiting_reason : (TERMINAL.includes(job.state) || job.state === "PAUSED" ? job.outcome : "");
    return el("tr", {"data-job": job.id, class: `state-${job.state.toLowerCase()}`},
      el("td", {}, el("a", {href: `/jobs/${encodeURIComponent(job.id)}`, text: job.id})),
      el("td", {class: "name", text: job.name, title: job.command.join(" ")}),
      el("td", {text: job.owner || "–"}),
      el("td", {text: job.distribution.mode, title: job.distribution.reason}),
      el("td", {}, badge(job.state)),
      el("td", {class: "nodes", text: job.nodes.join(", ") || "–"}),
      el("td", {class: waiting ? "reason" : "outcome", text: info || ""}),
      el("td", {class: "num", text: job.restarts}),
      el("td", {class: "num", text: ago(now - job.submitted_at), title: `submitted ${clock(job.submitted_at)}`}));
  }

  function jobsTable(id, jobs, now, empty) {
    const head = ["ID", "Name", "Owner", "Mode", "State", "Nodes", "Waiting for / outcome", "Restarts", "Age"];
    return el("table", {id, class: "jobs"},
      el("thead", {}, el("tr", {}, head.map((h) => el("th", {text: h})))),
      el("tbody", {}, jobs.length ? jobs.map((j) => jobRow(j, now)) : el("tr", {}, el("td", {colspan: head.length, class: "muted", text: empty}))));
  }

  function jobsPage() {
    const summary = el("p", {class: "summary", id: "summary"});
    const active = el("div"), finished = el("div"), more = el("p", {class: "muted"});
    replace(main, summary, el("h2", {text: "Queue and running"}), active, el("h2", {text: "Finished"}), finished, more);
    let agents = null, jobs = null;
    const sum = () => { if (agents && jobs) summary.textContent = summaryOf(agents, jobs); };
    watch("cluster", "/api/cluster", (answer) => { agents = answer.agents; sum(); });
    watch("jobs", "/api/jobs", (answer) => {
      jobs = answer.jobs;
      sum();
      replace(active, jobsTable("active-jobs", jobs.filter((j) => !TERMINAL.includes(j.state)), answer.now, "no job is queued or running"));
      replace(finished, jobsTable("finished-jobs", jobs.filter((j) => TERMINAL.includes(j.state)).reverse(), answer.now, "none yet"));
      more.textContent = answer.left_out ? `${answer.left_out} older finished jobs not shown (tfdist jobs --all lists them)` : "";
    });
  }

  // ------------------------------------------------------------------ the cluster page
  function gpuCell(agent) {
    if (!agent.gpus.length) return el("td", {class: "muted", text: "CPU node"});
    const usage = new Map(((agent.usage && agent.usage.gpus) || []).map((g) => [g.index, g]));
    return el("td", {class: "gpus"}, agent.gpus.map((g) => {
      const u = usage.get(g.index);
      const util = u && u.utilization !== null ? Math.round(u.utilization * 100) : null;
      const memory = u && u.memory_total_bytes ? `${bytes(u.memory_used_bytes)} / ${bytes(u.memory_total_bytes)}` : "";
      return el("div", {class: `gpu ${g.free ? "free" : "held"}`, "data-gpu": g.index, title: `${g.name} ${g.uuid}`},
        el("span", {class: "gpu-name", text: `GPU ${g.index}`}),
        el("span", {class: "meter"}, el("span", {class: "fill", style: null, "data-util": util === null ? null : util})),
        el("span", {class: "gpu-util", text: util === null ? "no sample" : `${util}%`}),
        el("span", {class: "gpu-mem", text: memory}),
        el("span", {class: "gpu-held", text: g.free ? "free" : "held"}));
    }));
  }

  function modelsOf(agent) {  // "2 × NVIDIA H100 80GB HBM3" under a GPU node's name
    const count = new Map();
    for (const g of agent.gpus) count.set(g.name, (count.get(g.name) || 0) + 1);
    return [...count.entries()].map(([name, n]) => el("div", {class: "muted small", text: `${n} × ${name || "GPU"}`}));
  }

  function jobsCell(agent) {
    const usage = new Map(((agent.usage && agent.usage.jobs) || []).map((j) => [j.job_id, j]));
    if (!agent.jobs.length) return el("td", {class: "muted", text: "–"});
    return el("td", {}, agent.jobs.map((id) => {
      const u = usage.get(id);
      return el("div", {}, el("a", {href: `/jobs/${encodeURIComponent(id)}`, text: id}),
        u ? el("span", {class: "muted", text: ` CPU ${num(u.cpu_seconds)} s · RSS ${bytes(u.rss_bytes)}`}) : null);
    }));
  }

  function clusterPage() {
    const summary = el("p", {class: "summary", id: "summary"}), table = el("div");
    replace(main, el("h2", {text: "Nodes"}), summary, table);
    watch("cluster", "/api/cluster", (answer) => {
      summary.textContent = summaryOf(answer.agents, []);
      const head = ["Node", "State", "Slots free / total", "GPUs (utilisation, memory)", "Jobs", "Last heartbeat"];
      replace(table, el("table", {id: "nodes", class: "nodes"},
        el("thead", {}, el("tr", {}, head.map((h) => el("th", {text: h})))),
        el("tbody", {}, answer.agents.length ? answer.agents.map((a) => el("tr", {"data-node": a.name},
          el("td", {title: a.addresses.map((x) => x.ip).join(", ")}, a.name, modelsOf(a)),
          el("td", {}, badge(a.state)),
          el("td", {class: "num", text: `${a.free_slots} / ${a.slots}`}),
          gpuCell(a), jobsCell(a),
          el("td", {text: `${ago(answer.now - a.last_heartbeat)} ago`, title: clock(a.last_heartbeat)}))) :
          el("tr", {}, el("td", {colspan: head.length, class: "muted", text: "no agent has registered"})))));
      for (const fill of table.querySelectorAll(".fill[data-util]")) fill.style.width = `${fill.dataset.util}%`;
    });
  }

  // ------------------------------------------------------------------ a job's page
  function fact(name, ...value) {
    return [el("dt", {text: name}), el("dd", {}, ...value)];
  }

  function wide(name, ...value) {  // a fact across the box: a command, a sentence
    return [el("dt", {text: name}), el("dd", {class: "wide"}, ...value)];
  }

  function factsOf(job) {
    const cp = job.latest_checkpoint, t = job.throughput;
    return el("dl", {class: "facts"},
      fact("Owner", job.owner || "–"),
      fact("Mode", el("span", {text: job.distribution.mode, title: job.distribution.reason})),
      fact("Slots", `${job.slots} (priority ${job.priority})`),
      fact("Attempt", `${job.attempt} (${job.restarts} restart${job.restarts === 1 ? "" : "s"})`),
      fact("Submitted", clock(job.submitted_at)),
      fact("Started", clock(job.started_at)),
      job.ended_at ? fact("Ended", clock(job.ended_at)) : [],
      job.exit_code !== null ? fact("Exit code", String(job.exit_code)) : [],
      wide("Throughput", t ? `${num(t.steps_per_second)} steps/s` + (t.examples_per_second ? ` · ${num(t.examples_per_second)} examples/s` : "") : "not measured yet"),
      wide("Checkpoint", cp.step !== null ? el("span", {}, `step ${cp.step} `, el("code", {text: cp.path || ""}), ` (${clock(cp.time)})`) : "none yet"),
      wide("Command", el("code", {text: job.command.join(" ")})),
      job.waiting_reason ? wide("Waiting for", el("span", {class: "reason", id: "waiting-reason", text: job.waiting_reason})) : [],
      job.outcome ? wide(TERMINAL.includes(job.state) ? "Outcome" : "Latest", job.outcome) : [],
      diagnose ? diagnose.jobFact(job) : []);
  }

  function placementOf(job) {
    if (!job.placement.length) return el("p", {class: "muted", text: "not placed yet"});
    return el("table", {class: "placement", id: "placement"},
      el("thead", {}, el("tr", {}, ["Node rank", "Node", "Address", "Slots", "GPUs", "Hold", "Ranks"].map((h) => el("th", {text: h})))),
      el("tbody", {}, job.placement.map((p) => el("tr", {},
        el("td", {class: "num", text: p.node_rank}), el("td", {text: p.node}), el("td", {text: p.address}),
        el("td", {class: "num", text: p.slots}), el("td", {text: p.gpus.join(", ") || "–"}), el("td", {text: p.state || "–"}),
        el("td", {text: p.ranks.map((r) => `${r.rank} ${r.role}` + (r.gpus.length ? ` (GPU ${r.gpus.join(",")})` : "")).join(" · ") || "–"})))));
  }

  function failureOf(job) {
    const bad = job.exits.filter((e) => e.exit_code !== 0 || e.reason);
    if (job.state !== "FAILED" && !bad.length) return null;
    const first = job.exits.find((e) => e.rank === job.failed_rank) || bad[0];
    return el("section", {class: "failure", id: "failure"},
      el("h2", {text: job.state === "FAILED" ? "Why it failed" : "Worker exits"}),
      job.state === "FAILED" ? el("p", {text: job.outcome || ""}) : null,
      job.failed_rank !== null ? el("p", {text: `failed rank: ${job.failed_rank}`}) : null,
      bad.map((e) => el("div", {class: "exit"},
        el("p", {text: `rank ${e.rank} on ${e.node}: exit ${e.exit_code}` + (e.signal ? ` (${e.signal})` : "") +
                       (e.reason ? ` — ${e.reason}` : "") + (e.tolerated ? " (tolerated: the job went on)" : "") +
                       ` · attempt ${e.attempt}`}),
        e.last_lines.length && e === first ? el("pre", {class: "last-lines", text: e.last_lines.join("\n")}) : null)));
  }

  // A small line chart: one path per series, step on x, value on y.
  function chart(name, series) {
    const W = 300, H = 140, L = 46, R = 8, T = 8, B = 22;
    const points = series.flatMap((s) => s.points.filter((p) => p[1] !== null));
    const card = el("figure", {class: "chart-card", "data-metric": name});
    const last = series[0] && series[0].points.length ? series[0].points[series[0].points.length - 1] : null;
    card.appendChild(el("figcaption", {}, el("b", {text: name}), last ? el("span", {class: "muted", text: ` ${num(last[1])} at step ${last[0]}`}) : null));
    if (!points.length) { card.appendChild(el("p", {class: "muted", text: "no values"})); return card; }
    let x0 = Math.min(...points.map((p) => p[0])), x1 = Math.max(...points.map((p) => p[0]));
    let y0 = Math.min(...points.map((p) => p[1])), y1 = Math.max(...points.map((p) => p[1]));
    if (x1 === x0) { x0 -= 1; x1 += 1; }
    if (y1 === y0) { const pad = Math.abs(y0) * 0.1 || 1; y0 -= pad; y1 += pad; }
    const sx = (x) => (L + (x - x0) / (x1 - x0) * (W - L - R)).toFixed(1);
    const sy = (y) => (T + (1 - (y - y0) / (y1 - y0)) * (H - T - B)).toFixed(1);
    const svg = el("svg:svg", {class: "chart", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": `${name} by step`},
      el("svg:line", {class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B}),
      el("svg:line", {class: "axis", x1: L, y1: T, x2: L, y2: H - B}),
      el("svg:text", {class: "tick", x: L - 4, y: T + 8, "text-anchor": "end", text: num(y1)}),
      el("svg:text", {class: "tick", x: L - 4, y: H - B, "text-anchor": "end", text: num(y0)}),
      el("svg:text", {class: "tick", x: L, y: H - 6, text: x0}),
      el("svg:text", {class: "tick", x: W - R, y: H - 6, "text-anchor": "end", text: `${x1} steps`}));
    series.forEach((s, i) => {
      let d = "", pen = "M";
      for (const [x, y] of s.points) {
        if (y === null) { pen = "M"; continue; }
        d += `${pen}${sx(x)},${sy(y)} `;
        pen = "L";
      }
      svg.appendChild(el("svg:path", {class: `series series-${i % 6}`, d: d.trim(), "data-series": s.label},
        el("svg:title", {text: s.label})));
    });
    card.appendChild(svg);
    if (series.length > 1) card.appendChild(el("div", {class: "legend"}, series.map((s, i) => el("span", {class: `key series-${i % 6}`, text: s.label}))));
    return card;
  }

  function chartsOf(answer) {
    // A metric's val_/test_ curves share its chart (as `tfdist metrics --plot` draws them); epoch is not drawn.
    const groups = new Map();
    for (const curve of answer.curves) {
      if (curve.name === "epoch") continue;
      const base = curve.name.replace(/^(val_|test_)/, "");
      if (!groups.has(base)) groups.set(base, []);
      for (const r of curve.ranks) {
        groups.get(base).push({label: curve.name + (curve.ranks.length > 1 ? ` (rank ${r.rank})` : ""), points: r.points});
      }
    }
    if (!groups.size) return [el("p", {class: "muted", text: "no metrics reported yet (tfdist.report_metrics or the MetricsReporter callback report them)"})];
    return [...groups.entries()].map(([name, series]) => chart(name, series));
  }

  function checkpointsOf(answer, job) {
    const records = answer.checkpoints.slice(-5).reverse();
    if (!records.length) return el("p", {class: "muted", text: "no checkpoint recorded"});
    return el("ul", {class: "checkpoints", id: "checkpoints"}, records.map((c) =>
      el("li", {}, `step ${c.step} · attempt ${c.attempt} · `, el("code", {text: c.path || ""}), c.time ? ` · ${clock(c.time)}` : "")));
  }

  function tensorboardOf(job) {
    const tb = job.tensorboard;
    const box = el("section", {class: "tensorboard", id: "tensorboard"}, el("h2", {text: "TensorBoard"}),
      el("p", {}, "Event files: ", el("code", {text: tb.dir || "none"})),
      el("p", {}, "Serve them where they are: ", el("code", {text: tb.command})));
    if (tb.url) {
      box.appendChild(el("p", {}, el("a", {class: "button", id: "tensorboard-link", href: tb.url, target: "_blank", rel: "noopener noreferrer", text: "Open TensorBoard"}),
        el("span", {class: "muted", text: " served by this dashboard, behind its login"})));
    } else {
      box.appendChild(el("p", {class: "muted", text: tb.problem}));
    }
    return box;
  }

  function actionsOf(job, refresh) {
    return buttons(job.id, `job ${job.id} (${job.name})`, job.actions, refresh);
  }

  // The owner's buttons for a job or an experiment (`id`: what /api/jobs/ID/ACTION acts on).
  function buttons(id, what, names, refresh) {
    const said = document.getElementById("action-message");
    return names.map((action) => el("button", {type: "button", class: `action action-${action}`, "data-action": action,
      text: VERBS[action], on: {click: async (event) => {
        if (!window.confirm(`${VERBS[action]} ${what}?`)) return;
        event.target.disabled = true;
        try {
          const answer = await post(`/api/jobs/${encodeURIComponent(id)}/${action}`);
          said.className = "message ok"; said.textContent = answer.message;
        } catch (e) {
          said.className = "message error"; said.textContent = e.message;
        }
        refresh();
      }}}));
  }

  function logView(job) {
    // Lines after the last seq seen, as `tfdist logs -f` asks; a progress line replaces its rank's previous one.
    const box = el("div", {class: "log", id: "log", tabindex: 0});
    const rankSelect = el("select", {id: "log-rank", "aria-label": "rank"}, el("option", {value: "-1", text: "every rank"}));
    const count = el("span", {class: "muted", id: "log-count"});
    const noisy = el("input", {type: "checkbox", id: "log-noise"});
    noisy.addEventListener("change", () => box.classList.toggle("quiet", !noisy.checked));
    box.classList.add("quiet");
    const section = el("section", {class: "logs"}, el("div", {class: "log-head"}, el("h2", {text: "Logs"}), rankSelect,
      el("label", {}, noisy, " TensorFlow's start-up lines"), count), box);
    let seq = 0, ended = false, shown = 0, hidden = 0, poll = null;
    const progress = new Map();
    const ranks = new Set();

    function add(line) {
      const who = line.rank === null ? "tfdist" : `rank=${line.rank}${line.stream === "stderr" ? " stderr" : ""}`;
      const node = el("div", {class: `line ${line.stream}${line.noise ? " noise" : ""}`, "data-seq": line.seq},
        el("span", {class: "who", text: `[${who}] `}), line.text);
      if (line.noise) hidden++;
      if (line.stream === "progress") {
        const previous = progress.get(line.rank);
        if (previous && previous === box.lastChild) { previous.replaceWith(node); progress.set(line.rank, node); return; }
        progress.set(line.rank, node);
      } else progress.delete(line.rank);
      box.appendChild(node);
      shown++;
      while (shown > MAX_LOG_LINES) { if (box.firstChild.classList.contains("noise")) hidden--; box.firstChild.remove(); shown--; }
    }

    function setRanks(job) {
      for (const p of job.placement) for (const r of p.ranks) {
        if (ranks.has(r.rank)) continue;
        ranks.add(r.rank);
        rankSelect.appendChild(el("option", {value: r.rank, text: `rank ${r.rank} (${r.role}, ${p.node})`}));
      }
    }

    rankSelect.addEventListener("change", () => {
      seq = 0; ended = false; shown = 0; hidden = 0; progress.clear(); replace(box);
      if (poll) poll.stop();
      start();
    });

    function start() {
      poll = every(LOG_MS, async () => {
        const rank = rankSelect.value;
        try {
          const answer = await api(`/api/jobs/${encodeURIComponent(job.id)}/logs?after=${seq}&rank=${rank}`);
          problem("logs", null);
          const stick = box.scrollTop + box.clientHeight >= box.scrollHeight - 24;
          for (const line of answer.lines) add(line);
          if (answer.lines.length) seq = answer.lines[answer.lines.length - 1].seq;
          if (stick) box.scrollTop = box.scrollHeight;
          count.textContent = `${shown} lines (${hidden} of TensorFlow's)` + (answer.job_ended ? " · the job ended" : " · following");
          if (answer.more) return 0;
          if (answer.job_ended && !answer.lines.length) { ended = true; return -1; }
        } catch (e) {
          if (e.status === 403) { replace(box, el("p", {class: "muted", text: e.message})); return -1; }
          if (e.status !== 401) problem("logs", e.message);
        }
        return LOG_MS;
      });
    }

    if (!job.can.logs) {
      box.appendChild(el("p", {class: "muted", text: `only the job's owner (${job.owner || "unknown"}) or an admin reads its logs`}));
    } else start();
    return {section, setRanks, get ended() { return ended; }};
  }

  function jobPage(id) {
    const head = el("div", {class: "job-head"}), said = el("p", {class: "message", id: "action-message"});
    const left = el("div", {class: "column"}), charts = el("div", {class: "charts", id: "charts"}), checkpoints = el("div");
    const board = el("div");
    const right = el("div", {class: "column"}, el("h2", {text: "Metrics"}), charts, el("h2", {text: "Checkpoints"}), checkpoints, board);
    const logsSlot = el("div");
    replace(main, head, said, el("div", {class: "job-grid"}, left, right), logsSlot);
    let logs = null, job = null, metricsPoll = null, metricsDone = false;
    const path = `/api/jobs/${encodeURIComponent(id)}`;
    let drawn = "", drawnMetrics = "";
    const poll = watch("job", path, (answer) => {
      const done = TERMINAL.includes(answer.state) ? HIDDEN_MS : POLL_MS;
      const key = JSON.stringify(Object.assign({}, answer, {now: 0}));
      if (key === drawn) return done;  // unchanged: the page stays as it is (a selection, a button under the mouse)
      drawn = key;
      job = answer;
      document.title = `job ${job.id} (${job.state}) · tfdist`;
      replace(head, el("h1", {}, `Job ${job.id} `, el("span", {class: "name", text: job.name})), badge(job.state),
        el("span", {class: "actions"}, actionsOf(job, () => { poll.now(); if (metricsPoll) metricsPoll.now(); })));
      replace(left, factsOf(job), el("h2", {text: "Placement"}), placementOf(job), failureOf(job));
      replace(board, tensorboardOf(job));
      if (!logs) { logs = logView(job); replace(logsSlot, logs.section); }
      logs.setRanks(job);
      if (!metricsPoll) {
        if (!job.can.metrics) replace(charts, el("p", {class: "muted", text: `only the job's owner (${job.owner || "unknown"}) or an admin reads its metrics`}));
        else metricsPoll = watch("metrics", `${path}/metrics`, (m) => {
          const key = JSON.stringify(m);
          if (key !== drawnMetrics) {
            drawnMetrics = key;
            replace(charts, chartsOf(m));
            replace(checkpoints, checkpointsOf(m, job));
          }
          if (TERMINAL.includes(job.state)) { if (metricsDone) return -1; metricsDone = true; }
        });
      }
      return done;
    });
  }

  // ------------------------------------------------------------------ experiments (hyperparameter searches)
  const EXPERIMENT_ENDED = ["COMPLETED", "CANCELED", "FAILED"];

  function valuesText(values, prefix) {
    return Object.entries(values || {}).map(([k, v]) => (v !== null && typeof v === "object" && !Array.isArray(v))
      ? valuesText(v, `${prefix}${k}.`) : `${prefix}${k}=${typeof v === "number" ? num(v) : JSON.stringify(v)}`).join(" ");
  }

  function experimentsPage() {
    const list = el("div");
    replace(main, el("h2", {text: "Experiments"}), list);
    watch("experiments", "/api/experiments", (answer) => {
      const head = ["ID", "Name", "Owner", "Searcher", "State", "Trials", "Outcome"];
      replace(list, el("table", {id: "experiments", class: "jobs"},
        el("thead", {}, el("tr", {}, head.map((h) => el("th", {text: h})))),
        el("tbody", {}, answer.experiments.length ? answer.experiments.map((e) => el("tr", {"data-experiment": e.id},
          el("td", {}, el("a", {href: `/experiments/${encodeURIComponent(e.id)}`, text: e.id})),
          el("td", {class: "name", text: e.name}), el("td", {text: e.owner || "–"}),
          el("td", {text: `${e.searcher} of ${e.metric}`}), el("td", {}, badge(e.state)),
          el("td", {class: "num", text: e.max_trials}), el("td", {class: "outcome", text: e.message})))
          : el("tr", {}, el("td", {colspan: head.length, class: "muted", text: "no experiment yet (a config with a searcher: tfdist launch --config)"})))));
    });
  }

  function trialsTable(experiment) {
    const head = ["Trial", "Job", "State", "Values", `Latest ${experiment.metric}`, "Best", "Rung", "Why"];
    const best = experiment.best_trial && experiment.best_trial.trial;
    return el("table", {id: "trials", class: "jobs"},
      el("thead", {}, el("tr", {}, head.map((h) => el("th", {text: h})))),
      el("tbody", {}, experiment.trials.map((t) => el("tr", {"data-trial": t.trial, class: t.trial === best ? "best" : ""},
        el("td", {class: "num", text: t.trial}),
        el("td", {}, el("a", {href: `/jobs/${encodeURIComponent(t.job_id)}`, text: t.job_id})),
        el("td", {}, badge(t.waiting && t.state === "PAUSED" ? "WAITING" : t.state)),
        el("td", {class: "values", text: valuesText(t.hyperparameters, "")}),
        el("td", {class: "num", text: t.latest === null ? "–" : `${num(t.latest)} @${t.length}`}),
        el("td", {class: "num", text: (t.trial === best ? "★ " : "") + (t.best === null ? "–" : num(t.best))}),
        el("td", {class: "num", text: experiment.searcher === "adaptive_asha" ? t.rung + 1 : "–"}),
        el("td", {class: "outcome", text: t.why})))));
  }

  function experimentActions(experiment, refresh) {
    return buttons(experiment.id, `experiment ${experiment.id} (every trial)`, experiment.actions, refresh);
  }

  function experimentPage(id) {
    const head = el("div", {class: "job-head"}), said = el("p", {class: "message", id: "action-message"});
    const facts = el("div"), trials = el("div"), charts = el("div", {class: "charts", id: "charts"});
    replace(main, head, said, facts, el("h2", {text: "Trials"}), trials, el("h2", {text: "Metric by trial"}), charts);
    let drawn = "";
    const poll = watch("experiment", `/api/experiments/${encodeURIComponent(id)}`, (e) => {
      const key = JSON.stringify(Object.assign({}, e, {now: 0}));
      if (key === drawn) return EXPERIMENT_ENDED.includes(e.state) ? HIDDEN_MS : POLL_MS;
      drawn = key;
      document.title = `experiment ${e.id} (${e.state}) · tfdist`;
      replace(head, el("h1", {}, `Experiment ${e.id} `, el("span", {class: "name", text: e.name})), badge(e.state),
        el("span", {class: "actions"}, experimentActions(e, () => poll.now())));
      const rungs = e.rung_lengths.length ? ` · rungs at ${e.rung_lengths.join(", ")} ${e.length_unit}` : "";
      replace(facts, el("dl", {class: "facts"},
        fact("Search", `${e.searcher} of ${e.metric} (${e.smaller_is_better ? "smaller" : "larger"} is better)${rungs}`),
        fact("Trials", `${e.trials.length} of ${e.max_trials} made · seed ${e.seed}`),
        fact("Outcome", e.message || "–"),
        e.best_trial && e.best_trial.checkpoint ? fact("Best checkpoint", `${e.best_trial.checkpoint.path} (step ${e.best_trial.checkpoint.step})`) : null));
      replace(trials, trialsTable(e));
      replace(charts, e.curves.length ? chart(e.metric, e.curves.map((c) => ({label: `trial ${c.trial}`, points: c.points})))
        : el("p", {class: "muted", text: "no trial reported its metric yet"}));
      return EXPERIMENT_ENDED.includes(e.state) ? HIDDEN_MS : POLL_MS;
    });
  }

  // ------------------------------------------------------------------ start
  async function start() {
    try {
      session = await api("/api/session");
    } catch (e) {
      problem("session", e.message);
      return;
    }
    document.getElementById("where").textContent = `${session.principal.kind} ${session.principal.name} · coordinator ${session.coordinator}`;
    if (window.tfdistDiagnose) diagnose = window.tfdistDiagnose({el, replace, watch, badge, num, clock, ago, fact, wide, main, POLL_MS, HIDDEN_MS});
    const path = location.pathname;
    const job = path.match(/^\/jobs\/([^/]+)$/), experiment = path.match(/^\/experiments\/([^/]+)$/);
    const run = path.match(/^\/diagnoses\/([^/]+)$/);
    if (job) jobPage(decodeURIComponent(job[1]));
    else if (diagnose && (run || path === "/diagnoses")) {
      document.getElementById("nav-diagnoses").classList.add("here");
      if (run) diagnose.runPage(decodeURIComponent(run[1])); else diagnose.listPage();
    }
    else if (experiment) { document.getElementById("nav-experiments").classList.add("here"); experimentPage(decodeURIComponent(experiment[1])); }
    else if (path === "/experiments") { document.getElementById("nav-experiments").classList.add("here"); experimentsPage(); }
    else if (path === "/cluster") { document.getElementById("nav-cluster").classList.add("here"); clusterPage(); }
    else { document.getElementById("nav-jobs").classList.add("here"); jobsPage(); }
  }

  start();
})();

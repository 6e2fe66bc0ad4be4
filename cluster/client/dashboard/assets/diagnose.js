// tfdist dashboard: the pages of `tfdist diagnose`'s runs (docs/diagnose.md), drawn from /api/diagnoses with
// app.js's helpers (app.js calls window.tfdistDiagnose with them). Every value is put in the page as text.
"use strict";

window.tfdistDiagnose = function (h) {
  const {el, replace, watch, badge, num, clock, ago, fact, wide, main, POLL_MS, HIDDEN_MS} = h;
  const SAID = {communication: "communication", input: "input", straggler: "waiting for a slow rank"};

  function ms(seconds) {
    return seconds === null || seconds === undefined ? "–" : `${num(seconds * 1000)} ms`;
  }

  function percent(share) {
    return share === null || share === undefined ? "–" : `${Math.round(share * 100)}%`;
  }

  function runLink(run) {
    return el("a", {href: `/diagnoses/${encodeURIComponent(run)}`, text: run});
  }

  function jobLink(id) {
    return id ? el("a", {href: `/jobs/${encodeURIComponent(id)}`, text: id}) : el("span", {class: "muted", text: "–"});
  }

  // Horizontal bars, one per item ({key, label, seconds, note, cls}), in the metric charts' card and SVG style.
  function bars(id, title, caption, items) {
    const W = 420, L = 130, R = 64, ROW = 22, T = 4;
    const H = T * 2 + ROW * Math.max(items.length, 1);
    const top = Math.max(0, ...items.map((i) => i.seconds || 0)) || 1;
    const svg = el("svg:svg", {class: "chart bars", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title},
      el("svg:line", {class: "axis", x1: L, y1: T, x2: L, y2: H - T}));
    items.forEach((item, i) => {
      const y = T + i * ROW;
      svg.appendChild(el("svg:text", {class: "tick label", x: L - 6, y: y + 15, "text-anchor": "end", text: item.label}));
      if (item.seconds === null || item.seconds === undefined) {
        svg.appendChild(el("svg:text", {class: "tick note", x: L + 6, y: y + 15, "data-bar": item.key, text: item.note || "not measured"}));
        return;
      }
      const width = Math.max(1, item.seconds / top * (W - L - R));
      svg.appendChild(el("svg:rect", {class: `bar ${item.cls}`, x: L, y: y + 3, width: width.toFixed(1), height: ROW - 6,
        "data-bar": item.key, "data-seconds": item.seconds}, el("svg:title", {text: `${item.label}: ${ms(item.seconds)}`})));
      svg.appendChild(el("svg:text", {class: "tick", x: L + width + 4, y: y + 15, text: ms(item.seconds)}));
    });
    return el("figure", {class: "chart-card", id},
      el("figcaption", {}, el("b", {text: title}), caption ? el("span", {class: "muted", text: ` ${caption}`}) : null), svg);
  }

  function charts(d) {
    const variants = bars("variant-chart", "Step time by variant", "the gang's pace: its slowest rank's median step",
      d.chart.step_time.map((b, i) => ({key: b.variant, label: b.variant, seconds: b.seconds, note: b.note, cls: `series-${i % 6}`})));
    const ranks = d.chart.rank_step_time;
    const apart = ranks.length
      ? bars("rank-chart", "Each rank's own pace", `${d.chart.rank_variant}: median step per rank, no all-reduce`,
          ranks.map((r) => ({key: `rank-${r.rank}`, label: `rank ${r.rank} (${r.node || "?"})`, seconds: r.seconds,
                             cls: r.straggler ? "straggler" : "series-0"})))
      : el("figure", {class: "chart-card", id: "rank-chart"}, el("figcaption", {}, el("b", {text: "Each rank's own pace"})),
          el("p", {class: "muted", text: `shown once the ${d.chart.rank_variant} variant is measured`}));
    return el("div", {class: "charts diagnose-charts"}, variants, apart);
  }

  function sharesOf(d) {
    const names = Object.keys(d.shares);
    if (!names.length) return el("p", {class: "muted", text: "not measured yet"});
    const table = el("table", {class: "shares", id: "shares"}, el("tbody", {}, names.map((name) => {
      const share = d.shares[name];
      return el("tr", {"data-share": name, class: name === d.verdict ? "verdict-row" : ""},
        el("td", {text: SAID[name] || name}),
        el("td", {class: "num", text: share === null ? "not measured" : percent(share)}),
        el("td", {}, el("span", {class: "meter"}, el("span", {class: "fill", "data-share": share === null ? null : Math.round(share * 100)}))));
    })));
    for (const fill of table.querySelectorAll(".fill[data-share]")) fill.style.width = `${fill.dataset.share}%`;
    return table;
  }

  function factsOf(d) {
    const b = d.bandwidth, s = d.straggler;
    const rate = b ? (b.measured_bytes_per_s ? `${num(b.measured_bytes_per_s / 1e6)} MB/s achieved` : "too little communication to measure a rate") +
      `, ${num(b.allreduce_bytes_per_step / 1e6)} MB per rank per step` + (b.nominal_bits_per_s ? `; slowest link ${num(b.nominal_bits_per_s / 1e9)} Gb/s (${b.link})` : "") : null;
    return el("dl", {class: "facts"},
      fact("Mode", d.mode), fact("Owner", d.owner || "–"),
      fact("Nodes", d.nodes.join(", ") || "–"), fact("Ranks", String(d.ranks || "–")),
      fact("Submitted", clock(d.submitted_at)), fact("Ended", d.ended_at ? clock(d.ended_at) : "–"),
      fact("Scaling", d.scaling_efficiency === null ? "not measured (one node, or one_node not run)" : `${percent(d.scaling_efficiency)} of n × one node`),
      fact("Straggler", s ? `rank ${s.rank} on ${s.node}, ${percent(s.slower_by)} slower on its own` : "none named"),
      rate ? wide("All-reduce", rate) : []);
  }

  function variantsOf(d) {
    const head = ["Variant", "Job", "State", "Nodes", "Ranks", "Step", "Samples/s", "Rank medians / note"];
    return el("table", {class: "jobs", id: "variants"},
      el("thead", {}, el("tr", {}, head.map((x) => el("th", {text: x})))),
      el("tbody", {}, d.variants.map((v) => el("tr", {"data-variant": v.name},
        el("td", {text: v.name}), el("td", {}, jobLink(v.job)), el("td", {}, v.state ? badge(v.state) : "–"),
        el("td", {text: v.nodes.join(", ") || "–"}), el("td", {class: "num", text: v.ranks || "–"}),
        el("td", {class: "num", text: ms(v.step_time_s)}), el("td", {class: "num", text: num(v.samples_per_s)}),
        el("td", {class: "outcome", text: v.pending ? `measuring: ${v.reported} rank(s) timed so far` : (v.skipped ||
          Object.entries(v.rank_step_time_s).map(([r, t]) => `${r}: ${ms(t)}`).join(", "))})))));
  }

  function verdictOf(d) {
    return el("p", {class: "verdict", id: "verdict"},
      d.verdict ? el("span", {class: `badge verdict-${d.verdict}`, text: d.verdict}) : null,
      el("span", {id: "diagnose-summary", text: ` ${d.final || !d.verdict ? "" : "so far: "}${d.summary}`}));
  }

  function runPage(run) {
    const head = el("div", {class: "job-head"}), body = el("div");
    replace(main, head, body);
    let drawn = "";
    watch("diagnose", `/api/diagnoses/${encodeURIComponent(run)}`, (d) => {
      const next = d.state === "RUNNING" ? POLL_MS : HIDDEN_MS;
      const key = JSON.stringify(Object.assign({}, d, {now: 0}));
      if (key === drawn) return next;
      drawn = key;
      document.title = `diagnose ${d.run} (${d.verdict || d.state.toLowerCase()}) · tfdist`;
      replace(head, el("h1", {}, `Diagnose ${d.run} `, el("span", {class: "name", text: d.name})), badge(d.state));
      replace(body, verdictOf(d), factsOf(d), el("h2", {text: "Step time"}), charts(d),
        el("h2", {text: "Shares of a step"}), sharesOf(d),
        el("h2", {text: "What to try"}), d.fixes.length ? el("ol", {class: "fixes", id: "fixes"}, d.fixes.map((f) => el("li", {text: f})))
          : el("p", {class: "muted", text: "once the baseline is measured"}),
        el("h2", {text: "Variants"}), variantsOf(d));
      return next;
    });
  }

  function listPage() {
    const list = el("div");
    replace(main, el("h2", {text: "Diagnoses"}), el("p", {class: "summary",
      text: "tfdist diagnose runs short variants of a job, one after another, and names what bounds it (docs/diagnose.md)"}), list);
    watch("diagnoses", "/api/diagnoses", (answer) => {
      const head = ["Run", "Name", "Owner", "Mode", "State", "Verdict", "Summary", "Variants", "Age"];
      replace(list, el("table", {id: "diagnoses", class: "jobs"},
        el("thead", {}, el("tr", {}, head.map((x) => el("th", {text: x})))),
        el("tbody", {}, answer.diagnoses.length ? answer.diagnoses.map((d) => el("tr", {"data-run": d.run},
          el("td", {}, runLink(d.run)), el("td", {class: "name", text: d.name}), el("td", {text: d.owner || "–"}),
          el("td", {text: d.mode}), el("td", {}, badge(d.state)),
          el("td", {}, d.verdict ? el("span", {class: `badge verdict-${d.verdict}`, text: d.verdict}) : "–"),
          el("td", {class: "outcome", text: d.summary}),
          el("td", {}, d.variants.map((v) => el("div", {}, jobLink(v.job), ` ${v.name}`))),
          el("td", {class: "num", text: ago(answer.now - d.submitted_at), title: `submitted ${clock(d.submitted_at)}`})))
          : el("tr", {}, el("td", {colspan: head.length, class: "muted", text: "no diagnose yet (tfdist diagnose --config experiment.yaml)"})))));
      return answer.diagnoses.some((d) => d.state === "RUNNING") ? POLL_MS : HIDDEN_MS;
    });
  }

  // On a variant's job page: which diagnose it belongs to, and a link to its verdict and chart.
  function jobFact(job) {
    const section = job.config && job.config.diagnose;
    if (!section || !section.run) return [];
    return wide("Diagnose", el("span", {}, `the ${section.variant} variant of `,
      el("a", {id: "diagnose-link", href: `/diagnoses/${encodeURIComponent(section.run)}`, text: `diagnose ${section.run}`}),
      ": its verdict and step-time chart"));
  }

  return {runPage, listPage, jobFact};
};

// strom console: plain JavaScript, no build step, no dependencies.
// Hash routes: #/overview  #/cluster  #/topics  #/topics/NAME  #/messages/TOPIC/PARTITION  #/groups  #/groups/ID
// #/transactions  #/transactions/ID  #/schemas  #/schemas/SUBJECT
//             #/transactions  #/transactions/ID
// Every page polls the REST API (/api/...) every POLL_MS, so it updates without a reload.
"use strict";

const POLL_MS = 2000;
const HISTORY = 150; // rate points in the throughput charts: the broker keeps 5 minutes of 2 s samples

const state = {
  page: null,        // the mounted page object
  route: "",
  overview: null,    // last /api/overview
  samples: [],       // [{t, bytes_in, bytes_out, records_in, records_out}], from the broker's history
  topicPrev: null,   // {t, byName: {name: topic}} for per-topic rates
};

// ------------------------------------------------------------------ helpers

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function fmtNum(n) {
  if (n === null || n === undefined) return "–";
  return Number(n).toLocaleString("en-US");
}

function fmtBytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = Number(n);
  while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i === 0 ? v.toFixed(0) : v.toFixed(v < 10 ? 2 : 1)) + " " + units[i];
}

function fmtRate(n, unit) {
  if (n === null || n === undefined || !isFinite(n)) return "–";
  if (unit === "B") return fmtBytes(n) + "/s";
  return (n < 10 ? n.toFixed(1) : Math.round(n).toLocaleString("en-US")) + " " + unit + "/s";
}

function fmtDuration(s) {
  s = Math.floor(s);
  const d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
  if (d) return `${d}d ${h}h`;
  if (h) return `${h}h ${m}m`;
  if (m) return `${m}m ${s % 60}s`;
  return `${s}s`;
}

function fmtTime(ms) {
  if (ms === null || ms === undefined || ms < 0) return "–";
  const d = new Date(ms);
  const pad = (x, n = 2) => String(x).padStart(n, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
         `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

async function api(path, options) {
  const resp = await fetch(path, Object.assign({ headers: { "Accept": "application/json" } }, options || {}));
  let body = null;
  try { body = await resp.json(); } catch (e) { body = null; }
  if (!resp.ok) {
    const err = new Error((body && body.error) || `${resp.status} ${resp.statusText}`);
    err.status = resp.status;
    throw err;
  }
  return body;
}

function b64bytes(b64) {
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

const utf8 = new TextDecoder("utf-8", { fatal: false });

function hexdump(bytes) {
  const lines = [];
  for (let i = 0; i < bytes.length; i += 16) {
    const chunk = bytes.slice(i, i + 16);
    const hex = Array.from(chunk, (b) => b.toString(16).padStart(2, "0")).join(" ");
    const ascii = Array.from(chunk, (b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : ".")).join("");
    lines.push(i.toString(16).padStart(6, "0") + "  " + hex.padEnd(47, " ") + "  " + ascii);
  }
  return lines.join("\n");
}

// Render key/value bytes (base64 from the API) as text, JSON or hex.
function renderBytes(b64, size, format) {
  if (b64 === null || b64 === undefined) return el("span", { class: "null", text: "null" });
  const bytes = b64bytes(b64);
  let text;
  if (format === "hex") {
    text = hexdump(bytes);
  } else {
    text = utf8.decode(bytes);
    if (format === "json") {
      try { text = JSON.stringify(JSON.parse(text), null, 2); } catch (e) { /* not JSON: shown as text */ }
    }
  }
  const node = el("pre", { class: "val" }, text);
  if (size > bytes.length) node.append(el("span", { class: "muted", text: `\n… ${fmtNum(size - bytes.length)} more bytes` }));
  return node;
}

function message(root, kind, text) {
  let box = root.querySelector(".flash");
  if (!box) { box = el("div", { class: "flash" }); root.prepend(box); }
  box.replaceChildren(el("div", { class: `msg ${kind}`, role: kind === "error" ? "alert" : "status", text }));
}

function table(headers, rows, emptyText) {
  const thead = el("thead", {}, el("tr", {}, headers.map((h) => {
    const [label, cls] = Array.isArray(h) ? h : [h, ""];
    return el("th", { class: cls }, label);
  })));
  const tbody = el("tbody");
  if (!rows.length) {
    tbody.append(el("tr", {}, el("td", { class: "empty", colspan: headers.length, text: emptyText || "Nothing yet." })));
  } else {
    for (const r of rows) tbody.append(r);
  }
  return el("table", {}, thead, tbody);
}

function card(label, value, sub, id) {
  return el("div", { class: "card", id },
    el("div", { class: "label", text: label }),
    el("div", { class: "value", text: value }),
    sub ? el("div", { class: "sub", text: sub }) : null);
}

function lagCell(lag) {
  if (lag === null || lag === undefined) return el("td", { class: "num muted", text: "–" });
  return el("td", { class: "num " + (lag > 0 ? "lag-pos" : "lag-0"), text: fmtNum(lag) });
}

// A partition's replication state: offline (no live leader), under-replicated (ISR smaller than
// the replicas) or in sync.
function replicaBadge(p) {
  if (p.offline) return el("span", { class: "badge offline", text: "offline" });
  if (p.under_replicated) return el("span", { class: "badge urp", text: "under-replicated" });
  return el("span", { class: "badge insync", text: "in sync" });
}

function replicaList(ids, offline) {
  // Replicas on brokers that are down are struck through.
  return el("span", {}, ids.flatMap((id, i) => [i ? ", " : "",
    (offline || []).includes(id) ? el("s", { class: "down", title: "broker down", text: String(id) }) : String(id)]));
}

// ------------------------------------------------------------------ throughput history (all pages)

function setSamples(ov) {
  state.samples = ov.history.map(([t, bi, bo, ri, ro]) => ({ t, bytes_in: bi, bytes_out: bo, records_in: ri, records_out: ro }));
}

function rates() {
  const s = state.samples;
  const out = [];
  for (let i = 1; i < s.length; i++) {
    const dt = s[i].t - s[i - 1].t;
    if (dt <= 0) continue;
    out.push({
      t: s[i].t,
      bytes_in: Math.max(0, s[i].bytes_in - s[i - 1].bytes_in) / dt,
      bytes_out: Math.max(0, s[i].bytes_out - s[i - 1].bytes_out) / dt,
      records_in: Math.max(0, s[i].records_in - s[i - 1].records_in) / dt,
      records_out: Math.max(0, s[i].records_out - s[i - 1].records_out) / dt,
    });
  }
  return out;
}

function chart(points, keyIn, keyOut) {
  const W = 600, H = 120, pad = 4;
  const svgNS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(svgNS, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("class", "chart");
  const max = Math.max(1, ...points.map((p) => Math.max(p[keyIn], p[keyOut])));
  const n = Math.min(HISTORY, Math.max(points.length, 30)); // at least a minute wide, at most the history
  for (const frac of [0.25, 0.5, 0.75]) {
    const line = document.createElementNS(svgNS, "line");
    line.setAttribute("x1", 0); line.setAttribute("x2", W);
    line.setAttribute("y1", H - pad - frac * (H - 2 * pad)); line.setAttribute("y2", H - pad - frac * (H - 2 * pad));
    line.setAttribute("class", "grid");
    svg.append(line);
  }
  const x = (i) => W - (points.length - 1 - i) * (W / (n - 1));
  const y = (v) => H - pad - (v / max) * (H - 2 * pad);
  for (const [key, cls] of [[keyOut, "out"], [keyIn, "in"]]) {
    if (points.length < 2) break;
    let d = `M ${x(0)} ${H} `;
    points.forEach((p, i) => { d += `L ${x(i).toFixed(1)} ${y(p[key]).toFixed(1)} `; });
    d += `L ${x(points.length - 1)} ${H} Z`;
    const path = document.createElementNS(svgNS, "path");
    path.setAttribute("d", d);
    path.setAttribute("class", cls);
    svg.append(path);
  }
  return svg;
}

function setStatus(ok, text) {
  document.getElementById("status-dot").className = "dot " + ok;
  document.getElementById("status-text").textContent = text;
}

async function pollOverview() {
  try {
    const ov = await api("/api/overview");
    state.overview = ov;
    setSamples(ov);
    const b = ov.broker;
    setStatus(b.ready ? "ok" : "wait", b.ready ? `broker ${b.id} ready` : b.status);
    document.getElementById("foot-broker").textContent =
      `strom ${b.version} · broker ${b.id} · cluster ${b.cluster_id} · ${b.listeners.join(", ")}`;
  } catch (e) {
    setStatus("down", "broker unreachable");
  }
}

// ------------------------------------------------------------------ pages

const pages = {};

pages.overview = {
  mount(root) {
    root.append(el("h1", {}, "Overview", el("small", { id: "ov-sub" })));
    root.append(el("div", { class: "cards", id: "ov-cards" }));
    root.append(el("div", { class: "grid2" },
      el("div", { class: "panel" }, el("h2", { text: "Bytes per second" }), el("div", { id: "ov-bytes" }),
        el("div", { class: "legend" },
          el("span", {}, el("i", { style: "background:#2563eb" }), "in ", el("span", { class: "rate", id: "ov-bin" })),
          el("span", {}, el("i", { style: "background:#16a34a" }), "out ", el("span", { class: "rate", id: "ov-bout" })),
          el("span", {}, "peak ", el("span", { class: "rate", id: "ov-bpeak" })))),
      el("div", { class: "panel" }, el("h2", { text: "Records per second" }), el("div", { id: "ov-recs" }),
        el("div", { class: "legend" },
          el("span", {}, el("i", { style: "background:#2563eb" }), "in ", el("span", { class: "rate", id: "ov-rin" })),
          el("span", {}, el("i", { style: "background:#16a34a" }), "out ", el("span", { class: "rate", id: "ov-rout" })),
          el("span", {}, "peak ", el("span", { class: "rate", id: "ov-rpeak" }))))));
    root.append(el("div", { class: "panel" }, el("h2", { text: "Largest topics" }), el("div", { id: "ov-topics" })));
  },
  async refresh(root) {
    const ov = state.overview;
    if (!ov) return;
    const b = ov.broker;
    root.querySelector("#ov-sub").textContent = `broker ${b.id} · up ${fmtDuration(b.uptime_seconds)}`;
    const r = rates();
    const now = r.length ? r[r.length - 1] : null;
    root.querySelector("#ov-cards").replaceChildren(
      card("Status", b.ready ? "Ready" : "Starting", b.status),
      card("Brokers", fmtNum(ov.cluster.brokers), `controller ${ov.cluster.controller_id}`, "ov-brokers"),
      card("Under-replicated", fmtNum(ov.cluster.under_replicated_partitions),
        ov.cluster.offline_partitions ? `${fmtNum(ov.cluster.offline_partitions)} offline` : "partitions", "ov-urp"),
      card("Topics", fmtNum(ov.topics), `${fmtNum(ov.internal_topics)} internal`),
      card("Partitions", fmtNum(ov.partitions)),
      card("Data on disk", fmtBytes(ov.size_bytes)),
      card("Connections", fmtNum(ov.connections)),
      card("Consumer groups", fmtNum(ov.groups)),
      card("In now", now ? fmtRate(now.records_in, "rec") : "–", now ? fmtRate(now.bytes_in, "B") : ""),
      card("Out now", now ? fmtRate(now.records_out, "rec") : "–", now ? fmtRate(now.bytes_out, "B") : ""),
    );
    root.querySelector("#ov-bytes").replaceChildren(chart(r, "bytes_in", "bytes_out"));
    root.querySelector("#ov-recs").replaceChildren(chart(r, "records_in", "records_out"));
    root.querySelector("#ov-bin").textContent = now ? fmtRate(now.bytes_in, "B") : "–";
    root.querySelector("#ov-bout").textContent = now ? fmtRate(now.bytes_out, "B") : "–";
    root.querySelector("#ov-rin").textContent = now ? fmtRate(now.records_in, "rec") : "–";
    root.querySelector("#ov-rout").textContent = now ? fmtRate(now.records_out, "rec") : "–";
    const peak = (a, b) => Math.max(0, ...r.map((p) => Math.max(p[a], p[b])));
    root.querySelector("#ov-bpeak").textContent = fmtRate(peak("bytes_in", "bytes_out"), "B");
    root.querySelector("#ov-rpeak").textContent = fmtRate(peak("records_in", "records_out"), "rec");
    if (!b.ready) return;
    const { topics } = await api("/api/topics");
    const top = topics.filter((t) => !t.internal).sort((a, c) => c.size_bytes - a.size_bytes).slice(0, 8);
    root.querySelector("#ov-topics").replaceChildren(table(
      ["Topic", ["Partitions", "num"], ["Messages", "num"], ["Size", "num"]],
      top.map((t) => el("tr", {},
        el("td", {}, el("a", { href: `#/topics/${encodeURIComponent(t.name)}`, text: t.name })),
        el("td", { class: "num", text: fmtNum(t.partitions) }),
        el("td", { class: "num", text: fmtNum(t.messages) }),
        el("td", { class: "num", text: fmtBytes(t.size_bytes) }))),
      "No topics yet."));
  },
};

pages.cluster = {
  mount(root) {
    root.append(el("h1", {}, "Cluster", el("small", { id: "cl-sub" })));
    root.append(el("div", { class: "cards", id: "cl-cards" }));
    root.append(el("div", { class: "panel" }, el("h2", { text: "Brokers" }), el("div", { id: "cl-brokers" })));
    root.append(el("div", { class: "panel" }, el("h2", { text: "Partitions needing attention" }),
      el("div", { id: "cl-partitions" })));
  },
  async refresh(root) {
    const c = await api("/api/cluster");
    root.querySelector("#cl-sub").textContent = `cluster ${c.cluster_id} · seen from broker ${c.broker_id}`;
    const urp = c.under_replicated_partitions, offline = c.offline_partitions;
    root.querySelector("#cl-cards").replaceChildren(
      card("Brokers", fmtNum(c.brokers.length)),
      card("Controller", c.controller_id >= 0 ? String(c.controller_id) : "none"),
      card("Partitions", fmtNum(c.partitions)),
      card("Under-replicated", fmtNum(urp.length), "ISR smaller than replicas"),
      card("Offline", fmtNum(offline.length), "no live leader"));
    root.querySelector("#cl-brokers").replaceChildren(table(
      [["Broker", "num"], "Address", "Rack", "Role"],
      c.brokers.map((b) => el("tr", { "data-broker": b.id },
        el("td", { class: "num", text: b.id }),
        el("td", { class: "mono", text: `${b.host}:${b.port}` }),
        el("td", { text: b.rack || "–" }),
        el("td", {},
          b.controller ? el("span", { class: "badge controller", text: "controller" }) : null, " ",
          b.self ? el("span", { class: "badge", text: "this broker" }) : null))),
      "No live brokers."));
    const rows = [...offline.map((p) => ({ ...p, offline: true })), ...urp.map((p) => ({ ...p, under_replicated: true }))];
    root.querySelector("#cl-partitions").replaceChildren(table(
      ["Topic", ["Partition", "num"], ["Leader", "num"], "Replicas", "ISR", "State"],
      rows.map((p) => el("tr", { "data-tp": `${p.topic}-${p.partition}`, class: p.offline ? "offline" : "urp" },
        el("td", {}, el("a", { href: `#/topics/${encodeURIComponent(p.topic)}`, text: p.topic })),
        el("td", { class: "num", text: p.partition }),
        el("td", { class: "num", text: p.leader >= 0 ? p.leader : "none" }),
        el("td", {}, replicaList(p.replicas, p.offline_replicas)),
        el("td", { text: p.isr.join(", ") }),
        el("td", {}, replicaBadge(p)))),
      "Every partition has a leader and its full ISR."));
  },
};

pages.topics = {
  mount(root) {
    root.append(el("h1", {}, "Topics", el("small", { id: "tp-sub" })));
    root.append(el("div", { class: "flash" }));
    const form = el("form", { class: "inline", id: "create-topic" },
      el("label", { class: "f" }, "Name", el("input", { name: "name", required: true, placeholder: "orders", pattern: "[a-zA-Z0-9._\\-]+" })),
      el("label", { class: "f" }, "Partitions", el("input", { name: "partitions", type: "number", min: 1, value: 1 })),
      el("label", { class: "f" }, "Replication", el("input", { name: "replication_factor", type: "number", min: 1, value: 1 })),
      el("label", { class: "f" }, "Configs (key=value, one a line)",
        el("textarea", { name: "configs", rows: 1, cols: 34, placeholder: "retention.ms=86400000" })),
      el("button", { type: "submit", text: "Create topic" }));
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const fd = new FormData(form);
      const configs = {};
      for (const line of String(fd.get("configs") || "").split("\n")) {
        const s = line.trim();
        if (!s) continue;
        const i = s.indexOf("=");
        if (i <= 0) { message(root, "error", `config line "${s}" is not key=value`); return; }
        configs[s.slice(0, i).trim()] = s.slice(i + 1).trim();
      }
      const name = String(fd.get("name")).trim();
      try {
        await api("/api/topics", {
          method: "POST",
          headers: { "Content-Type": "application/json", "Accept": "application/json" },
          body: JSON.stringify({ name, partitions: Number(fd.get("partitions")),
                                 replication_factor: Number(fd.get("replication_factor")), configs }),
        });
        message(root, "ok", `Created topic ${name}.`);
        form.reset();
        this.refresh(root);
      } catch (e) {
        message(root, "error", `Could not create ${name}: ${e.message}`);
      }
    });
    root.append(el("div", { class: "panel" }, el("h2", { text: "Create a topic" }), form));
    const toggle = el("label", { class: "check" }, el("input", { type: "checkbox", id: "show-internal" }), "show internal topics");
    toggle.querySelector("input").addEventListener("change", () => this.refresh(root));
    root.append(el("div", { class: "panel" }, el("div", { class: "toolbar" }, toggle), el("div", { id: "tp-table" })));
  },
  async refresh(root) {
    const { topics } = await api("/api/topics");
    const now = Date.now() / 1000;
    const prev = state.topicPrev;
    const showInternal = root.querySelector("#show-internal").checked;
    const shown = topics.filter((t) => showInternal || !t.internal);
    root.querySelector("#tp-sub").textContent = `${shown.length} shown`;
    const rate = (t, key) => {
      const p = prev && prev.byName[t.name];
      if (!p || now <= prev.t) return null;
      return Math.max(0, t[key] - p[key]) / (now - prev.t);
    };
    const rows = shown.map((t) => el("tr", { "data-topic": t.name },
      el("td", {}, el("a", { href: `#/topics/${encodeURIComponent(t.name)}`, text: t.name }),
        t.internal ? el("span", { class: "badge internal", style: "margin-left:8px", text: "internal" }) : null,
        t.offline_partitions ? el("span", { class: "badge offline", style: "margin-left:8px", text: "offline" })
          : t.under_replicated_partitions ? el("span", { class: "badge urp", style: "margin-left:8px", text: "under-replicated" })
          : null),
      el("td", { class: "num", text: fmtNum(t.partitions) }),
      el("td", { class: "num", text: fmtNum(t.replication_factor) }),
      el("td", { class: "num", text: fmtNum(t.messages) }),
      el("td", { class: "num", text: fmtNum(t.end_offsets) }),
      el("td", { class: "num", text: fmtBytes(t.size_bytes) }),
      el("td", { class: "num", text: fmtRate(rate(t, "records_in"), "rec") }),
      el("td", { class: "num", text: fmtRate(rate(t, "records_out"), "rec") }),
      el("td", {},
        el("a", { href: `#/messages/${encodeURIComponent(t.name)}/0`, text: "browse" }), " ",
        t.internal ? null : el("button", {
          class: "danger", type: "button", text: "delete", "data-delete": t.name,
          onclick: async () => {
            if (!window.confirm(`Delete topic ${t.name} and all its data?`)) return;
            try {
              await api(`/api/topics/${encodeURIComponent(t.name)}`, { method: "DELETE" });
              message(root, "ok", `Deleted topic ${t.name}.`);
              this.refresh(root);
            } catch (e) {
              message(root, "error", `Could not delete ${t.name}: ${e.message}`);
            }
          },
        }))));
    state.topicPrev = { t: now, byName: Object.fromEntries(topics.map((t) => [t.name, t])) };
    root.querySelector("#tp-table").replaceChildren(table(
      ["Topic", ["Partitions", "num"], ["RF", "num"], ["Messages", "num"], ["End offsets", "num"], ["Size", "num"],
       ["In", "num"], ["Out", "num"], ""],
      rows, "No topics yet: create one above, or produce to a new topic."));
  },
};

pages.topic = {
  mount(root, args) {
    this.name = args[0];
    root.append(el("h1", {}, el("a", { href: "#/topics", text: "Topics" }), "›", el("span", { text: this.name })));
    root.append(el("div", { class: "cards", id: "t-cards" }));
    root.append(el("div", { class: "panel" }, el("h2", { text: "Partitions" }), el("div", { id: "t-parts" })));
    root.append(el("div", { class: "panel" }, el("h2", { text: "Producers" }), el("div", { id: "t-producers" })));
    root.append(el("div", { class: "panel" }, el("h2", { text: "Configuration overrides" }), el("div", { id: "t-configs" })));
  },
  // Each partition's idempotent and transactional producers (DescribeProducers), with its LSO.
  async refreshProducers(root) {
    const box = root.querySelector("#t-producers");
    let d;
    try {
      d = await api(`/api/topics/${encodeURIComponent(this.name)}/producers`);
    } catch (e) {
      box.replaceChildren(el("div", { class: "muted", text: e.message }));
      return;
    }
    const rows = [];
    for (const p of d.partitions) {
      for (const pr of p.producers) {
        const open = pr.current_txn_start_offset >= 0;
        rows.push(el("tr", { "data-producer": `${p.partition}-${pr.producer_id}` },
          el("td", { class: "num", text: p.partition }),
          el("td", { class: "num mono", text: pr.producer_id }),
          el("td", { class: "num", text: pr.producer_epoch }),
          el("td", { class: "num", text: pr.last_sequence }),
          el("td", { class: "mono", text: fmtTime(pr.last_timestamp) }),
          el("td", { class: "num" }, open ? el("span", { class: "badge Ongoing", text: `open from ${fmtNum(pr.current_txn_start_offset)}` }) : "–"),
          el("td", { class: "num", text: fmtNum(p.last_stable_offset) }),
          el("td", { class: "num", text: fmtNum(p.high_watermark) })));
      }
    }
    box.replaceChildren(table(
      [["Partition", "num"], ["Producer id", "num"], ["Epoch", "num"], ["Last sequence", "num"], "Last write",
       ["Open transaction", "num"], ["Last stable offset", "num"], ["High watermark", "num"]],
      rows, "No idempotent or transactional producers on this topic."));
  },
  async refresh(root) {
    let t;
    try {
      t = await api(`/api/topics/${encodeURIComponent(this.name)}`);
    } catch (e) {
      root.querySelector("#t-cards").replaceChildren(el("div", { class: "msg error", text: e.message }));
      return;
    }
    root.querySelector("#t-cards").replaceChildren(
      card("Partitions", fmtNum(t.partitions), `replication factor ${t.replication_factor}`),
      card("Under-replicated", fmtNum(t.under_replicated_partitions),
        t.offline_partitions ? `${fmtNum(t.offline_partitions)} offline` : "partitions"),
      card("Messages", fmtNum(t.messages)),
      card("Size", fmtBytes(t.size_bytes)),
      card("Records in", fmtNum(t.records_in), fmtBytes(t.bytes_in)),
      card("Records out", fmtNum(t.records_out), fmtBytes(t.bytes_out)),
      card("Topic id", t.topic_id.slice(0, 8) + "…", t.topic_id));
    root.querySelector("#t-parts").replaceChildren(table(
      [["Partition", "num"], ["Leader", "num"], "Replicas", "ISR", ["Start offset", "num"],
       ["High watermark", "num"], ["End offset", "num"], ["Messages", "num"], ["Size", "num"], "Replication", ""],
      t.partition_list.map((p) => el("tr", { "data-partition": p.partition,
                                             class: p.offline ? "offline" : p.under_replicated ? "urp" : null },
        el("td", { class: "num", text: p.partition }),
        el("td", { class: "num", text: p.leader >= 0 ? p.leader : "none" }),
        el("td", {}, replicaList(p.replicas, p.offline_replicas)),
        el("td", { text: p.isr.join(", ") }),
        el("td", { class: "num", text: fmtNum(p.log_start_offset) }),
        el("td", { class: "num", text: fmtNum(p.high_watermark) }),
        el("td", { class: "num", text: fmtNum(p.log_end_offset) }),
        el("td", { class: "num", text: fmtNum(p.messages) }),
        el("td", { class: "num", text: fmtBytes(p.size_bytes) }),
        el("td", {}, replicaBadge(p)),
        el("td", {}, el("a", { href: `#/messages/${encodeURIComponent(t.name)}/${p.partition}`, text: "browse" }))))));
    await this.refreshProducers(root);
    const cfg = Object.entries(t.configs);
    root.querySelector("#t-configs").replaceChildren(cfg.length
      ? el("dl", { class: "kv" }, cfg.map(([k, v]) => [el("dt", { text: k }), el("dd", { text: v })]))
      : el("div", { class: "muted", text: "None: the broker's defaults apply." }));
  },
};

pages.messages = {
  mount(root, args) {
    this.topic = args[0] || "";
    this.partition = Number(args[1] || 0);
    this.mode = "newest";
    this.format = "text";
    this.data = null;
    root.append(el("h1", {}, "Messages", el("small", { id: "m-sub" })));
    root.append(el("div", { class: "flash" }));
    const topicSel = el("select", { id: "m-topic" });
    const partSel = el("select", { id: "m-partition" });
    const seg = (id, options, current, onpick) => {
      const box = el("div", { class: "seg", id });
      for (const [value, label] of options) {
        box.append(el("button", { type: "button", class: value === current ? "on" : "", "data-value": value, text: label,
          onclick: () => {
            box.querySelectorAll("button").forEach((b) => b.classList.toggle("on", b.dataset.value === value));
            onpick(value);
          } }));
      }
      return box;
    };
    const modeSeg = seg("m-mode", [["newest", "Newest"], ["offset", "From offset"], ["time", "From time"]], this.mode,
      (v) => { this.mode = v; this.syncInputs(root); this.load(root); });
    const fmtSeg = seg("m-format", [["text", "Text"], ["json", "JSON"], ["hex", "Hex"]], this.format,
      (v) => { this.format = v; this.render(root); });
    const from = el("input", { id: "m-offset", type: "number", min: 0, value: 0 });
    const when = el("input", { id: "m-time", type: "datetime-local", step: 1 });
    const limit = el("input", { id: "m-limit", type: "number", min: 1, max: 500, value: 50 });
    const follow = el("label", { class: "check" }, el("input", { type: "checkbox", id: "m-follow", checked: true }), "follow new records");
    const form = el("form", { class: "toolbar" },
      el("label", { class: "f" }, "Topic", topicSel),
      el("label", { class: "f" }, "Partition", partSel),
      el("label", { class: "f" }, "Read", modeSeg),
      el("label", { class: "f", id: "m-offset-box" }, "Offset", from),
      el("label", { class: "f", id: "m-time-box" }, "Time (local)", when),
      el("label", { class: "f" }, "Limit", limit),
      el("label", { class: "f" }, "Show as", fmtSeg),
      follow,
      el("button", { type: "submit", text: "Load" }));
    form.addEventListener("submit", (ev) => { ev.preventDefault(); this.load(root); });
    topicSel.addEventListener("change", () => { this.topic = topicSel.value; this.partition = 0; this.fillPartitions(root); this.go(); });
    partSel.addEventListener("change", () => { this.partition = Number(partSel.value); this.go(); });
    root.append(el("div", { class: "panel" }, form, el("div", { id: "m-table" })));
    this.syncInputs(root);
    this.fillTopics(root).then(() => this.load(root));
  },
  go() {
    const h = `#/messages/${encodeURIComponent(this.topic)}/${this.partition}`;
    if (location.hash !== h) history.replaceState(null, "", h);
    this.load(document.getElementById("main"));
  },
  syncInputs(root) {
    root.querySelector("#m-offset-box").style.display = this.mode === "offset" ? "" : "none";
    root.querySelector("#m-time-box").style.display = this.mode === "time" ? "" : "none";
  },
  async fillTopics(root) {
    const { topics } = await api("/api/topics");
    this.topics = topics;
    const sel = root.querySelector("#m-topic");
    const names = topics.map((t) => t.name);
    if (!this.topic || !names.includes(this.topic)) {
      const firstUser = topics.find((t) => !t.internal);
      this.topic = this.topic && !names.includes(this.topic) ? this.topic : (firstUser ? firstUser.name : (names[0] || ""));
    }
    sel.replaceChildren(...topics.map((t) => el("option", { value: t.name, selected: t.name === this.topic, text: t.name })));
    this.fillPartitions(root);
  },
  fillPartitions(root) {
    const t = (this.topics || []).find((x) => x.name === this.topic);
    const n = t ? t.partitions : 0;
    const sel = root.querySelector("#m-partition");
    sel.replaceChildren(...Array.from({ length: n }, (_, i) => el("option", { value: i, selected: i === this.partition, text: i })));
  },
  async load(root) {
    if (!this.topic) {
      root.querySelector("#m-table").replaceChildren(el("div", { class: "empty", text: "No topic to browse yet." }));
      return;
    }
    const q = new URLSearchParams({ partition: this.partition, limit: root.querySelector("#m-limit").value || 50 });
    if (this.mode === "offset") q.set("offset", root.querySelector("#m-offset").value || 0);
    if (this.mode === "time") {
      const v = root.querySelector("#m-time").value;
      if (!v) { message(root, "error", "Pick a time to read from."); return; }
      q.set("timestamp", String(new Date(v).getTime()));
    }
    try {
      this.data = await api(`/api/topics/${encodeURIComponent(this.topic)}/messages?${q}`);
      const flash = root.querySelector(".flash");
      if (flash) flash.replaceChildren();
    } catch (e) {
      message(root, "error", e.message);
      return;
    }
    this.render(root);
  },
  render(root) {
    const d = this.data;
    if (!d) return;
    root.querySelector("#m-sub").textContent =
      `${d.topic}-${d.partition} · offsets ${fmtNum(d.log_start_offset)} to ${fmtNum(d.high_watermark)} · showing ${d.records.length}`;
    const records = this.mode === "newest" ? d.records.slice().reverse() : d.records;
    root.querySelector("#m-table").replaceChildren(table(
      [["Offset", "num"], "Timestamp", "Key", "Value", "Headers"],
      records.map((r) => el("tr", { "data-offset": r.offset },
        el("td", { class: "num mono", text: r.offset }),
        el("td", { class: "mono", title: r.timestamp_type, text: fmtTime(r.timestamp) }),
        el("td", {}, renderBytes(r.key, r.key_size, this.format === "json" ? "text" : this.format)),
        el("td", {}, renderBytes(r.value, r.value_size, this.format)),
        el("td", {}, r.headers.length ? r.headers.map((h) => el("span", { class: "hdr" },
          `${h.key}=${h.value === null ? "null" : utf8.decode(b64bytes(h.value))}`)) : el("span", { class: "muted", text: "–" })))),
      "No records in this range."));
  },
  async refresh(root) {
    if (this.mode === "newest" && root.querySelector("#m-follow").checked) await this.load(root);
  },
};

pages.groups = {
  mount(root) {
    root.append(el("h1", {}, "Consumer groups", el("small", { id: "g-sub" })));
    root.append(el("div", { class: "panel" }, el("div", { id: "g-table" })));
  },
  async refresh(root) {
    const { groups } = await api("/api/groups");
    root.querySelector("#g-sub").textContent = `${groups.length} groups`;
    root.querySelector("#g-table").replaceChildren(table(
      ["Group", "State", ["Members", "num"], "Topics", ["Lag", "num"], "Type", ["Epoch", "num"]],
      groups.map((g) => el("tr", { "data-group": g.group_id },
        el("td", {}, el("a", { href: `#/groups/${encodeURIComponent(g.group_id)}`, text: g.group_id })),
        el("td", {}, el("span", { class: `badge ${g.state}`, text: g.state })),
        el("td", { class: "num", text: fmtNum(g.members) }),
        el("td", { text: g.topics.join(", ") || "–" }),
        lagCell(g.lag),
        el("td", {}, el("span", { class: `badge ${g.type}`, text: g.type })),
        el("td", { class: "num", text: g.group_epoch === null ? "–" : fmtNum(g.group_epoch) }))),
      "No consumer groups yet."));
  },
};

// A consumer-protocol member's assignment against its target: the partitions it holds, those it
// must still revoke (struck through) and those it will get once their owner releases them (+N).
function assignmentCell(m) {
  const target = new Map(m.target_assignment.map((a) => [a.topic, new Set(a.partitions)]));
  const current = new Map(m.assignment.map((a) => [a.topic, new Set(a.partitions)]));
  const topics = [...new Set([...target.keys(), ...current.keys()])].sort();
  const td = el("td", { class: "mono assignment" });
  if (!topics.length) td.append("–");
  topics.forEach((t, i) => {
    const now = current.get(t) || new Set(), want = target.get(t) || new Set();
    const parts = [...new Set([...now, ...want])].sort((a, b) => a - b);
    if (i) td.append("; ");
    td.append(`${t} [`);
    parts.forEach((p, j) => {
      if (j) td.append(", ");
      if (now.has(p) && !want.has(p)) td.append(el("span", { class: "part revoke", title: "to be revoked", text: p }));
      else if (!now.has(p)) td.append(el("span", { class: "part assign", title: "to be assigned", text: `+${p}` }));
      else td.append(String(p));
    });
    td.append("]");
  });
  return td;
}

function consumerMembers(g) {
  return table(
    ["Member", "Instance", "Client id", "Host", ["Epoch", "num"], "Subscription", "Assignment (target)"],
    g.member_list.map((m) => el("tr", { "data-member": m.member_id, "data-client": m.client_id },
      el("td", { class: "mono", text: m.member_id }),
      el("td", { text: m.group_instance_id || "–" }),
      el("td", { text: m.client_id }),
      el("td", { text: m.client_host }),
      el("td", { class: "num" + (m.member_epoch < g.assignment_epoch ? " lag-pos" : ""), text: fmtNum(m.member_epoch),
        title: m.member_epoch < g.assignment_epoch ? "reconciling toward the target assignment epoch" : null }),
      el("td", { class: "mono", text: [...m.subscribed_topic_names,
        ...(m.subscribed_topic_regex ? [`regex ${m.subscribed_topic_regex}`] : [])].join(", ") || "–" }),
      assignmentCell(m))),
    "No active members.");
}

pages.group = {
  mount(root, args) {
    this.id = args[0];
    root.append(el("h1", {}, el("a", { href: "#/groups", text: "Consumer groups" }), "›", el("span", { text: this.id })));
    root.append(el("div", { class: "cards", id: "gd-cards" }));
    root.append(el("div", { class: "panel" }, el("h2", { text: "Members and assignment" }), el("div", { id: "gd-members" })));
    root.append(el("div", { class: "panel" }, el("h2", { text: "Committed offsets and lag" }), el("div", { id: "gd-offsets" })));
  },
  async refresh(root) {
    let g;
    try {
      g = await api(`/api/groups/${encodeURIComponent(this.id)}`);
    } catch (e) {
      root.querySelector("#gd-cards").replaceChildren(el("div", { class: "msg error", text: e.message }));
      return;
    }
    const consumer = g.type === "consumer", share = g.type === "share";
    root.querySelector("#gd-cards").replaceChildren(...[
      card("State", g.state, null, "gd-state"),
      card("Type", g.type, consumer ? "KIP-848 consumer protocol" : share ? "KIP-932 share group: records, not partitions"
        : "classic rebalance protocol", "gd-type"),
      card("Members", fmtNum(g.members)),
      consumer ? card("Assignor", g.protocol || "–", "server-side", "gd-assignor")
        : card("Protocol", g.protocol || "–", g.protocol_type || ""),
      consumer ? card("Group epoch", fmtNum(g.group_epoch), `target assignment epoch ${fmtNum(g.assignment_epoch)}`,
        "gd-epoch") : null,
      card("Total lag", fmtNum(g.lag))].filter(Boolean));
    if (consumer) {
      root.querySelector("#gd-members").replaceChildren(consumerMembers(g), el("div", { class: "legend" },
        el("span", {}, el("span", { class: "part revoke", text: "3" }), " still to be revoked"),
        el("span", {}, el("span", { class: "part assign", text: "+5" }), " to be assigned once released")));
    } else root.querySelector("#gd-members").replaceChildren(table(
      ["Member", "Client id", "Host", "Assignment"],
      g.member_list.map((m) => el("tr", {},
        el("td", { class: "mono", text: m.member_id }),
        el("td", { text: m.client_id }),
        el("td", { text: m.client_host }),
        el("td", { class: "mono", text: m.assignment.map((a) => `${a.topic} [${a.partitions.join(", ")}]`).join("; ") || "–" }))),
      "No active members."));
    root.querySelector("#gd-offsets").replaceChildren(table(
      ["Topic", ["Partition", "num"], [share ? "Start offset" : "Committed", "num"], ["End offset", "num"], ["Lag", "num"],
        "Member"],
      g.offsets.map((o) => el("tr", { "data-tp": `${o.topic}-${o.partition}` },
        el("td", {}, el("a", { href: `#/topics/${encodeURIComponent(o.topic)}`, text: o.topic })),
        el("td", { class: "num", text: o.partition }),
        el("td", { class: "num", text: fmtNum(o.committed) }),
        el("td", { class: "num", text: fmtNum(o.end_offset) }),
        lagCell(o.lag),
        el("td", { class: "mono", text: o.member_id || "–" }))),
      "No committed offsets."));
  },
};

function txnPartitions(parts) {
  return parts.map((p) => `${p.topic}-${p.partition}`).join(", ") || "–";
}

pages.transactions = {
  mount(root) {
    root.append(el("h1", {}, "Transactions", el("small", { id: "tx-sub" })));
    root.append(el("div", { class: "cards", id: "tx-cards" }));
    root.append(el("div", { class: "panel" }, el("h2", { text: "Open transactions" }), el("div", { id: "tx-open" })));
    root.append(el("div", { class: "panel" }, el("h2", { text: "Hanging transactions" }),
      el("p", { class: "muted", id: "tx-hanging-note" }), el("div", { id: "tx-hanging" })));
    root.append(el("div", { class: "panel" }, el("h2", { text: "Transactional ids at rest" }), el("div", { id: "tx-idle" })));
  },
  async refresh(root) {
    const d = await api("/api/transactions");
    const open = d.transactions.filter((t) => t.open);
    const idle = d.transactions.filter((t) => !t.open);
    const c = d.counters;
    root.querySelector("#tx-sub").textContent =
      `${d.transactions.length} transactional ids · max timeout ${fmtDuration(d.max_timeout_ms / 1000)}`;
    root.querySelector("#tx-cards").replaceChildren(
      card("Open", fmtNum(open.length), "transactions", "tx-open-count"),
      card("Hanging", fmtNum(d.hanging.length), "partitions held back", "tx-hanging-count"),
      card("Committed", fmtNum(c.committed), "since start"),
      card("Aborted", fmtNum(c.aborted), `${fmtNum(c.timed_out)} timed out`),
      card("Expired ids", fmtNum(c.expired), "since start"));
    root.querySelector("#tx-open").replaceChildren(table(
      ["Transactional id", ["Producer id", "num"], ["Epoch", "num"], "State", "Partitions", "Started", ["Age", "num"],
       ["Timeout", "num"]],
      open.map((t) => el("tr", { "data-txn": t.transactional_id,
                                 class: t.age_ms !== null && t.age_ms > t.timeout_ms ? "urp" : null },
        el("td", {}, el("a", { href: `#/transactions/${encodeURIComponent(t.transactional_id)}`, text: t.transactional_id })),
        el("td", { class: "num mono", text: t.producer_id }),
        el("td", { class: "num", text: t.producer_epoch }),
        el("td", {}, el("span", { class: `badge ${t.state}`, text: t.state })),
        el("td", { class: "mono", text: txnPartitions(t.partitions) }),
        el("td", { class: "mono", text: fmtTime(t.start_time) }),
        el("td", { class: "num", text: t.age_ms === null ? "–" : fmtDuration(t.age_ms / 1000) }),
        el("td", { class: "num", text: fmtDuration(t.timeout_ms / 1000) }))),
      "No open transactions."));
    root.querySelector("#tx-hanging-note").textContent = d.coordinates_all
      ? "Open on a partition, but past the max timeout or unknown to the coordinator: read_committed consumers stall at the start offset."
      : "Open on a partition for longer than the max timeout (other brokers coordinate some transactional ids).";
    root.querySelector("#tx-hanging").replaceChildren(table(
      ["Topic", ["Partition", "num"], ["Producer id", "num"], ["Epoch", "num"], ["Start offset", "num"], "Last write",
       ["Age", "num"], "Why"],
      d.hanging.map((h) => el("tr", { "data-hanging": `${h.topic}-${h.partition}-${h.producer_id}`, class: "urp" },
        el("td", {}, el("a", { href: `#/topics/${encodeURIComponent(h.topic)}`, text: h.topic })),
        el("td", { class: "num", text: h.partition }),
        el("td", { class: "num mono", text: h.producer_id }),
        el("td", { class: "num", text: h.producer_epoch }),
        el("td", { class: "num", text: fmtNum(h.start_offset) }),
        el("td", { class: "mono", text: fmtTime(h.last_timestamp) }),
        el("td", { class: "num", text: fmtDuration(h.age_ms / 1000) }),
        el("td", { text: h.reasons.join("; ") }))),
      "No hanging transactions."));
    root.querySelector("#tx-idle").replaceChildren(table(
      ["Transactional id", ["Producer id", "num"], ["Epoch", "num"], "State", "Last update", ["Timeout", "num"]],
      idle.map((t) => el("tr", { "data-txn": t.transactional_id },
        el("td", {}, el("a", { href: `#/transactions/${encodeURIComponent(t.transactional_id)}`, text: t.transactional_id })),
        el("td", { class: "num mono", text: t.producer_id }),
        el("td", { class: "num", text: t.producer_epoch }),
        el("td", {}, el("span", { class: `badge ${t.state}`, text: t.state })),
        el("td", { class: "mono", text: fmtTime(t.last_update) }),
        el("td", { class: "num", text: fmtDuration(t.timeout_ms / 1000) }))),
      "None."));
  },
};

pages.transaction = {
  mount(root, args) {
    this.id = args[0];
    root.append(el("h1", {}, el("a", { href: "#/transactions", text: "Transactions" }), "›", el("span", { text: this.id })));
    root.append(el("div", { class: "cards", id: "txd-cards" }));
    root.append(el("div", { class: "panel" }, el("h2", { text: "Partitions in the transaction" }), el("div", { id: "txd-parts" })));
  },
  async refresh(root) {
    let t;
    try {
      t = await api(`/api/transactions/${encodeURIComponent(this.id)}`);
    } catch (e) {
      root.querySelector("#txd-cards").replaceChildren(el("div", { class: "msg error", text: e.message }));
      root.querySelector("#txd-parts").replaceChildren();
      return;
    }
    root.querySelector("#txd-cards").replaceChildren(
      card("State", t.state, t.open ? "open" : "at rest", "txd-state"),
      card("Producer", String(t.producer_id), `epoch ${t.producer_epoch}`),
      card("Started", t.start_time === null ? "–" : fmtTime(t.start_time),
        t.age_ms === null ? "" : `${fmtDuration(t.age_ms / 1000)} ago`),
      card("Timeout", fmtDuration(t.timeout_ms / 1000)),
      card("Last update", fmtTime(t.last_update)));
    root.querySelector("#txd-parts").replaceChildren(table(
      ["Topic", ["Partition", "num"]],
      t.partitions.map((p) => el("tr", { "data-tp": `${p.topic}-${p.partition}` },
        el("td", {}, el("a", { href: `#/topics/${encodeURIComponent(p.topic)}`, text: p.topic })),
        el("td", { class: "num", text: p.partition }))),
      "No partitions: no transaction is open."));
  },
};

// The schema registry's subjects (when the broker serves one: schema.registry.listeners).
function schemaOff(root, id, answer) {
  root.querySelector(id).replaceChildren(el("div", { class: "msg", text: answer.error ||
    "This broker serves no schema registry (set schema.registry.listeners to turn it on)." }));
}

pages.schemas = {
  mount(root) {
    root.append(el("h1", {}, "Schemas", el("small", { id: "sc-sub" })));
    root.append(el("div", { class: "cards", id: "sc-cards" }));
    root.append(el("div", { class: "panel" }, el("div", { id: "sc-table" })));
  },
  async refresh(root) {
    const r = await api("/api/schemas");
    if (!r.enabled || r.error) { schemaOff(root, "#sc-table", r); return; }
    root.querySelector("#sc-sub").textContent = `${r.subjects.length} subjects`;
    root.querySelector("#sc-cards").replaceChildren(
      card("Subjects", fmtNum(r.subjects.filter((s) => !s.deleted).length)),
      card("Schemas", fmtNum(r.schemas), "distinct ids"),
      card("Compatibility", r.compatibility, "global level", "sc-level"),
      card("Mode", r.mode, "global"));
    root.querySelector("#sc-table").replaceChildren(table(
      ["Subject", "Versions", ["Latest", "num"], ["Id", "num"], "Type", "Compatibility", "Mode"],
      r.subjects.map((s) => el("tr", { "data-subject": s.subject },
        el("td", {}, el("a", { href: `#/schemas/${encodeURIComponent(s.subject)}`, text: s.subject }),
          s.deleted ? el("span", { class: "badge Dead", text: "deleted" }) : null),
        el("td", { text: s.versions.join(", ") || "–" }),
        el("td", { class: "num", text: s.latest ? s.latest.version : "–" }),
        el("td", { class: "num", text: s.latest ? s.latest.id : "–" }),
        el("td", { text: s.latest ? s.latest.type : "–" }),
        el("td", { text: s.compatibility + (s.own_compatibility ? "" : " (global)") }),
        el("td", { text: s.mode }))),
      "No subjects yet."));
  },
};

pages.schema = {
  mount(root, args) {
    this.subject = args[0];
    root.append(el("h1", {}, el("a", { href: "#/schemas", text: "Schemas" }), "›", el("span", { text: this.subject })));
    root.append(el("div", { class: "cards", id: "sd-cards" }));
    root.append(el("div", { id: "sd-versions" }));
  },
  async refresh(root) {
    let r;
    try {
      r = await api(`/api/schemas/${encodeURIComponent(this.subject)}`);
    } catch (e) {
      root.querySelector("#sd-cards").replaceChildren(el("div", { class: "msg error", text: e.message }));
      return;
    }
    if (!r.enabled || r.error) { schemaOff(root, "#sd-versions", r); return; }
    root.querySelector("#sd-cards").replaceChildren(
      card("Versions", fmtNum(r.versions.filter((v) => !v.deleted).length)),
      card("Compatibility", r.compatibility, r.own_compatibility ? "the subject's own" : "the global level", "sd-level"),
      card("Mode", r.mode));
    root.querySelector("#sd-versions").replaceChildren(...r.versions.map((v) => el("div",
      { class: "panel", "data-version": v.version },
      el("h2", {}, `Version ${v.version}`, el("small", { text: ` id ${v.id} · ${v.type}` }),
        v.deleted ? el("span", { class: "badge Dead", text: "soft-deleted" }) : null),
      v.references.length ? el("p", { class: "muted", text: "References: " + v.references.map(
        (x) => `${x.name} → ${x.subject} v${x.version}`).join(", ") }) : null,
      el("pre", { class: "mono schema", text: v.schema }))));
  },
};

// ------------------------------------------------------------------ router and polling

function parseRoute() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter((p) => p !== "").map(decodeURIComponent);
  const head = parts[0] || "overview";
  if (head === "topics" && parts.length > 1) return ["topic", parts.slice(1)];
  if (head === "groups" && parts.length > 1) return ["group", parts.slice(1)];
  if (head === "transactions" && parts.length > 1) return ["transaction", parts.slice(1)];
  if (head === "schemas" && parts.length > 1) return ["schema", parts.slice(1)];
  if (head === "messages") return ["messages", parts.slice(1)];
  return [pages[head] ? head : "overview", []];
}

async function refreshPage() {
  const page = state.page;
  if (!page) return;
  try {
    await page.refresh(document.getElementById("main"));
  } catch (e) {
    if (state.page === page) console.warn("refresh failed:", e);
  }
}

function route() {
  const [name, args] = parseRoute();
  const key = name + "/" + args.join("/");
  if (state.page && state.route === key) return;
  state.route = key;
  const nav = { topic: "topics", group: "groups", transaction: "transactions", schema: "schemas" }[name] || name;
  document.querySelectorAll("#nav a").forEach((a) => a.classList.toggle("active", a.dataset.page === nav));
  const root = document.getElementById("main");
  root.replaceChildren();
  const page = Object.create(pages[name]);
  state.page = page;
  page.mount(root, args);
  if (name !== "messages") refreshPage();
}

async function tick() {
  await pollOverview();
  await refreshPage();
}

window.addEventListener("hashchange", route);
document.getElementById("foot-interval").textContent = String(POLL_MS / 1000);
pollOverview().then(() => { route(); });
setInterval(tick, POLL_MS);

// kvmc explorer page: reads the target from the URL (model, profile, variant, property,
// path, at), fetches /api/view and renders the domain. No external resources.
"use strict";
const $ = (id) => document.getElementById(id);
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
let data = null;

function params() { return new URLSearchParams(location.search); }

function go(changes, push) {
  const p = params();
  for (const [k, v] of Object.entries(changes)) {
    if (v === null || v === undefined) p.delete(k); else p.set(k, v);
  }
  const url = "/?" + p.toString().replace(/%2F/g, "/");
  if (push) history.pushState(null, "", url); else history.replaceState(null, "", url);
  load();
}

async function load() {
  const q = location.search.replace(/^\?/, "");
  let r;
  try {
    r = await fetch("/api/view?" + q);
  } catch (e) { return showError("the explorer did not answer: " + e); }
  const body = await r.json().catch(() => ({ error: "not JSON (status " + r.status + ")" }));
  if (!r.ok || body.error) return showError(body.error || ("status " + r.status));
  $("error").hidden = true;
  data = body;
  render();
}

function showError(msg) { const e = $("error"); e.textContent = msg; e.hidden = false; document.body.dataset.ready = "error"; }

function render() {
  const d = data, h = d.header;
  $("h-model").textContent = h.model;
  $("h-profile").textContent = h.profile;
  $("h-variant").textContent = h.variant;
  $("h-property").textContent = h.property || "(any)";
  $("h-connector").textContent = h.connector;
  $("permalink").href = location.pathname + location.search;
  $("command").textContent = d.command;
  document.title = "kvmc explorer: " + (h.property || h.scope) + " on " + h.model;
  renderTimeline(d);
  const conform = d.mode === "conform";
  $("next-title").hidden = conform;
  $("next").hidden = conform;
  if (conform) renderDivergence(d); else renderNext(d);
  if (!conform) renderViolation(d);
  renderConform(d);
  const s = d.steps[d.at];
  $("stepinfo").innerHTML = `<div class="act">Step ${d.at}: ${esc(s.action)}</div><div class="story">${esc(s.story)}</div>` +
    (s.changes ? `<div class="changes">changed: ${esc(s.changes)}</div>` : "");
  const st = d.state, pv = d.prev_state;
  renderG1(st.g1, pv && pv.g1);
  renderRequests(st, pv);
  renderHost(st.host, pv && pv.host);
  renderConnector(st.connector, pv && pv.connector);
  renderRows(st.rows, pv && pv.rows);
  renderPd(st.pd, pv && pv.pd);
  $("g1-title").textContent = st.pd ? "P (prefill instance): G1 (GPU block pool)" : "G1 (GPU block pool)";
  $("flags-panel").hidden = st.flags.length === 0;
  $("flags").textContent = st.flags.join(", ");
  document.body.dataset.ready = "yes";
  document.body.dataset.at = d.at;
}

function renderTimeline(d) {
  const ol = $("timeline");
  ol.innerHTML = "";
  d.steps.forEach((s, i) => {
    const li = document.createElement("li");
    li.className = "step" + (i === d.at ? " selected" : "") + (s.violated.length ? " violating" : "");
    li.dataset.index = i;
    const v = s.violated.length ? s.violated.map((p) => `<span class="vtag">${esc(p)}</span>`).join("") : "";
    li.innerHTML = `<span class="n">${i}</span><span class="act">${esc(s.action)}</span>${v}<span class="story">${esc(s.story)}</span>`;
    li.onclick = () => go({ at: i }, true);
    ol.appendChild(li);
  });
  const sel = ol.querySelector(".selected");
  if (sel) sel.scrollIntoView({ block: "nearest" });
}

// A conformance run: the banner names the first differing decision, the log line and the
// model's value (the timeline marks the diverging step).
function renderDivergence(d) {
  const box = $("violation"), x = d.divergence;
  const here = x && d.at === d.steps.length - 1;
  document.body.dataset.violated = here ? "yes" : "no";
  if (!here) { box.hidden = true; box.className = ""; box.innerHTML = ""; return; }
  box.hidden = false;
  box.className = "violated";
  box.innerHTML = `<h3>DIVERGES at step ${x.step} (log line ${x.line}): ${esc(x.what)}</h3>` +
    `<table id="divergence"><tr><th>implementation (log line ${x.line})</th><td class="impl">${esc(x.implementation)}</td></tr>` +
    `<tr><th>model (${esc(d.header.profile)})</th><td class="model">${esc(x.model)}</td></tr></table>` +
    (x.under.length ? `<div class="desc">none of the ${x.tried} resolutions of vLLM's set orders in this step matches; shown under ${esc(x.under.join(", "))}</div>` : "") +
    (x.search_bound ? `<div class="desc">INCOMPLETE: the search over vLLM's orders stopped at its bound: ${esc(x.search_bound)}</div>` : "");
}

// The selected step's log lines (inputs grey, decisions plain, the differing one red) beside
// the model's story of the same step.
function renderConform(d) {
  const panel = $("conform-panel");
  panel.hidden = d.mode !== "conform";
  if (panel.hidden) return;
  const s = d.steps[d.at];
  const rows = s.log.map((l) => `<tr class="logline${l.input ? " input" : ""}${l.differs ? " bad differs" : ""}" data-line="${l.line}"><td class="n">${l.line}</td><td>${esc(l.text)}</td></tr>`).join("");
  const model = s.story.split("; ").map((x) => `<li>${esc(x)}</li>`).join("");
  const x = d.divergence;
  const diff = x && d.at === d.steps.length - 1 ? `<div class="kv differs"><b>the model instead:</b> ${esc(x.model)}</div>` : "";
  $("conform").innerHTML = `<div class="kv"><b>${esc(d.header.property)}</b>: ${esc(d.verdict)}; ${esc(d.header.model)} under ${esc(d.header.profile)}${d.header.variant !== "fixed" ? " (" + esc(d.header.variant) + ")" : ""}</div>` +
    `<div class="side"><div class="col"><h2>Implementation: the log's lines of ${esc(s.action)}</h2><table id="log-lines">${rows || "<tr><td>(the initial state)</td></tr>"}</table></div>` +
    `<div class="col"><h2>Model: ${esc(s.action)}</h2><ul id="model-story">${model}</ul>${diff}</div></div>`;
}

function renderNext(d) {
  const div = $("next");
  div.innerHTML = "";
  if (!d.next.length) { div.textContent = d.next_note || "(no action: the state is final)"; return; }
  const base = d.steps[d.at].path;
  d.next.forEach((a) => {
    const b = document.createElement("button");
    b.textContent = a.label;
    b.dataset.index = a.index;
    b.onclick = () => go({ path: base + "/" + a.index, at: d.at + 1 }, true);
    div.appendChild(b);
  });
}

// Every element of the state marked bad, with why: the values that break the property.
function badValues(st) {
  const out = [];
  st.g1.blocks.forEach((b) => b.bad && out.push(`G1 block ${b.id}: ${b.why}`));
  if (st.host) {
    (st.host.entries || []).forEach((e) => e.bad && out.push(`${st.host.title} ${e.key}: ${e.why}`));
    (st.host.blocks || []).forEach((b) => b.bad && out.push(`CPU block ${b.id}: ${b.why}`));
  }
  if (st.pd) {
    st.pd.router.forEach((r) => r.bad && out.push(`router, ${r.name}: ${r.why || r.state}`));
    badValues(st.pd.d).forEach((x) => out.push("D: " + x));
  }
  if (st.rows) {
    st.rows.emitted.forEach((r) => r.gap && out.push(`${r.name}'s emitted rows have a gap`));
    if (st.rows.dead) out.push("the engine died (router replay)");
  }
  return out;
}

function renderViolation(d) {
  const box = $("violation");
  const v = d.violations;
  if (!v.length) { box.hidden = true; box.className = ""; box.innerHTML = ""; document.body.dataset.violated = "no"; return; }
  const values = badValues(d.state);
  box.hidden = false;
  box.className = "violated";
  document.body.dataset.violated = "yes";
  box.innerHTML = v.map((x) => {
    const e = x.explain;
    return `<h3>VIOLATED: ${esc(x.property)} (since step ${x.since})</h3>` +
      `<div class="summary">${esc(e.summary)}</div>` +
      (x.text ? `<div class="text">${esc(x.text)}</div>` : "") +
      (e.description ? `<details><summary>kvmc explain ${esc(x.property)}</summary><div class="desc">${esc(e.description)}</div>` +
        (e.bugs && e.bugs.length ? `<div class="desc">guards against: ${esc(e.bugs.join(", "))}</div>` : "") + `</details>` : "");
  }).join("") + (values.length ? `<h2>Values that break it</h2><ul class="values">${values.map((s) => `<li>${esc(s)}</li>`).join("")}</ul>` : "");
}

const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
function cls(cur, prev, extra) {
  let c = extra || "";
  if (prev !== undefined && !same(cur, prev)) c += " changed";
  if (cur && cur.bad) c += " bad";
  return c;
}

function blockGrid(blocks, prevBlocks, prefix) {
  return blocks.map((b) => {
    const p = prevBlocks ? prevBlocks.find((x) => x.id === b.id) : undefined;
    const state = b.free_pos >= 0 ? "free" : "held";
    return `<div class="block ${state}${cls(b, p, "")}" data-id="${b.id}" title="${esc(b.why || "")}">` +
      `<span class="id">${prefix}${b.id}</span><span class="ref">ref ${b.ref}</span>` +
      `<div class="hash">hash ${esc(b.hash)}</div><div class="content">${esc(b.content)}</div>` +
      (b.free_pos >= 0 ? `<span class="fq">free #${b.free_pos}</span>` : "") + `</div>`;
  }).join("");
}

function renderG1(g1, prev) {
  $("g1").innerHTML = blockGrid(g1.blocks, prev && prev.blocks, "") +
    `<div class="kv" style="width:100%"><b>free queue (head first)</b> [${g1.free_queue.join(", ")}]</div>`;
}

function chips(list, cur) { return list.map((x, i) => `<span class="chip${i === cur ? " cur" : ""}">${esc(x)}</span>`).join(""); }

function renderRequests(st, pv) {
  const q = st.queues;
  $("queues").innerHTML = `running [${esc(q.running.join(" "))}] &nbsp; waiting [${esc(q.waiting.join(" "))}] &nbsp; kv-holding [${esc(q.kv_holding.join(" "))}]`;
  let html = "<tr><th>request</th><th>status</th><th>computed / tokens</th><th>output</th><th>block table</th><th></th></tr>";
  st.requests.forEach((r) => {
    const p = pv ? pv.requests.find((x) => x.name === r.name) : undefined;
    const note = [r.preempted ? "preempted before" : "", r.input ? "session input " + r.input : ""].filter(Boolean).join(", ");
    html += `<tr class="req${cls(r, p, "")}" data-name="${esc(r.name)}"><td><b>${esc(r.name)}</b></td><td class="status-${esc(r.status)}">${esc(r.status)}</td>` +
      `<td>${r.computed} / ${r.tokens} (prompt ${r.prompt})</td><td>${r.output} / ${r.max_tokens}</td><td>${chips(r.table)}</td><td>${esc(note)}</td></tr>`;
  });
  $("requests").innerHTML = html;
}

function renderHost(h, prev) {
  $("host-panel").hidden = !h;
  if (!h) return;
  $("host-title").textContent = h.title;
  let html = "";
  if (h.kind === "offloading") {
    html += `<div class="kv"><b>capacity</b> ${h.capacity} chunks, <b>free</b> ${h.free}, <b>write-pending</b> ${h.write_pending}; <b>eviction order</b> (first evicted first) [${esc(h.eviction_order.join(", "))}]</div>`;
    if (h.arc) html += `<div class="kv"><b>ARC</b> T1 [${esc(h.arc.t1.join(", "))}] T2 [${esc(h.arc.t2.join(", "))}] B1 [${esc(h.arc.b1.join(", "))}] B2 [${esc(h.arc.b2.join(", "))}] target ${esc(h.arc.target)}</div>`;
  }
  if (h.blocks) {
    html += `<div class="kv"><b>free</b> ${h.num_free}; <b>free queue</b> [${h.free_queue.join(", ")}]; <b>eviction order</b> (FIFO by release) [${h.eviction_order.join(", ")}]</div>`;
    html += `<div class="grid" id="host-grid">${blockGrid(h.blocks, prev && prev.blocks, "cpu")}</div>`;
  }
  if (h.entries) {
    html += "<table id='host-entries'><tr><th>key</th><th>state</th><th>slot</th><th>rank</th><th>content</th></tr>";
    h.entries.forEach((e) => {
      const p = prev && prev.entries ? prev.entries.find((x) => x.key === e.key) : undefined;
      const added = prev && p === undefined ? " changed" : "";
      html += `<tr class="entry${cls(e, p, "")}${added}" title="${esc(e.why || "")}"><td><b>${esc(e.key)}</b></td><td>${esc(e.state)}</td><td>${e.slot === undefined ? "" : e.slot}</td>` +
        `<td>${esc(e.rank || "")}</td><td>${esc(e.content.join(","))}${e.bad ? " <b>(" + esc(e.why) + ")</b>" : ""}</td></tr>`;
    });
    if (!h.entries.length) html += "<tr><td colspan=5>(empty)</td></tr>";
    html += "</table>";
  }
  $("host").innerHTML = html;
}

function renderConnector(c, prev) {
  $("conn-panel").hidden = !c;
  if (!c) return;
  let html = "<table><tr><th>request</th><th>mirror table (cursor)</th><th></th></tr>";
  c.requests.forEach((r) => {
    const p = prev ? prev.requests.find((x) => x.name === r.name) : undefined;
    html += `<tr class="${cls(r, p, "")}"><td><b>${esc(r.name)}</b></td><td>${chips(r.mirror, r.cursor)} cursor ${r.cursor}</td><td>${esc(r.detail)}</td></tr>`;
  });
  if (!c.requests.length) html += "<tr><td colspan=3>(no request state)</td></tr>";
  html += "</table><table id='jobs'><tr><th>job</th><th>kind</th><th>request</th><th>keys</th><th>blocks</th><th>phase</th></tr>";
  c.jobs.forEach((j) => {
    const p = prev ? prev.jobs.find((x) => x.id === j.id && x.kind === j.kind) : undefined;
    html += `<tr class="${cls(j, p, "")}"><td>${j.id}</td><td>${esc(j.kind)}</td><td>${esc(j.req)}</td><td>${esc(j.keys.join(","))}</td><td>${esc(j.blocks.join(","))}</td><td>${esc(j.phase)}</td></tr>`;
  });
  if (!c.jobs.length) html += "<tr><td colspan=6>(no job in flight)</td></tr>";
  $("connector").innerHTML = html + "</table>";
}

function renderRows(r, prev) {
  $("rows-panel").hidden = !r;
  if (!r) return;
  let html = `<div class="kv"><b>row store</b> ${r.store.length} of ${r.store_capacity} objects${r.dead ? " &mdash; <b style='color:#b22525'>engine dead</b>" : ""}</div>`;
  html += `<div id="row-store" class="grid">${r.store.map((o) => {
    const p = prev ? prev.store.find((x) => x.key === o.key) : undefined;
    return `<div class="block${cls(o, p, "")}${prev && !p ? " changed" : ""}"><span class="id">${esc(o.key)}</span><div class="hash">refs ${o.refs}</div></div>`;
  }).join("") || "(empty)"}</div>`;
  html += `<div class="kv"><b>LRU (unreferenced, oldest first)</b> [${esc(r.lru.join(", "))}] &nbsp; <b>retained by the scheduler</b> [${esc(r.retained.join(", "))}]</div>`;
  html += "<table id='emitted'><tr><th>request</th><th>rows emitted</th><th>count</th><th>worker keys</th><th>emit cursor</th></tr>";
  r.emitted.forEach((e) => {
    const w = r.workers.find((x) => x.name === e.name);
    const p = prev ? prev.emitted.find((x) => x.name === e.name) : undefined;
    html += `<tr class="${cls(e, p, "")}${e.gap ? " bad" : ""}"><td><b>${esc(e.name)}</b></td><td>${e.first < 0 ? "none" : "[" + e.first + ", " + e.end + ")"}${e.gap ? " (gap)" : ""}</td><td>${e.count}</td>` +
      `<td>${w ? esc(w.keys.join(",")) : ""}</td><td>${w ? w.emit_cursor : ""}</td></tr>`;
  });
  $("rows").innerHTML = html + "</table>";
}

// P/D: the router's state per request, then D's own G1, requests, connector and row store.
function renderPd(pd, prev) {
  $("pd-panel").hidden = !pd;
  if (!pd) return;
  let html = `<div class="kv"><b>router merge rule</b> ${esc(pd.merge_rule)}</div>`;
  html += "<table id='router'><tr><th>request</th><th>router</th><th>P answered</th><th>D answered</th><th>merged</th><th>colocated engine answers</th></tr>";
  pd.router.forEach((r) => {
    const p = prev ? prev.router.find((x) => x.name === r.name) : undefined;
    html += `<tr class="route${cls(r, p, "")}" title="${esc(r.why || "")}"><td><b>${esc(r.name)}</b></td><td>${esc(r.state)}</td><td>${esc(r.p)}</td><td>${esc(r.d)}</td>` +
      `<td>${esc(r.merged || "-")}${r.bad && r.why ? " <b>(" + esc(r.why) + ")</b>" : ""}</td><td>${esc(r.colocated)}</td></tr>`;
  });
  html += "</table>";
  const d = pd.d, pv = prev && prev.d;
  html += `<h2>D: G1 (GPU block pool)</h2><div id="d-g1" class="grid">${blockGrid(d.g1.blocks, pv && pv.g1.blocks, "")}</div>`;
  html += `<h2>D: requests</h2><div class="queues">running [${esc(d.queues.running.join(" "))}] &nbsp; waiting [${esc(d.queues.waiting.join(" "))}]</div>`;
  html += "<table id='d-requests'><tr><th>request</th><th>status</th><th>computed / tokens</th><th>output</th><th>block table</th></tr>";
  d.requests.forEach((r) => {
    const p = pv ? pv.requests.find((x) => x.name === r.name) : undefined;
    html += `<tr class="req${cls(r, p, "")}"><td><b>${esc(r.name)}</b></td><td class="status-${esc(r.status)}">${esc(r.status)}</td><td>${r.computed} / ${r.tokens}</td><td>${r.output} / ${r.max_tokens}</td><td>${chips(r.table)}</td></tr>`;
  });
  html += "</table>";
  if (d.connector) {
    html += "<h2>D: NIXL reads (connector)</h2><table id='d-jobs'><tr><th>request</th><th>kind</th><th>D blocks</th><th>from</th><th>phase</th></tr>";
    d.connector.jobs.forEach((j) => {
      const p = pv && pv.connector ? pv.connector.jobs.find((x) => x.id === j.id) : undefined;
      html += `<tr class="${cls(j, p, "")}"><td>${esc(j.req)}</td><td>${esc(j.kind)}</td><td>${esc(j.blocks.join(","))}</td><td>${esc(j.keys.join(","))}</td><td>${esc(j.phase)}</td></tr>`;
    });
    if (!d.connector.jobs.length) html += "<tr><td colspan=5>(no read)</td></tr>";
    html += "</table>";
  }
  if (d.rows) {
    html += `<h2>D: row store</h2><div id="d-row-store" class="kv">${d.rows.store.length} of ${d.rows.store_capacity} objects: [${esc(d.rows.store.map((o) => o.key + " refs " + o.refs).join(", "))}]</div>`;
    html += `<div class="kv"><b>rows emitted by D</b> ${d.rows.emitted.map((e) => esc(e.name) + " " + (e.first < 0 ? "none" : "[" + e.first + ", " + e.end + ")") + (e.gap ? " (gap)" : "")).join("; ")}</div>`;
  }
  $("pd").innerHTML = html;
}

document.addEventListener("keydown", (e) => {
  if (!data) return;
  if (e.key === "ArrowLeft" && data.at > 0) go({ at: data.at - 1 }, false);
  if (e.key === "ArrowRight" && data.at < data.steps.length - 1) go({ at: data.at + 1 }, false);
});
window.addEventListener("popstate", load);
load();

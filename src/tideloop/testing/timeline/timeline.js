"use strict";
(function () {
  const data = JSON.parse(document.getElementById("tl-data").textContent);
  const events = data.events;
  const lanes = data.lanes;
  const LANE = 26, RULER = 34, PAD = 12;
  const laneIndex = new Map(lanes.map((lane, i) => [lane.id, i]));
  const byName = new Map(lanes.map((lane) => [lane.id, lane]));
  const svgNS = "http://www.w3.org/2000/svg";
  const $ = (id) => document.getElementById(id);
  let unit = 0;

  function text(el, value) { el.textContent = value == null ? "" : String(value); return el; }
  function fmtTime(t) {
    if (t === 0) return "0 s";
    const a = Math.abs(t);
    if (a >= 1) return t.toFixed(a >= 100 ? 1 : 3).replace(/\.?0+$/, "") + " s";
    if (a >= 1e-3) return (t * 1e3).toFixed(3).replace(/\.?0+$/, "") + " ms";
    return (t * 1e6).toFixed(1).replace(/\.?0+$/, "") + " µs";
  }
  function site(s) { return s ? s.where + (s.code ? "  " + s.code : "") : ""; }
  function describe(value, depth) {
    if (value == null) return "";
    if (typeof value !== "object") return String(value);
    if (Array.isArray(value)) return value.map((v) => describe(v, depth + 1)).join("; ");
    if ("where" in value && "line" in value) return site(value);
    if ("task" in value && "coro" in value) {
      let s = "task '" + value.task + "' (" + value.coro + ")";
      if (value.at) s += " waiting at " + site(value.at);
      if (value.in) s += " in " + value.in;
      return s;
    }
    if (depth > 2) return JSON.stringify(value);
    return Object.entries(value).map(([k, v]) => k + ": " + describe(v, depth + 1)).join(", ");
  }

  // ---- header -------------------------------------------------------------
  text($("tl-title"), data.scenario || "a schedule");
  const verdict = $("tl-verdict");
  text(verdict, data.summary);
  verdict.className = data.kind;
  for (const r of data.reasons) text($("tl-reasons").appendChild(document.createElement("li")), r);
  let failure = data.failure ? "failure: " + data.failure : "";
  if (data.failure_site) failure += "\n  at " + site(data.failure_site);
  text($("tl-failure"), failure);
  text($("tl-meta"), "found by " + (data.found_by || "?") + " · recorded on " + data.python +
    (data.virtual_time ? " · virtual time" : "") + " · " + events.length + " events, " +
    lanes.filter((l) => l.kind === "task").length + " tasks, " +
    lanes.filter((l) => l.kind === "host").length + " host(s)" +
    (data.dropped ? " · " + data.dropped + " more events not recorded" : ""));
  text($("tl-note"), data.note || "");
  const devEvents = events.filter((e) => e.kind === "deviation");
  if (!data.deviations.length) {
    text($("tl-devlist").appendChild(document.createElement("li")), "none: the unperturbed schedule");
  }
  data.deviations.forEach((d, i) => {
    const li = $("tl-devlist").appendChild(document.createElement("li"));
    li.className = "deviation-item";
    text(li, d.words);
    const ev = devEvents.find((e) => e.detail && JSON.stringify(e.detail.point) === JSON.stringify(d.point));
    if (ev) {
      li.dataset.seq = ev.seq;
      li.addEventListener("click", () => scrollToSeq(ev.seq));
      li.addEventListener("mouseenter", () => hot(ev.seq, true));
      li.addEventListener("mouseleave", () => hot(ev.seq, false));
    }
  });
  const legend = [["step", "#3b82f6"], ["timer", "#f97316"], ["I/O", "#06b6d4"], ["job", "#8b5cf6"],
    ["subprocess", "#0d9488"], ["message", "#059669"], ["fault", "#b91c1c"], ["error", "#7f1d1d"],
    ["deviation", "#d7263d"]];
  for (const [name, color] of legend) {
    const s = $("tl-legend").appendChild(document.createElement("span"));
    const i = s.appendChild(document.createElement("i"));
    i.style.background = color;
    s.appendChild(document.createTextNode(name));
  }

  // ---- lane labels ----------------------------------------------------------
  for (const lane of lanes) {
    const div = $("tl-labels").appendChild(document.createElement("div"));
    div.className = "lane-label " + lane.kind;
    div.dataset.lane = lane.id;
    const name = lane.kind === "host" ? "host " + lane.name : lane.name;
    div.appendChild(document.createTextNode(name));
    if (lane.coro) text(div.appendChild(document.createElement("span")), lane.coro).className = "coro";
    div.title = lane.kind === "task" ? "task '" + lane.name + "' (" + lane.coro + ") on " + lane.host : name;
  }

  // ---- geometry -------------------------------------------------------------
  const scroller = $("tl-scroll");
  const svg = $("tl-svg");
  const height = RULER + Math.max(1, lanes.length) * LANE;
  const x = (seq) => PAD + (seq + 0.5) * unit;
  const y = (laneId) => RULER + ((laneIndex.has(laneId) ? laneIndex.get(laneId) : 0) + 0.5) * LANE;
  function fitUnit() { return Math.max(0.5, (scroller.clientWidth - 2 * PAD) / Math.max(1, events.length)); }
  function width() { return Math.ceil(2 * PAD + events.length * unit); }

  // Iterations: [loop, it] -> first and last seq.
  const iterations = [];
  for (const e of events) {
    const last = iterations[iterations.length - 1];
    if (last && last.loop === e.loop && last.it === e.it) last.end = e.seq;
    else iterations.push({ loop: e.loop, it: e.it, start: e.seq, end: e.seq, t: e.t });
  }
  // Spans: a timer from armed to firing, a job from submission to its last
  // mark (its run in a thread, its result's arrival and delivery). Timers and
  // jobs are numbered per loop.
  const armedAt = new Map(), jobAt = new Map(), jobEnd = new Map(), spans = [];
  const key = (e, n) => e.loop + ":" + n;
  for (const e of events) {
    if (e.kind === "armed") armedAt.set(key(e, e.timer), e);
    else if (e.kind === "timer" && armedAt.has(key(e, e.timer))) spans.push(["timer", armedAt.get(key(e, e.timer)), e]);
    else if (e.kind === "job") jobAt.set(key(e, e.job), e);
    else if (e.job != null && jobAt.has(key(e, e.job))) jobEnd.set(key(e, e.job), e);
  }
  for (const [k, end] of jobEnd) spans.push(["job", jobAt.get(k), end]);
  const failures = events.filter((e) => e.kind === "failure");

  function el(name, attrs, parent) {
    const node = document.createElementNS(svgNS, name);
    for (const k in attrs) node.setAttribute(k, attrs[k]);
    (parent || svg).appendChild(node);
    return node;
  }
  function mark(e, g) {
    const cx = x(e.seq), cy = y(e.lane), r = Math.max(3, Math.min(7, unit * 0.45));
    let node;
    switch (e.kind) {
      case "step": node = el("rect", { x: cx - Math.max(1.5, unit * 0.4), y: cy - 7, width: Math.max(3, unit * 0.8), height: 14, rx: 2 }, g); break;
      case "task": node = el("path", { d: `M${cx - 5},${cy - 7} L${cx + 6},${cy} L${cx - 5},${cy + 7} Z` }, g); break;
      case "timer": case "armed": node = el("path", { d: `M${cx},${cy - r} L${cx + r},${cy} L${cx},${cy + r} L${cx - r},${cy} Z` }, g); break;
      case "deviation": node = el("path", { d: star(cx, cy, 8, 3.5) }, g); break;
      case "failure": node = el("path", { d: `M${cx - 6},${cy - 6} L${cx + 6},${cy + 6} M${cx + 6},${cy - 6} L${cx - 6},${cy + 6}`, stroke: "#d7263d", "stroke-width": 3 }, g); break;
      case "fault": case "error": node = el("path", { d: `M${cx},${cy - 7} L${cx + 7},${cy + 6} L${cx - 7},${cy + 6} Z` }, g); break;
      case "job": case "ran": case "arrived": case "delivered": node = el("rect", { x: cx - r, y: cy - r, width: 2 * r, height: 2 * r, rx: e.kind === "job" ? 0 : e.kind === "ran" ? 1.5 : r }, g); break;
      case "spawn": case "exit": node = el("rect", { x: cx - r, y: cy - r, width: 2 * r, height: 2 * r, rx: e.kind === "spawn" ? 0 : r }, g); break;
      default: node = el("circle", { cx: cx, cy: cy, r: r }, g);
    }
    node.setAttribute("class", "ev ev-" + e.kind + (e.held ? " held" : ""));
    node.dataset.seq = e.seq;
    return node;
  }
  function star(cx, cy, R, r) {
    let d = "";
    for (let i = 0; i < 10; i++) {
      const a = Math.PI / 2 + (i * Math.PI) / 5, rad = i % 2 ? r : R;
      d += (i ? "L" : "M") + (cx + rad * Math.cos(a)).toFixed(1) + "," + (cy - rad * Math.sin(a)).toFixed(1);
    }
    return d + "Z";
  }

  // ---- drawing (only what is in view, plus a margin) ---------------------------
  let pending = false;
  function draw() {
    pending = false;
    const w = width();
    svg.setAttribute("width", w);
    svg.setAttribute("height", height);
    svg.setAttribute("viewBox", `0 0 ${w} ${height}`);
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    const left = scroller.scrollLeft - scroller.clientWidth, right = scroller.scrollLeft + 2 * scroller.clientWidth;
    const lo = Math.max(0, Math.floor((left - PAD) / unit) - 1), hi = Math.min(events.length - 1, Math.ceil((right - PAD) / unit) + 1);
    const visible = (seq) => seq >= lo && seq <= hi;
    const back = el("g", { class: "back" });
    iterations.forEach((it, i) => {
      if (it.end < lo || it.start > hi) return;
      if (i % 2 === 0) el("rect", { class: "band", x: x(it.start) - unit / 2, y: RULER, width: (it.end - it.start + 1) * unit, height: height - RULER }, back);
    });
    lanes.forEach((lane, i) => {
      if (lane.kind === "host") el("rect", { class: "lane-bg host", x: 0, y: RULER + i * LANE, width: w, height: LANE }, back);
      el("line", { class: "lane-line", x1: 0, x2: w, y1: RULER + (i + 1) * LANE, y2: RULER + (i + 1) * LANE }, back);
    });
    // The loop's time along the top, where it changes.
    let lastT = null, lastX = -1e9;
    for (const it of iterations) {
      if (it.t === lastT) continue;
      lastT = it.t;
      const tx = x(it.start) - unit / 2;
      if (!visible(it.start) || tx - lastX < 70) continue;
      lastX = tx;
      el("line", { class: "tick-line", x1: tx, x2: tx, y1: RULER - 8, y2: RULER }, back);
      text(el("text", { class: "tick", x: tx + 2, y: RULER - 12 }, back), fmtTime(it.t));
    }
    const mid = el("g", { class: "mid" });
    for (const e of devEvents) {
      if (!visible(e.seq)) continue;
      el("rect", { class: "devband", "data-seq": e.seq, x: x(e.seq) - Math.max(3, unit / 2), y: RULER, width: Math.max(6, unit), height: height - RULER }, mid);
    }
    for (const [kind, a, b] of spans) {
      if (b.seq < lo || a.seq > hi || a.lane !== b.lane) continue;
      el("line", { class: "span span-" + kind, x1: x(a.seq), x2: x(b.seq), y1: y(a.lane) + 9, y2: y(b.lane) + 9 }, mid);
    }
    for (const e of events) {
      if (e.kind !== "message" || e.sent == null) continue;
      if (e.seq < lo || e.sent > hi) continue;
      const x1 = x(e.sent), y1 = y(e.from), x2 = x(e.seq), y2 = y(e.to);
      const cls = "arrow " + (e.detail && e.detail.event || "");
      const line = el("line", { class: cls, x1: x1, y1: y1, x2: x2, y2: y2 }, mid);
      line.setAttribute("marker-end", "url(#tl-arrowhead)");
      line.dataset.seq = e.seq;
    }
    const front = el("g", { class: "front" });
    for (let s = lo; s <= hi; s++) if (events[s]) mark(events[s], front);
    for (const f of failures) {
      el("line", { class: "failline", x1: x(f.seq), x2: x(f.seq), y1: RULER - 4, y2: height }, front);
      text(el("text", { class: "faillabel", x: x(f.seq) + 4, y: 11 }, front), (f.first ? "✗ " : "") + f.text);
    }
    const defs = el("defs", {});
    const marker = el("marker", { id: "tl-arrowhead", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" }, defs);
    el("path", { d: "M0,0 L10,5 L0,10 z", fill: "#059669" }, marker);
    text($("tl-zoom-level"), unit >= 1 ? unit.toFixed(1) + " px / event" : (1 / unit).toFixed(1) + " events / px");
  }
  function redraw() { if (!pending) { pending = true; requestAnimationFrame(draw); } }

  function zoom(factor, anchorX) {
    const rect = scroller.getBoundingClientRect();
    const ax = anchorX == null ? scroller.clientWidth / 2 : anchorX - rect.left;
    const seq = (scroller.scrollLeft + ax - PAD) / unit;
    unit = Math.min(200, Math.max(0.05, unit * factor));
    draw();
    scroller.scrollLeft = Math.max(0, PAD + seq * unit - ax);
    draw();
  }
  function scrollToSeq(seq) {
    if (unit < 6) unit = Math.min(24, Math.max(6, unit * 4));
    draw();
    scroller.scrollLeft = Math.max(0, x(seq) - scroller.clientWidth / 2);
    draw();
    hot(seq, true);
    setTimeout(() => hot(seq, false), 1200);
  }
  function hot(seq, on) {
    for (const band of svg.querySelectorAll(`.devband[data-seq="${seq}"]`)) band.classList.toggle("hot", on);
  }
  $("tl-zoom-in").addEventListener("click", () => zoom(2));
  $("tl-zoom-out").addEventListener("click", () => zoom(0.5));
  $("tl-fit").addEventListener("click", () => { unit = fitUnit(); scroller.scrollLeft = 0; draw(); });
  scroller.addEventListener("wheel", (ev) => {
    if (!ev.ctrlKey) return;
    ev.preventDefault();
    zoom(ev.deltaY < 0 ? 1.25 : 0.8, ev.clientX);
  }, { passive: false });
  scroller.addEventListener("scroll", redraw);
  window.addEventListener("resize", redraw);

  // ---- details on hover ------------------------------------------------------------
  const tip = $("tl-tip");
  function details(e) {
    const lane = byName.get(e.lane);
    const lines = [];
    lines.push("<b>" + esc(e.kind) + "</b>  t = " + esc(fmtTime(e.t)) + ", iteration " + esc(e.it) + (e.loop ? " of loop " + esc(e.loop) : ""));
    if (lane) lines.push(esc(lane.kind === "task" ? "task '" + lane.name + "' (" + lane.coro + ") on " + lane.host : lane.name));
    lines.push(esc(e.text));
    if (e.kind === "message" && e.sent != null) lines.push(esc("sent at event #" + e.sent + ", arrived at #" + e.seq));
    if (e.detail) {
      const d = e.detail.about || e.detail;
      for (const [k, v] of Object.entries(d)) {
        if (k === "kind" || v == null || v === "") continue;
        lines.push(esc(k + ": " + describe(v, 0)));
      }
    }
    return lines.join("\n");
  }
  function esc(s) { return String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]); }
  svg.addEventListener("mouseover", (ev) => {
    const target = ev.target.closest("[data-seq]");
    if (!target || !target.classList.contains("ev") && !target.classList.contains("arrow") && !target.classList.contains("devband")) return;
    const e = events[Number(target.dataset.seq)];
    if (!e) return;
    tip.innerHTML = details(e);
    tip.hidden = false;
    place(ev);
  });
  svg.addEventListener("mousemove", (ev) => { if (!tip.hidden) place(ev); });
  svg.addEventListener("mouseout", (ev) => {
    const to = ev.relatedTarget;
    if (!to || !to.closest || !to.closest("[data-seq]")) tip.hidden = true;
  });
  function place(ev) {
    const w = tip.offsetWidth, h = tip.offsetHeight;
    tip.style.left = Math.min(window.innerWidth - w - 8, ev.clientX + 14) + "px";
    tip.style.top = Math.min(window.innerHeight - h - 8, ev.clientY + 14) + "px";
  }

  unit = fitUnit();
  if (events.length && unit < 4) unit = Math.min(8, Math.max(4, unit));
  draw();
  const firstFailure = failures.find((f) => f.first) || failures[0];
  if (firstFailure && x(firstFailure.seq) > scroller.clientWidth) scroller.scrollLeft = x(firstFailure.seq) - scroller.clientWidth * 0.7;
  draw();
  document.body.dataset.ready = "1";
})();

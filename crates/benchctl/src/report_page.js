"use strict";
const I = BENCH_INDEX, PER_PAGE = 50, chunks = {}, waiting = {};
let view = [], page = 0;
function BENCH_CHUNK(n, items) { chunks[n] = items; (waiting[n] || []).forEach(f => f()); delete waiting[n]; }
function chunk(n, done) {
  if (chunks[n]) return done();
  if (!waiting[n]) {
    waiting[n] = [];
    const s = document.createElement("script");
    s.src = "data/chunk-" + String(n).padStart(4, "0") + ".js";
    document.head.appendChild(s);
  }
  waiting[n].push(done);
}
const el = (tag, attrs, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const k of kids) e.append(k);
  return e;
};
const passed = (bits, m) => (bits >> m) & 1;
// The run's headline metrics with their intervals, then what the page's words mean.
function headline() {
  const H = I.headline, table = document.getElementById("metrics");
  const head = ["metric", I.run.label, "95 % interval", "design effect"];
  if (I.against) head.push(I.against.label);
  table.append(el("tr", {}, ...head.map(h => el("th", {}, h))));
  for (const r of H.rows) {
    const cells = [r.metric, String(r.value), r.low === null ? "–" : "[" + r.low + ", " + r.high + "]",
      r.design_effect === null ? "–" : String(r.design_effect)];
    if (I.against) cells.push(r.against === null ? "–" : String(r.against));
    table.append(el("tr", {"data-metric": r.metric}, ...cells.map(c => el("td", {}, c))));
  }
  document.getElementById("legend").textContent =
    "Margin: for one item, the smallest gap by which a matching candidate's score beats a non-matching one's, " +
    "over each image's texts and each text's images; negative where the item fails a comparison, – where it has none. " +
    (H.has_intervals ? "Intervals: bootstrap 95 %, 1,000 resamples of " + H.resampled +
      "; the design effect is how many times clusters inflate a metric's variance over independent items." : "");
}
function setup() {
  document.getElementById("title").textContent = I.run.label + " on " + I.run.suite;
  let s = I.ids.length + " items; " + I.metrics.map((m, i) => I.binary[i] ? m : null).filter(Boolean).join(", ") +
    "; a failed item fails " + I.metrics[I.outcome] + "; run of " + I.run.started_at + " (" + I.run.dtype + ", scores: " + I.run.score_kind + ")";
  if (I.against) s += "; against " + I.against.label + " (" + I.against.started_at + ")";
  document.getElementById("summary").textContent = s;
  headline();
  const tag = document.getElementById("tag");
  I.tags.forEach(([k, v], i) => tag.append(el("option", {value: i}, k + ": " + v)));
  if (!I.against) for (const v of ["disagree", "worse"]) document.querySelector('#outcome option[value="' + v + '"]').remove();
  // The view is kept in the address (#outcome=fail&sort=asc&tag=3&page=2): links and
  // reloads show the same items.
  const hash = new URLSearchParams(location.hash.slice(1));
  for (const id of ["tag", "outcome", "sort"]) {
    const select = document.getElementById(id);
    if (hash.has(id) && [...select.options].some(o => o.value === hash.get(id))) select.value = hash.get(id);
    select.addEventListener("change", () => { page = 0; refilter(); });
  }
  page = Math.max(0, (parseInt(hash.get("page"), 10) || 1) - 1);
  refilter();
}
function remember() {
  const h = new URLSearchParams();
  for (const id of ["tag", "outcome", "sort"]) { const v = document.getElementById(id).value; if (v !== "" && v !== "all" && v !== "item") h.set(id, v); }
  if (page) h.set("page", page + 1);
  history.replaceState(null, "", "#" + h.toString());
}
function refilter() {
  const tag = document.getElementById("tag").value, outcome = document.getElementById("outcome").value;
  const sort = document.getElementById("sort").value, m = I.outcome;
  view = [];
  for (let i = 0; i < I.ids.length; i++) {
    if (tag !== "" && !I.itemTags[i].includes(+tag)) continue;
    const here = passed(I.bits[i], m), there = I.againstBits ? passed(I.againstBits[i], m) : null;
    if (outcome === "fail" && here) continue;
    if (outcome === "pass" && !here) continue;
    if (outcome === "disagree" && here === there) continue;
    if (outcome === "worse" && !(here === 0 && there === 1)) continue;
    view.push(i);
  }
  const key = i => I.margin[i] === null ? Infinity : I.margin[i];
  if (sort === "asc") view.sort((a, b) => key(a) - key(b) || a - b);
  if (sort === "desc") view.sort((a, b) => (key(b) === Infinity ? -Infinity : key(b)) - (key(a) === Infinity ? -Infinity : key(a)) || a - b);
  document.getElementById("count").textContent = view.length + " shown";
  render();
}
function heat(scores, truth, texts, caption, rows = "image ") {
  const flat = scores.flat().filter(v => v !== null), lo = Math.min(...flat), hi = Math.max(...flat);
  const t = el("table", {class: "heat"}, el("caption", {}, caption));
  const head = el("tr", {}, el("th", {}, ""));
  texts.forEach((_, l) => head.append(el("th", {}, "text " + l)));
  t.append(head);
  scores.forEach((row, k) => {
    const tr = el("tr", {}, el("th", {}, rows + k));
    row.forEach((v, l) => {
      // A cell the item does not ask has no score.
      if (v === null) return tr.append(el("td", {class: "unasked"}, "–"));
      const x = hi > lo ? (v - lo) / (hi - lo) : 0.5;
      const td = el("td", {style: "background: hsl(210, 70%, " + (95 - 45 * x).toFixed(0) + "%)"}, String(v));
      if (truth[k * texts.length + l] === "1") td.className = "match";
      tr.append(td);
    });
    t.append(tr);
  });
  return t;
}
// The reply each cell's score was read from (a question's options share one reply).
function replyTable(replies, truth, texts, caption) {
  const t = el("table", {class: "heat replies"}, el("caption", {}, caption));
  const head = el("tr", {}, el("th", {}, ""));
  texts.forEach((_, l) => head.append(el("th", {}, "text " + l)));
  t.append(head);
  replies.forEach((row, k) => {
    const tr = el("tr", {}, el("th", {}, "image " + k));
    row.forEach((reply, l) => {
      if (reply === null) return tr.append(el("td", {class: "unasked"}, "–"));
      const td = el("td", {}, reply);
      if (truth[k * texts.length + l] === "1") td.className = "match";
      tr.append(td);
    });
    t.append(tr);
  });
  return t;
}
function card(i, item) {
  const m = I.outcome, ok = passed(I.bits[i], m);
  const left = el("div", {}, el("div", {class: "id"}, I.ids[i]),
    el("div", {class: "tags"}, I.itemTags[i].map(t => I.tags[t].join(": ")).join(", ")),
    el("div", {}, "margin " + (I.margin[i] === null ? "–" : I.margin[i])));
  const badges = el("div", {});
  I.metrics.forEach((name, j) => {
    const v = item.values[j];
    if (v === null) return;
    if (I.binary[j]) badges.append(el("span", {class: "badge " + (v === 1 ? "ok" : "no")}, name));
    else badges.append(el("span", {class: "badge val"}, name + " " + v));
  });
  if (I.againstBits) badges.append(el("span", {class: "badge val"}, "other run: " + (passed(I.againstBits[i], m) ? "passed" : "failed")));
  left.append(badges);
  const images = el("div", {class: "images"});
  item.images.forEach(([name, thumb], k) => {
    const fig = el("span", {});
    if (thumb) fig.append(el("img", {src: thumb, alt: "image " + k, loading: "lazy"}));
    fig.append(el("span", {class: "name"}, "image " + k + ": " + name));
    images.append(fig);
  });
  const texts = el("ol", {start: 0});
  item.texts.forEach(t => texts.append(el("li", {}, t)));
  const right = el("div", {}, images, texts, heat(item.scores, item.truth, item.texts, I.run.label));
  if (item.against) right.append(heat(item.against, item.truth, item.texts, I.against.label));
  if (item.text_scores) right.append(heat(item.text_scores, "", item.texts, "text–text, " + I.run.label, "text "));
  if (item.replies) right.append(replyTable(item.replies, item.truth, item.texts, "generated replies, " + I.run.label));
  if (item.against_replies) right.append(replyTable(item.against_replies, item.truth, item.texts, "generated replies, " + I.against.label));
  return el("div", {class: "item " + (ok ? "pass" : "fail"), "data-item": I.ids[i]}, left, right);
}
function render() {
  const pages = Math.max(1, Math.ceil(view.length / PER_PAGE));
  page = Math.min(page, pages - 1);
  remember();
  const shown = view.slice(page * PER_PAGE, (page + 1) * PER_PAGE);
  const pager = document.getElementById("pager");
  pager.replaceChildren(" page " + (page + 1) + " / " + pages + " ");
  const go = (label, p) => { const b = el("button", {}, label); b.disabled = p < 0 || p >= pages || p === page; b.onclick = () => { page = p; render(); }; pager.append(b); };
  go("‹ prev", page - 1); go("next ›", page + 1);
  const needed = [...new Set(shown.map(i => Math.floor(i / I.chunk)))];
  let left = needed.length;
  const list = document.getElementById("items");
  const draw = () => {
    list.replaceChildren(...shown.map(i => card(i, chunks[Math.floor(i / I.chunk)][i % I.chunk])));
    document.body.dataset.ready = "1";
    document.body.dataset.readyMs = Math.round(performance.now());
  };
  document.body.dataset.ready = "0";
  if (!left) return draw();
  needed.forEach(n => chunk(n, () => { if (--left === 0) draw(); }));
}
setup();

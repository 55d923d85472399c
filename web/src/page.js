// The page's script, served as /page.js: no inline script, so the page's
// Content-Security-Policy allows scripts from echomq-web itself only.
"use strict";
// Polls the API once a second (the next poll starts when the last one ended,
// so a slow server is never asked twice at once) and updates the cards in place:
// each queue keeps its DOM nodes, so hundreds of queues cost one text and one
// path update each per second.
const POLL_MS = 1000;
const FIELDS = ["scheduled", "due", "pending", "in_flight", "dead"];
const $ = (id) => document.getElementById(id);
const cards = new Map();
let prev = null;          // the last good reply, for rates
let failingSince = null;
const fmt = new Intl.NumberFormat();
const fmtRate = new Intl.NumberFormat(undefined, { maximumFractionDigits: 2 });

function rate(field, cur) {
  if (!prev || !(field in cur.info) || !(field in prev.info)) return null;
  const dt = (cur.now_ms - prev.now_ms) / 1000;
  if (dt <= 0) return null;
  return Math.max(0, (cur.info[field] - prev.info[field]) / dt);
}
function showRate(id, field, cur) {
  const r = rate(field, cur);
  const el = $(id);
  el.textContent = r === null ? (field in cur.info ? "…" : "n/a") : r.toFixed(1);
  el.title = field in cur.info ? `${field}: ${fmt.format(cur.info[field])} since the module loaded` : `the server has no ${field}`;
}

function seconds(ms) { return ms % 1000 === 0 ? `${ms / 1000} s` : `${ms} ms`; }

function card(name) {
  let c = cards.get(name);
  if (c) return c;
  const el = document.createElement("section");
  el.className = "queue";
  el.dataset.queue = name;
  el.innerHTML = `<h2></h2><div class="counts">
      <div data-field="scheduled"><b>0</b><small>scheduled</small></div>
      <div class="due" data-field="due"><b>0</b><small>due</small></div>
      <div data-field="pending"><b>0</b><small>pending</small></div>
      <div data-field="in_flight" title="Delivered to a consumer of the stream, not yet acknowledged (0 for a list)"><b>0</b><small>in flight</small></div>
      <div class="dead" data-field="dead"><b>0</b><small>dead</small></div></div>
    <div class="release" hidden></div>
    <div class="groups" hidden></div>
    <div class="repeats" hidden></div>
    <details class="shards" hidden><summary></summary><table>
      <thead><tr><th>shard</th><th>scheduled</th><th>due</th><th>pending</th><th>in flight</th><th>dead</th></tr></thead>
      <tbody></tbody></table></details>
    <svg class="spread" preserveAspectRatio="none" role="img"><path d=""></path></svg>
    <div class="axis"><span>now</span><span class="peak"></span><span class="end"></span></div>
    <div class="hint"></div><div class="err"></div>`;
  el.querySelector("h2").textContent = name;
  el.querySelector("h2").title = name;
  c = { el, name, data: null,
        nums: Object.fromEntries(FIELDS.map(
          f => [f, el.querySelector(`[data-field="${f}"] b`)])),
        svg: el.querySelector("svg"), path: el.querySelector("path"),
        peak: el.querySelector(".peak"), end: el.querySelector(".end"),
        hint: el.querySelector(".hint"), err: el.querySelector(".err"),
        release: el.querySelector(".release"), groups: el.querySelector(".groups"),
        repeats: el.querySelector(".repeats"), shards: el.querySelector("details.shards") };
  c.svg.addEventListener("mousemove", (ev) => hover(c, ev));
  c.svg.addEventListener("mouseleave", () => { c.hint.textContent = ""; });
  cards.set(name, c);
  return c;
}

let windowInfo = null;
function hover(c, ev) {
  if (!c.data || !c.data.spread || !windowInfo) return;
  const n = c.data.spread.length, box = c.svg.getBoundingClientRect();
  const i = Math.min(n - 1, Math.max(0, Math.floor((ev.clientX - box.left) / box.width * n)));
  const w = windowInfo.ms, from = Math.floor(i * w / n), to = Math.floor((i + 1) * w / n);
  c.hint.textContent = `+${seconds(from)} … +${seconds(to)}: ${fmt.format(c.data.spread[i])} job(s)`;
}

// One path per queue, one bar per non-empty bucket, scaled to the queue's own
// peak (or, with "one scale", to the tallest bucket shown): a herd is one tall
// bar, a jittered cohort a flat field.
let scalePeak = 0;
function draw(c, spread) {
  const n = spread.length, own = Math.max(0, ...spread);
  const peak = $("shared").checked ? Math.max(own, scalePeak) : own;
  c.svg.setAttribute("viewBox", `0 0 ${n} 100`);
  c.svg.dataset.spread = spread.join(",");
  let d = "";
  if (peak > 0) spread.forEach((v, i) => {
    if (v > 0) { const h = Math.max(2, v / peak * 100); d += `M${i} 100V${(100 - h).toFixed(2)}h0.86V100z`; }
  });
  c.path.setAttribute("d", d);
  c.peak.textContent = own > 0 ? `peak ${fmt.format(own)}/bucket` : "nothing scheduled in window";
}

// One named part of a card's release line.
function part(name, text, title) {
  const s = document.createElement("span");
  s.dataset.release = name;
  s.textContent = text;
  if (title) s.title = title;
  return s;
}
// A rate per second as people read it: per minute or per hour when below 1/s.
function perTime(perSecond) {
  if (perSecond >= 1) return `${fmtRate.format(perSecond)}/s`;
  if (perSecond * 60 >= 1) return `${fmtRate.format(perSecond * 60)}/min`;
  return `${fmtRate.format(perSecond * 3600)}/h`;
}
// The release limit and hold of a queue's schedule, one line of parts:
// the rate (and for an adaptive limit the rate in force), the burst, the
// hold and the due members held back. Hidden when the module has no
// ECHO.LIMITS (q.release null).
function showRelease(c, r) {
  const el = c.release;
  el.hidden = !r;
  el.classList.toggle("err", !!(r && r.error));
  el.dataset.heldUntil = r && !r.error ? r.held_until_ms : "";
  if (!r) { el.replaceChildren(); return; }
  if (r.error) { el.replaceChildren(part("error", `release limit: ${r.error}`)); return; }
  const parts = [];
  if (r.limited) {
    const ceiling = perTime(r.rate_per_second);
    parts.push(r.adaptive
      ? part("rate", `adaptive ${perTime(r.rate_in_force_per_second)} of ${ceiling}`,
             "the rate in force, halved when failures exceed echomq.adaptive-failure-percent, back up to the ceiling")
      : part("rate", `limit ${ceiling}`, "echomq.release-limits"));
    parts.push(part("burst", `burst ${fmt.format(r.burst)}`, `${fmt.format(r.available)} may leave now`));
  } else {
    parts.push(part("rate", "no release limit"));
  }
  if (r.held_until_ms > 0) {
    const until = new Date(r.held_until_ms).toISOString().replace("T", " ").slice(0, 23);
    parts.push(part("hold", `held for ${fmt.format(r.held_for_ms)} ms`, `ECHO.HOLD: nothing leaves before ${until} UTC (server time)`));
  }
  if (r.held_back > 0) {
    parts.push(part("held_back", `${fmt.format(r.held_back)} due held back`, "due members the limit or hold keeps in the schedule now"));
  }
  el.replaceChildren(...parts.flatMap((p, i) => i ? [" · ", p] : [p]));
}

// One group of a list: its name (the full name in the title) and a number.
function groupItem(g, text, title) {
  const li = document.createElement("li");
  li.dataset.group = g.group;
  const name = document.createElement("span");
  name.className = "name";
  name.textContent = g.group;
  name.title = g.group;
  li.append(name, ` ${text}`);
  if (title) li.title = title;
  return li;
}
// What holds a limited group back: no room in its limit, its own hold.
function groupHold(g) {
  const why = [];
  if (g.held_for_ms > 0) why.push(`held ${fmt.format(g.held_for_ms)} ms`);
  if (g.available === 0 && g.due > 0) why.push(`limit ${perTime(g.limit_rate_per_second)} burst ${fmt.format(g.limit_burst)}, none available`);
  return why.join(", ");
}
// A queue's groups (ECHO.GROUPS): how many, the ten largest backlogs and
// the groups held back now, at most ten listed. Hidden when the server
// shows no groups for the queue (q.groups null, or none with members).
function showGroups(c, g) {
  const el = c.groups;
  el.hidden = !g || (!g.error && g.count === 0);
  el.classList.toggle("err", !!(g && g.error));
  if (el.hidden) { el.replaceChildren(); return; }
  if (g.error) { el.replaceChildren(part("error", `groups: ${g.error}`)); return; }
  const summary = document.createElement("div");
  summary.dataset.groups = "summary";
  const of = g.truncated ? ` (of the first ${fmt.format(g.count)} groups by name: echomq-web reads at most that many)` : "";
  summary.textContent = `${fmt.format(g.count)}${g.truncated ? "+" : ""} groups · ${fmt.format(g.limited_count)} held back${of}`;
  const largest = document.createElement("ol");
  largest.dataset.groups = "largest";
  largest.title = "the largest backlogs";
  largest.replaceChildren(...g.largest.map(x => groupItem(x, `${fmt.format(x.members)} (${fmt.format(x.due)} due)`)));
  const parts = [summary, largest];
  if (g.limited.length) {
    const limited = document.createElement("ol");
    limited.dataset.groups = "limited";
    limited.title = "held back now by their group limit or their own hold";
    limited.replaceChildren(...g.limited.map(x => groupItem(x, `${fmt.format(x.due)} due: ${groupHold(x)}`)));
    parts.push(limited);
  }
  el.replaceChildren(...parts);
}

// How long until a fire time, as people read it.
function fireIn(ms) {
  if (ms === null) return "not armed";
  if (ms <= 0) return "due now";
  const s = Math.ceil(ms / 1000);
  if (s < 60) return `in ${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `in ${m} min`;
  const h = Math.floor(m / 60);
  if (h < 48) return `in ${h} h ${m % 60} min`;
  return `in ${fmt.format(Math.floor(h / 24))} d`;
}
const utc = (ms) => new Date(ms).toISOString().replace("T", " ").slice(0, 19) + " UTC";
// A queue's recurring definitions (ECHO.REPEATS): how many, and the ten to
// fire first (those with no armed occurrence before them), each with its
// spec and when it fires; the details in its title. Hidden when the server
// shows none for the queue (q.repeats null, or no definition).
function showRepeats(c, r) {
  const el = c.repeats;
  el.hidden = !r || (!r.error && r.count === 0);
  el.classList.toggle("err", !!(r && r.error));
  if (el.hidden) { el.replaceChildren(); return; }
  if (r.error) { el.replaceChildren(part("error", `recurring: ${r.error}`)); return; }
  const summary = document.createElement("div");
  summary.dataset.repeats = "summary";
  const listed = r.count > r.next.length ? ` (the ${r.next.length} to fire first listed)` : "";
  summary.textContent = `${fmt.format(r.count)} recurring${r.unarmed ? ` · ${fmt.format(r.unarmed)} not armed` : ""}${listed}`;
  const list = document.createElement("ol");
  list.dataset.repeats = "next";
  list.replaceChildren(...r.next.map(x => {
    const li = document.createElement("li");
    li.dataset.repeat = x.id;
    li.classList.toggle("unarmed", x.fire_at_ms === null);
    const name = document.createElement("span");
    name.className = "name";
    name.textContent = x.id;
    const spec = document.createElement("code");
    spec.textContent = x.spec + (x.tz !== "UTC" ? ` ${x.tz}` : "");
    li.append(name, " ", spec, ` ${fireIn(x.fire_in_ms)}`);
    const details = [`${x.spec} in ${x.tz}`];
    if (x.jitter_ms > 0) details.push(`jitter 0..=${seconds(x.jitter_ms)}`);
    details.push(`next occurrence ${x.id}@${x.next_ms} (nominal ${utc(x.next_ms)})`);
    details.push(x.fire_at_ms === null
      ? "its member is gone from the schedule: nothing fires until an ECHO.REPEAT of the definition arms it again"
      : `fires at ${utc(x.fire_at_ms)} (server time)`);
    if (x.from_ms !== null) details.push(`from ${utc(x.from_ms)}`);
    if (x.until_ms !== null) details.push(`until ${utc(x.until_ms)}`);
    if (x.payload_key !== null) details.push(`payload in ${x.payload_key}`);
    li.title = details.join("\n");
    return li;
  }));
  el.replaceChildren(summary, list);
}

// A sharded queue's shard count, and in a details element (closed until
// opened, and kept open across polls: only its rows are replaced) each
// shard's tag and counts. Hidden for a single queue (no q.shards).
function showShards(c, q) {
  const el = c.shards;
  el.hidden = !q.shards;
  if (!q.shards) { el.querySelector("tbody").replaceChildren(); return; }
  el.dataset.shards = q.shards;
  el.querySelector("summary").textContent = `${fmt.format(q.shards)} shards`;
  el.querySelector("summary").title = "one queue over sub-queues, each its own hash tag (echomq-web --sharded): the counts above are their sum";
  const rows = (q.per_shard || []).map(s => {
    const tr = document.createElement("tr");
    tr.dataset.shard = s.tag;
    const tag = document.createElement("td");
    tag.className = "name";
    tag.textContent = s.tag;
    tag.title = s.node ? `${s.tag} on ${s.node}` : s.tag;
    tr.append(tag);
    if (s.error) {
      const e = document.createElement("td");
      e.colSpan = FIELDS.length;
      e.className = "err";
      e.textContent = s.error;
      tr.append(e);
    } else {
      for (const f of FIELDS) {
        const td = document.createElement("td");
        td.dataset.field = f;
        td.textContent = fmt.format(s[f]);
        tr.append(td);
      }
    }
    return tr;
  });
  el.querySelector("tbody").replaceChildren(...rows);
}

function update(c, q) {
  c.data = q;
  showShards(c, q);
  if (q.error) { c.err.textContent = q.error; showRelease(c, null); showGroups(c, null); showRepeats(c, null); return; }
  c.err.textContent = "";
  showRelease(c, q.release);
  showGroups(c, q.groups);
  showRepeats(c, q.repeats);
  for (const f of FIELDS) c.nums[f].textContent = fmt.format(q[f]);
  c.end.textContent = windowInfo ? `+${seconds(windowInfo.ms)}` : "";
  draw(c, q.spread);
}

function layout() {
  const filter = $("filter").value.trim().toLowerCase();
  const key = $("sort").value, hideIdle = $("busy").checked;
  const list = [...cards.values()];
  list.sort((a, b) => key === "name" || !a.data || !b.data
    ? a.name.localeCompare(b.name)
    : (b.data[key] || 0) - (a.data[key] || 0) || a.name.localeCompare(b.name));
  const box = $("queues");
  let shown = 0;
  list.forEach((c, i) => {
    const idle = c.data && !c.data.error && !c.data.scheduled && !c.data.pending && !c.data.in_flight && !c.data.dead;
    const visible = (!filter || c.name.toLowerCase().includes(filter)) && !(hideIdle && idle);
    c.el.hidden = !visible;
    if (visible) shown++;
    if (box.children[i] !== c.el) box.insertBefore(c.el, box.children[i] || null);
  });
  $("shown").textContent = shown < list.length ? `${shown} of ${list.length} shown` : "";
}

// The eviction guard: while the server may evict any key under memory
// pressure, queues can vanish without a word, so the page says so above all.
function showEviction(body) {
  const el = $("eviction");
  const unsafe = body.eviction_policy_safe === false;
  el.hidden = !unsafe;
  el.textContent = unsafe
    ? `Warning: this server's maxmemory-policy is ${body.maxmemory_policy || "an allkeys-* policy"}: ` +
      `under memory pressure it may evict queue keys (schedules, pending jobs, dead sets) and lose jobs ` +
      `without an error. Set maxmemory-policy noeviction (CONFIG SET maxmemory-policy noeviction, and in the config file).`
    : "";
}

function render(body) {
  showEviction(body);
  windowInfo = body.window;
  $("window").textContent = `spread of the next ${seconds(body.window.ms)} in ${body.window.buckets} buckets`;
  const names = new Set(body.queues.map(q => q.name));
  for (const [name, c] of cards) if (!names.has(name)) { c.el.remove(); cards.delete(name); }
  scalePeak = Math.max(0, ...body.queues.map(q => q.spread ? Math.max(0, ...q.spread) : 0));
  for (const q of body.queues) update(card(q.name), q);
  $("total-queues").textContent = fmt.format(body.queues.length);
  showRate("rate-promoted", "echomq_promoted", body);
  showRate("rate-auto", "echomq_auto_promoted", body);
  showRate("rate-retries", "echomq_retries", body);
  showRate("rate-dead", "echomq_dead_lettered", body);
  layout();
  prev = body;
}

function setStatus(state, text) {
  const s = $("status");
  s.dataset.state = state;
  s.textContent = text;
  $("main").classList.toggle("stale", state === "error");
}

async function poll() {
  try {
    const r = await fetch("api/queues?shards=1", { cache: "no-store", signal: AbortSignal.timeout(5000) });
    const body = await r.json().catch(() => null);
    if (!r.ok || !body || body.error) throw new Error(body && body.error ? body.error : `HTTP ${r.status}`);
    render(body);
    failingSince = null;
    setStatus("live", `Live: server time ${new Date(body.now_ms).toISOString().replace("T", " ").slice(0, 19)} UTC`);
  } catch (e) {
    failingSince = failingSince || new Date();
    prev = null;  // a rate across an outage would be meaningless
    const msg = e && e.name === "TimeoutError" ? "echomq-web did not answer" : String(e && e.message || e);
    setStatus("error", `Cannot read the server: ${msg}. Retrying every second since ${failingSince.toLocaleTimeString()}; the numbers below are from before.`);
  } finally {
    setTimeout(poll, POLL_MS);
  }
}
$("filter").addEventListener("input", layout);
$("sort").addEventListener("change", layout);
$("busy").addEventListener("change", layout);
$("shared").addEventListener("change", () => { for (const c of cards.values()) if (c.data && c.data.spread) draw(c, c.data.spread); });
poll();

import { EventEmitter } from "node:events";
import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import { Script, checkJobGroup, isCluster, makeStream, onSlot, timeMs, unwrapPayload } from "./keys.js";
import { DEFAULTS as PROTOCOL_DEFAULTS, GROUP, MAX_ERROR_BYTES, MAX_HOLD_MS, PROMOTE_LIMIT, SCRIPTS, SUCCESS_BATCH } from "./protocol.js";

// What a handler throws when the dependency answered 429 or 503 with a Retry-After: the job
// is failed as usual and the queue's schedule is held for `ms` (no worker gets more of its jobs
// meanwhile). With `{ group }` (new RetryAfter(ms, { group: job.group })) only that group is held,
// the others go on; a group of null or undefined (job.group of a job added without one) holds the
// whole queue, as without it: the ungrouped jobs have no name a hold could take. The second
// argument may also be the message, as before groups.
export class RetryAfter extends Error {
  constructor(ms, options) {
    if (!Number.isFinite(ms) || ms < 0) throw new RangeError("RetryAfter needs a number of ms >= 0");
    const { message, group } = typeof options === "string" || options === undefined || options === null
      ? { message: options ?? undefined }
      : options;
    const name = checkJobGroup(group);
    super(message ?? `retry after ${ms} ms`);
    this.name = "RetryAfter";
    this.ms = ms;
    this.group = name;
  }
}

// A failure whose hold is of the whole queue: the worker reads nothing until it is written.
const holdsQueue = (f) => f.holdMs > 0 && f.holdGroup === null;

const DEFAULTS = { concurrency: 10, ...PROTOCOL_DEFAULTS };

// A read blocks this long when the worker promotes the queue itself, so a due job waits
// at most about that; when the server promotes it, the read only needs to come back now
// and then (to see a changed configuration).
const BLOCK_SELF_PROMOTING_MS = 100;
const BLOCK_SERVER_PROMOTING_MS = 1000;
const QUEUES_CHECK_MS = 10000;
const ERROR_PAUSE_MS = 1000;
const HOLD_RECHECK_MS = 1000;

const RESEND_FIRST_MS = 50;
const RESEND_MAX_MS = 1000;

const ignore = () => {};

// Step 3: successes, at most SUCCESS_BATCH (entry, id) pairs a call; steps 4-5: one failure;
// step 8: an entry taken but never started, put back as a new entry (protocol/*.lua says why
// each is written as it is).
const SUCCESS = new Script(SCRIPTS.succeed, 4);
const FAIL = new Script(SCRIPTS.fail, 6);
const HAND_BACK = new Script(SCRIPTS.handBack, 1);

// A refusal that says where the connection leads, not what was sent: the server is a replica
// now (READONLY for a write, UNBLOCKED for a read blocked when it turned), a replica cut from
// its primary (MASTERDOWN), or loading its data (LOADING). Behind a primary endpoint (a DNS
// name that moves at a failover) a connection opened before keeps reaching the old primary:
// the worker reconnects it (#reconnect), so the next command goes through the endpoint again,
// and sends the command again. A refused write wrote nothing (the server refuses it before it
// runs: a script at its first write, which comes after its checks, a transaction with
// EXECABORT), and every write of the protocol is safe to resend.
const STALE = /^(READONLY|UNBLOCKED|MASTERDOWN|LOADING)\b/;
const RECONNECT_EVERY_MS = 1000;
// What a Valkey Cluster answers while a slot moves or the cluster heals, not a refusal of the
// command: the slot is elsewhere (MOVED) or half moved (ASK, TRYAGAIN for keys on both sides),
// or the cluster has lost its majority or a slot's owner (CLUSTERDOWN). iovalkey's Cluster
// follows and retries these itself (maxRedirections, retryDelayOnTryAgain,
// retryDelayOnClusterDown); one reaches the worker only when those options turn that off, or
// from inside a pipeline whose replies differ, and it wrote nothing: sent again, it goes to the
// slot's owner. (Redirected too often, a command fails with a plain Error, "Too many Cluster
// redirections", which is not an answer either.)
const MOVING = /^(MOVED|ASK|TRYAGAIN|CLUSTERDOWN)\b/;

function refusedFor(e, pattern) {
  if (!e || e.name !== "ReplyError") return false;
  if (pattern.test(String(e.message))) return true;
  // A transaction refused at EXEC for a command refused while queued.
  return Array.isArray(e.previousErrors) && e.previousErrors.some((p) => pattern.test(String(p && p.message)));
}

function stale(e) {
  return refusedFor(e, STALE);
}

// The server answered (and refused): sending again would not help, unless the refusal was
// where the connection leads (stale) or the cluster's moving slots. Anything else (a lost
// connection, a command rejected before it was sent) may go well the next time.
function answered(e) {
  return Boolean(e) && e.name === "ReplyError" && !stale(e) && !refusedFor(e, MOVING);
}

// A failed wait for a transient failure: sent again after PAUSE_FIRST_MS, doubling up to
// PAUSE_MAX_MS.
const PAUSE_FIRST_MS = 50;
const PAUSE_MAX_MS = 1000;

function positiveInteger(options, name, min) {
  const v = options[name];
  if (!Number.isInteger(v) || v < min) throw new RangeError(`${name} is an integer >= ${min}, not ${v}`);
  return v;
}

// The error's text, cut to 4,096 bytes on a character boundary.
function errorText(error) {
  let text = error instanceof Error ? error.message || String(error) : String(error);
  const bytes = Buffer.from(text, "utf8");
  if (bytes.length <= MAX_ERROR_BYTES) return text;
  let end = MAX_ERROR_BYTES;
  while (end > 0 && (bytes[end] & 0xc0) === 0x80) end--;
  return bytes.toString("utf8", 0, end);
}

// { entry, job, deliveries, shard } of each entry of an XREADGROUP/XAUTOCLAIM entry list of
// `shard`; an entry whose data is gone has job null.
function entriesOf(list, out, shard) {
  for (const item of list || []) {
    if (!item) continue;
    const [entry, fields] = item;
    let job = null;
    for (let i = 0; fields && i + 1 < fields.length; i += 2) {
      if (fields[i] === "job") job = fields[i + 1];
    }
    out.push({ entry, job, deliveries: 1, shard });
  }
  return out;
}

function heldUntilOf(limits) {
  if (!Array.isArray(limits)) return 0;
  for (let i = 0; i + 1 < limits.length; i += 2) {
    if (String(limits[i]) === "held-until-ms") return Number(limits[i + 1]) || 0;
  }
  return 0;
}

// The key of an entry taken from a shard in the worker's maps: entry ids are a stream's own,
// so two shards may hand out the same one.
const entryKey = (e) => `${e.shard.index} ${e.entry}`;

// Items grouped by their shard, in the order they came: [shard, items] pairs.
function byShard(items) {
  const out = new Map();
  for (const item of items) {
    if (!out.has(item.shard)) out.set(item.shard, []);
    out.get(item.shard).push(item);
  }
  return [...out];
}

export class Worker extends EventEmitter {
  #queue;
  #handler;
  #conn;
  // One per shard of the queue: its keys, its reader (a blocking read must not delay the
  // acknowledgements, nor another shard's read), whether the worker promotes it, its takeover.
  #shards = [];

  #running = false;
  #closing = false;
  #abandoned = false;
  #runDone = null;
  #waiters = new Set(); // the read loops', a hold's or the drain's wait
  #timers = [];

  #busy = 0; // slots taken: entries read (or reserved for a read) whose outcome is not settled
  // Over several shards, each shard keeps a read waiting even when every slot is taken, so a
  // job of any shard is seen at once: such a run (at most one a shard) is taken beyond the
  // concurrency and waits here for a slot, in the order it was read, before it starts.
  #overflow = 0; // runs taken beyond the concurrency, not started yet (counted in #busy)
  #slotWaiters = [];
  #inHand = new Map(); // entryKey -> entry, for the lease: running, or waiting to start
  #confirming = new Map(); // entryKey -> entry, for the lease: outcome not confirmed yet
  #successes = []; // entries
  #failures = [];
  #dropped = []; // entries
  #flushing = null;
  #resendMs = 0; // the pause before sending again outcomes a lost connection refused
  #giveUpAt = Infinity; // Date.now() after which outcomes are not sent again (set by the drain)
  #holdsUnsent = 0; // RetryAfter outcomes whose ECHO.HOLD is not written yet: no read meanwhile
  #tickScheduled = false;
  #reconnectedAt = new WeakMap(); // connection -> Date.now() of the last #reconnect

  constructor(queue, handler, options = {}) {
    super();
    if (!queue || !queue.keys || !queue.connection) throw new TypeError("a Worker needs a Queue");
    if (typeof handler !== "function") throw new TypeError("a Worker needs a handler function");
    const o = { ...DEFAULTS };
    for (const [k, v] of Object.entries(options || {})) if (v !== undefined) o[k] = v;
    this.concurrency = positiveInteger(o, "concurrency", 1);
    this.maxAttempts = positiveInteger(o, "maxAttempts", 1);
    this.leaseMs = positiveInteger(o, "leaseMs", 3);
    this.maxDeliveries = positiveInteger(o, "maxDeliveries", 1);
    this.shutdownTimeoutMs = positiveInteger(o, "shutdownTimeoutMs", 0);
    if (typeof o.backoff !== "string" || o.backoff === "") throw new TypeError("backoff is an echomq policy string");
    this.backoff = o.backoff;
    this.#queue = queue;
    this.#handler = handler;
    this.#conn = queue.connection;
    this.consumer = `${hostname()}-${process.pid}-${randomBytes(3).toString("hex")}`;
  }

  get queue() {
    return this.#queue;
  }

  async run() {
    if (this.#running) throw new Error("this worker is already running");
    this.#running = true;
    this.#closing = false;
    this.#abandoned = false;
    this.#busy = 0;
    this.#overflow = 0;
    this.#holdsUnsent = 0;
    this.#giveUpAt = Infinity;
    const shardKeys = this.#queue.shardKeys ?? [this.#queue.keys];
    this.#shards = shardKeys.map((keys, index) => ({
      index,
      keys,
      reader: null,
      readerId: null,
      selfPromote: true,
      nextTakeOver: 0, // Date.now() of the next takeover; the first is at once
      claimCursor: "0-0", // where the next XAUTOCLAIM goes on scanning
    }));
    let finish;
    this.#runDone = new Promise((resolve) => { finish = resolve; });
    const onTerm = () => { this.close(); };
    process.on("SIGTERM", onTerm);
    try {
      for (const shard of this.#shards) {
        // A Cluster's duplicate is a second Cluster client, with connections of its own to the
        // nodes. Its reads go to the primaries whatever the caller's scaleReads: a replica behind
        // the primary would answer the HMGET of a payload just delivered with nothing, and the
        // worker would drop the job as removed.
        const reader = isCluster(this.#conn) ? this.#conn.duplicate([], { scaleReads: "master" }) : this.#conn.duplicate();
        shard.reader = reader;
        reader.on("error", (e) => this.#report(e));
        reader.on("ready", () => { shard.readerId = null; }); // a new connection, a new id
      }
      const first = this.#shards[0].keys;
      // A policy the server refuses would make every failure's ECHO.RETRY fail after the
      // entry is acknowledged: refused here instead, in the server's words (ECHO.DELAY
      // checks it as ECHO.RETRY does and writes nothing).
      await onSlot(this.#conn, first.schedule, "ECHO.DELAY", this.backoff, 1);
      // Loaded once here, on each shard's node (one server has one cache): the first outcomes do
      // not each fall back to EVAL.
      const loadOn = isCluster(this.#conn) ? this.#shards : [this.#shards[0]];
      for (const shard of loadOn) {
        for (const script of [SUCCESS, FAIL, HAND_BACK]) await script.load(this.#conn, shard.keys.pending);
      }
      for (const shard of this.#shards) await this.#createGroup(shard);
      await this.#checkQueues();
      if (!this.#closing) {
        this.emit("ready");
        this.#every(Math.max(1, Math.floor(this.leaseMs / 3)), () => this.#refreshLeases());
        this.#every(QUEUES_CHECK_MS, () => this.#checkQueues());
        await Promise.all(this.#shards.map((shard) => this.#readLoop(shard)));
      }
      await this.#drain();
    } finally {
      for (const t of this.#timers) clearInterval(t);
      this.#timers = [];
      process.off("SIGTERM", onTerm);
      for (const shard of this.#shards) {
        if (shard.reader) shard.reader.disconnect();
        shard.reader = null;
        shard.readerId = null;
      }
      this.#running = false;
      finish();
    }
  }

  // Take nothing new, let the running handlers finish (up to shutdownTimeoutMs) and
  // write their outcomes; resolves when run() has returned.
  close() {
    if (!this.#running) return Promise.resolve();
    if (!this.#closing) {
      this.#closing = true;
      this.#wakeUp();
      // Runs waiting for a slot are given back, unstarted.
      for (const grant of this.#slotWaiters.splice(0)) grant(false);
      // A read blocked in the server comes back at once (at worst, after its BLOCK). Not on a
      // Cluster: a client id is a node's, and which node the reader's connection reached is the
      // reader's own slot map, which may differ from this connection's while a slot moves, so
      // the UNBLOCK could end another client's wait on another node; the read ends after its
      // BLOCK (at most 1 s) instead.
      for (const shard of this.#shards) {
        if (shard.readerId !== null && !isCluster(this.#conn)) {
          this.#conn.client("UNBLOCK", shard.readerId, "TIMEOUT").catch(() => {});
        }
      }
    }
    return this.#runDone;
  }

  // Reconnects a connection a stale refusal came on (the caller's connection too: it is
  // reconnected, never closed for good), at most once a second each, only while it is up.
  // Commands sent meanwhile wait in the client's offline queue for the new connection.
  // A Cluster is left alone: its nodes answer MOVED rather than READONLY, it follows that and
  // refreshes its slots itself, and disconnect(true) would drop its connections to every node.
  #reconnect(conn, e) {
    if (!stale(e) || !conn || isCluster(conn) || conn.status !== "ready") return;
    const now = Date.now();
    if (now - (this.#reconnectedAt.get(conn) ?? 0) < RECONNECT_EVERY_MS) return;
    this.#reconnectedAt.set(conn, now);
    conn.disconnect(true);
  }

  #report(e) {
    if (this.listenerCount("error") > 0) this.emit("error", e);
    else console.error(`echomq worker ${this.consumer}: ${e && e.message ? e.message : e}`);
  }

  #every(ms, fn) {
    const t = setInterval(fn, ms);
    t.unref();
    this.#timers.push(t);
  }

  #wakeUp() {
    this.#grantSlots();
    if (!this.#waiters.size) return;
    const waiters = [...this.#waiters];
    this.#waiters.clear();
    for (const w of waiters) w();
  }

  // Runs taken beyond the concurrency start, oldest first, as slots free up.
  #grantSlots() {
    while (this.#slotWaiters.length && this.#busy - this.#overflow < this.concurrency) {
      this.#overflow--;
      this.#slotWaiters.shift()(true);
    }
  }

  // Resolves true when the run may start (it is then within the concurrency), false at close.
  #waitSlot() {
    if (this.#closing) return Promise.resolve(false);
    const granted = new Promise((resolve) => this.#slotWaiters.push(resolve));
    this.#grantSlots();
    return granted;
  }

  // Resolves at the next wake-up or after ms (when given).
  #waitWake(ms) {
    return new Promise((resolve) => {
      let t = null;
      const done = () => {
        if (t) clearTimeout(t);
        this.#waiters.delete(done);
        resolve();
      };
      this.#waiters.add(done);
      if (ms !== undefined) t = setTimeout(done, Math.max(0, ms));
    });
  }

  async #createGroup(shard) {
    await makeStream(this.#conn, shard.keys.pending, GROUP);
  }

  async #checkQueues() {
    await Promise.all(this.#shards.map(async (shard) => {
      try {
        // The node that owns the shard's slot is the one whose timer would promote it.
        const pairs = await onSlot(this.#conn, shard.keys.schedule, "ECHO.QUEUES");
        const k = shard.keys;
        shard.selfPromote = !pairs.some((p) => String(p[0]) === k.schedule && String(p[1]) === k.pending);
      } catch (e) {
        shard.selfPromote = true;
        this.#report(e);
      }
    }));
  }

  // Slots not taken by a run within the concurrency (nor reserved for a read of such runs).
  #free() {
    return this.concurrency - (this.#busy - this.#overflow);
  }

  // One shard's reads. Over several shards each loop reads its own shard on its own
  // connection, so an idle worker waits on every shard at once and none delays the others:
  // a shard that had nothing is read with COUNT 1 and BLOCK, a speculative read that needs no
  // free slot (its run waits for one, so at most one run a shard is taken beyond the
  // concurrency); a shard that just gave runs is read at once for as many as slots are free.
  // A run of a shard that was idle thus waits for one slot to free up, in the order read,
  // however deep another shard is.
  async #readLoop(shard) {
    const k = shard.keys;
    const many = this.#shards.length > 1;
    shard.nextTakeOver = 0;
    let readPause = 0; // after a transient failure of the last read
    let gave = false; // the last read of this shard returned runs: it may hold more
    while (!this.#closing) {
      const free = this.#free();
      if ((free <= 0 && !many) || this.#holdsUnsent > 0) {
        await this.#waitWake();
        continue;
      }
      const takeOverDue = Date.now() >= shard.nextTakeOver;
      // Over several shards a takeover does not wait for a free slot (a deep shard may keep
      // them all): it takes one run, as a speculative read does.
      if (takeOverDue && (free > 0 || many)) {
        // Step 7, between reads on this connection (a takeover must not wait for a
        // blocked read, nor overfill the slots beside it).
        shard.nextTakeOver = Date.now() + this.leaseMs / 2;
        if (shard.readerId === null && !isCluster(shard.reader)) {
          await shard.reader.client("ID").then((id) => { shard.readerId = id; }, (e) => this.#report(e));
        }
        await this.#takeOver(shard, free <= 0);
        continue;
      }
      const speculative = many && !(gave && free > 0);
      const count = speculative ? 1 : free;
      const over = speculative ? 1 : 0;
      const blocking = !many || speculative;
      this.#busy += count; // reserved: a takeover meanwhile does not overfill the slots
      this.#overflow += over;
      let entries = [];
      let heldUntil = 0;
      let now = 0;
      const reader = shard.reader;
      try {
        if (shard.readerId === null && !isCluster(reader)) shard.readerId = await reader.client("ID");
        const selfPromote = shard.selfPromote;
        const blockMs = selfPromote ? BLOCK_SELF_PROMOTING_MS : BLOCK_SERVER_PROMOTING_MS;
        // Back in time for the next takeover (one due while no slot is free waits for a slot).
        const block = takeOverDue ? blockMs : Math.max(1, Math.min(blockMs, Math.ceil(shard.nextTakeOver - Date.now())));
        const wait = blocking ? ["BLOCK", block] : [];
        // On a Cluster all four go to the shard's node, so they travel one after the other on
        // one connection as on a single server, and TIME is the clock held-until-ms is in.
        const promote = selfPromote
          ? onSlot(reader, k.schedule, "ECHO.PROMOTE", k.schedule, k.pending, "LIMIT", PROMOTE_LIMIT)
          : null;
        const read = reader.xreadgroup("GROUP", GROUP, this.consumer, "COUNT", count, ...wait,
          "STREAMS", k.pending, ">");
        const limits = onSlot(reader, k.schedule, "ECHO.LIMITS", k.schedule);
        const time = onSlot(reader, k.schedule, "TIME");
        // Each reply is awaited below only if the read succeeds: none may go unhandled.
        if (promote) promote.catch((e) => this.#report(e));
        limits.catch(ignore);
        time.catch(ignore);
        const got = await read;
        if (got) for (const [, list] of got) entriesOf(list, entries, shard);
        try {
          heldUntil = heldUntilOf(await limits);
          now = timeMs(await time);
        } catch (e) {
          this.#report(e);
        }
      } catch (e) {
        gave = false;
        this.#busy -= count;
        this.#overflow -= over;
        this.#wakeUp();
        if (String(e.message).startsWith("NOGROUP")) {
          await this.#createGroup(shard).catch((e2) => this.#report(e2));
        } else if (!this.#closing) {
          this.#report(e);
          shard.readerId = null;
          this.#reconnect(reader, e);
          // A read cut by a failover (UNBLOCKED on the old primary at a CLUSTER FAILOVER, a
          // lost connection, MOVED or TRYAGAIN redirected too often) is read again soon, every
          // time later, so the queue goes on as soon as the new owner answers; a refusal (the
          // server answered) waits a second, not to spin on it.
          readPause = answered(e) ? ERROR_PAUSE_MS : Math.min(PAUSE_MAX_MS, Math.max(PAUSE_FIRST_MS, readPause * 2));
          await this.#waitWake(readPause);
        }
        continue;
      }
      readPause = 0;
      gave = entries.length > 0;
      this.#busy -= count - entries.length;
      if (over && !entries.length) this.#overflow -= over;
      if (over || count > entries.length) this.#wakeUp();
      if (entries.length) await this.#begin(entries, heldUntil, now, reader, over > 0);
    }
  }

  // Step 7: the entries of a dead or stuck worker, when slots are free; `speculative`: one
  // entry beyond the concurrency, which waits for a slot (over several shards).
  async #takeOver(shard, speculative = false) {
    const free = speculative ? 1 : this.#free();
    if (free <= 0 || this.#closing) return;
    const conn = shard.reader;
    const over = speculative ? 1 : 0;
    this.#busy += free;
    this.#overflow += over;
    let reserved = free; // slots this takeover holds that #begin does not account for yet
    let overflowing = over; // of which beyond the concurrency
    const entries = [];
    const k = shard.keys;
    try {
      // One call looks at no more than 10 x COUNT entries: going on from the last call's
      // cursor reaches an old entry behind many live ones.
      const claim = conn.xautoclaim(k.pending, GROUP, this.consumer, this.leaseMs, shard.claimCursor,
        "COUNT", free);
      const limits = onSlot(conn, k.schedule, "ECHO.LIMITS", k.schedule);
      const time = onSlot(conn, k.schedule, "TIME");
      limits.catch(ignore);
      time.catch(ignore);
      const [cursor, list] = await claim;
      shard.claimCursor = cursor ? String(cursor) : "0-0";
      entriesOf(list, entries, shard);
      // From here on the entries are this worker's (XAUTOCLAIM restarted their idle time): a
      // failure no longer leaves them for a lease. The hold is then taken as none, as after a
      // read (step 2), and the delivery counts are asked again through a failover.
      let heldUntil = 0;
      let now = 0;
      try {
        heldUntil = heldUntilOf(await limits);
        now = timeMs(await time);
      } catch (e) {
        this.#report(e);
      }
      this.#busy -= reserved - entries.length;
      reserved = entries.length;
      if (!entries.length) {
        this.#overflow -= overflowing;
        overflowing = 0;
      }
      this.#wakeUp();
      if (entries.length) {
        const rows = await this.#deliveryCounts(conn, shard, entries);
        entries.forEach((e, i) => {
          const [err, r] = rows[i] || [null, null];
          e.deliveries = !err && r && r.length ? Number(r[0][3]) : 1;
        });
        reserved = 0;
        overflowing = 0;
        await this.#begin(entries, heldUntil, now, conn, over > 0);
      }
    } catch (e) {
      this.#busy -= reserved;
      this.#overflow -= overflowing;
      shard.claimCursor = "0-0";
      this.#wakeUp();
      if (String(e.message).startsWith("NOGROUP")) await this.#createGroup(shard).catch((e2) => this.#report(e2));
      else {
        this.#report(e);
        this.#reconnect(conn, e);
      }
    }
  }

  // XPENDING of each entry taken over, pipelined: [error, reply] rows. Sent again on a lost
  // connection or a cluster's redirection (a row of a pipeline the Cluster did not send again
  // itself) for up to half a lease; when closing meanwhile, no rows: the entries are then only
  // given back, unrun (#begin), and their counts do not matter.
  async #deliveryCounts(conn, shard, entries) {
    const k = shard.keys;
    let giveUpAt = null;
    let pause = 0;
    for (;;) {
      try {
        const p = conn.pipeline();
        for (const e of entries) p.xpending(k.pending, GROUP, e.entry, e.entry, 1);
        const rows = await p.exec();
        for (const [err] of rows) if (err && !answered(err)) throw err;
        return rows;
      } catch (e) {
        pause = Math.min(PAUSE_MAX_MS, Math.max(PAUSE_FIRST_MS, pause * 2));
        giveUpAt ??= Date.now() + this.leaseMs / 2;
        if (answered(e) || Date.now() + pause > giveUpAt) throw e;
        this.#report(e);
        this.#reconnect(conn, e);
        await this.#waitWake(pause);
        if (this.#closing) return [];
      }
    }
  }

  // Frees the slots of entries that never started (they stay leased to this consumer
  // until the lease expires or they are given back).
  #release(entries) {
    for (const e of entries) this.#inHand.delete(entryKey(e));
    this.#busy -= entries.length;
    this.#wakeUp();
  }

  // Runs entries taken by a read or a takeover (all of one shard): waits out a hold, and for a
  // run taken beyond the concurrency (`over`) a slot, reads the payloads and attempts in one
  // pipeline, starts the handlers.
  async #begin(entries, heldUntil, now, conn, over) {
    const shard = entries[0].shard;
    const k = shard.keys;
    for (const e of entries) this.#inHand.set(entryKey(e), e);
    // Still counted as beyond the concurrency: given back or released, it leaves #overflow too.
    const leave = (list) => {
      if (over) {
        this.#overflow -= list.length;
        over = false;
      }
    };
    // Nothing below has started a handler before its last await, so a try that failed on the
    // way (a lost connection, a failover or a slot moving under it) is made again, the
    // entries' leases renewed meanwhile, for up to half a lease from the first failure (not
    // from the start: a hold may have been waited out before): past that, their lease may run
    // out while the cluster heals, and another worker may take them over; they are then left to
    // that takeover.
    let giveUpAt = null;
    let pause = 0;
    for (;;) {
      try {
        while (heldUntil > now && !this.#closing) {
          // Looked at again now and then: a hold may be lifted (ECHO.HOLD ms=0) or renewed.
          await this.#waitWake(Math.min(heldUntil - now, HOLD_RECHECK_MS));
          if (this.#closing) break;
          const [limits, time] = await Promise.all([onSlot(conn, k.schedule, "ECHO.LIMITS", k.schedule),
            onSlot(conn, k.schedule, "TIME")]);
          heldUntil = heldUntilOf(limits);
          now = timeMs(time);
        }
        if (over && !this.#closing && await this.#waitSlot()) over = false;
        if (this.#closing) {
          leave(entries);
          await this.#giveBack(entries);
          return;
        }
        const ids = [];
        for (const e of entries) if (e.job !== null) ids.push(e.job);
        let payloads = [];
        let attempts = [];
        if (ids.length) {
          [payloads, attempts] = await Promise.all([
            conn.hmgetBuffer(k.jobs, ...ids),
            conn.hmget(k.attempts, ...ids),
          ]);
        }
        let i = 0;
        for (const e of entries) {
          if (e.job === null) {
            this.#drop(e);
            continue;
          }
          const payload = payloads[i];
          const attempt = (attempts[i] === null ? 0 : Number(attempts[i])) + 1;
          i++;
          if (payload === null) {
            this.#drop(e); // removed: acknowledged, nothing runs
          } else {
            const run = unwrapPayload(payload);
            if (e.deliveries > this.maxDeliveries) {
              const error = new Error(`delivered ${e.deliveries} times without an outcome`);
              this.#settle(e, attempt, error, run.jobGroup);
            } else {
              this.#start(e, run.payload, attempt, run.jobGroup);
            }
          }
        }
        return;
      } catch (err) {
        this.#report(err);
        this.#reconnect(conn, err);
        pause = Math.min(PAUSE_MAX_MS, Math.max(PAUSE_FIRST_MS, pause * 2));
        giveUpAt ??= Date.now() + this.leaseMs / 2;
        if (answered(err) || Date.now() + pause > giveUpAt) {
          leave(entries);
          this.#release(entries.filter((e) => this.#inHand.has(entryKey(e))));
          return;
        }
        // close() wakes this wait: the next try gives the entries back.
        await this.#waitWake(pause);
      }
    }
  }

  // Entries taken but never started, put back as new entries for any worker: one hand-back
  // script per entry, pipelined (an entry whose data is gone is only dropped).
  async #giveBack(entries) {
    const sends = entries.map((e) => {
      const k = e.shard.keys;
      return e.job === null
        ? this.#conn.multi().xack(k.pending, GROUP, e.entry).xdel(k.pending, e.entry).exec()
        : HAND_BACK.run(this.#conn, [k.pending], [e.entry, e.job]);
    });
    for (const r of await Promise.allSettled(sends)) if (r.status === "rejected") this.#report(r.reason);
    this.#release(entries);
  }

  // jobGroup: the job's group (from its payload's envelope), null without one.
  #start(e, payload, attempt, jobGroup) {
    let result;
    const failed = (err) => this.#settle(e, attempt,
      err === null || err === undefined ? new Error(String(err)) : err, jobGroup);
    try {
      // entryId: the pending entry that delivered this run, for logs (a job's later runs, and a
      // run taken over, come from other entries).
      const group = jobGroup === null ? null : jobGroup.toString();
      result = this.#handler({ id: e.job, payload, attempt, entryId: e.entry, group });
    } catch (err) {
      failed(err);
      return;
    }
    if (result && typeof result.then === "function") {
      result.then(() => this.#settle(e, attempt, null, jobGroup), failed);
    } else {
      this.#settle(e, attempt, null, jobGroup);
    }
  }

  // An outcome's entry stays leased (renewed) until the outcome is confirmed.
  #toConfirm(e) {
    const key = entryKey(e);
    if (!this.#inHand.delete(key)) return false;
    this.#confirming.set(key, e);
    return true;
  }

  #drop(e) {
    if (!this.#toConfirm(e)) return;
    this.#busy--;
    this.#dropped.push(e);
    this.#scheduleTick();
  }

  #settle(e, attempt, error, jobGroup) {
    if (this.#abandoned || !this.#toConfirm(e)) return; // left to another worker at shutdown
    this.#busy--;
    if (error === null) {
      this.#successes.push(e);
    } else {
      let holdMs = 0; // none: RetryAfter(0) holds nothing
      let holdGroup = null; // the whole queue
      if (error instanceof RetryAfter) {
        holdMs = Math.min(MAX_HOLD_MS, Math.max(0, Math.round(error.ms)));
        if (holdMs > 0) holdGroup = error.group ?? null;
      }
      const failure = { e, shard: e.shard, attempt, message: errorText(error), holdMs, holdGroup, jobGroup };
      // A group's hold stops that group's release only: the reads of the others go on.
      if (holdsQueue(failure)) this.#holdsUnsent++;
      this.#failures.push(failure);
    }
    this.#scheduleTick();
  }

  // Outcomes settled in one turn of the event loop go out together; the read loop
  // sees the freed slots.
  #scheduleTick() {
    if (this.#tickScheduled) return;
    this.#tickScheduled = true;
    setImmediate(() => {
      this.#tickScheduled = false;
      this.#flush();
      this.#wakeUp();
    });
  }

  // A RetryAfter holds every shard: fail.lua held the job's own shard with the failure; the
  // other shards' schedules follow (ECHO.HOLD, of the group when it holds one). A refusal there
  // is reported: the failure is written, the job is not failed again for it.
  async #holdOtherShards(f) {
    const others = this.#shards.filter((shard) => shard !== f.shard);
    const holds = others.map((shard) => {
      const args = [shard.keys.schedule, String(f.holdMs)];
      if (f.holdGroup !== null) args.push("GROUP", f.holdGroup);
      return onSlot(this.#conn, shard.keys.schedule, "ECHO.HOLD", ...args);
    });
    for (const r of await Promise.allSettled(holds)) {
      if (r.status === "rejected") {
        const what = f.holdGroup === null ? "" : ` of group ${f.holdGroup}`;
        this.#report(new Error(`job ${f.e.job}: the hold${what} of ${f.holdMs} ms on another shard was refused: `
          + `${r.reason && r.reason.message ? r.reason.message : r.reason}`));
      }
    }
  }

  // Steps 3-5: the successes settled since the last round in success scripts of up to 1,000
  // runs (per shard), the entries of removed jobs in one MULTI (per shard), and one script per
  // failure, written together (each safe to send again), each on the run's own shard; while
  // they are on the wire, new outcomes wait for the next round. Outcomes a lost connection
  // refused are sent again (their entries stay leased meanwhile) until they go through, or the
  // drain gives up.
  #flush() {
    if (this.#flushing) return;
    if (!this.#successes.length && !this.#failures.length && !this.#dropped.length) return;
    const successes = this.#successes;
    const failures = this.#failures;
    const dropped = this.#dropped;
    this.#successes = [];
    this.#failures = [];
    this.#dropped = [];
    const confirmed = [];
    let resend = false;
    const sends = [];
    // A send the server answered (even with an error) is done: its entries stay delivered and
    // are taken over after the lease when it was refused. A lost connection sends it again.
    const sent = (promise, entries, onResend, onReply = ignore, onAnswered = ignore) => {
      sends.push(promise.then(
        async (reply) => {
          confirmed.push(...entries);
          await onAnswered(reply);
          onReply(reply);
        },
        async (e) => {
          this.#report(e);
          if (answered(e)) {
            confirmed.push(...entries);
            await onAnswered(null);
          } else {
            this.#reconnect(this.#conn, e);
            resend = true;
            onResend();
          }
        },
      ));
    };
    for (const [shard, done] of byShard(successes)) {
      const k = shard.keys;
      const successKeys = [k.pending, k.jobs, k.attempts, k.errors];
      for (let start = 0; start < done.length; start += SUCCESS_BATCH) {
        const entries = done.slice(start, start + SUCCESS_BATCH);
        const args = [];
        for (const e of entries) args.push(e.entry, e.job);
        sent(SUCCESS.run(this.#conn, successKeys, args), entries, () => this.#successes.push(...entries));
      }
    }
    for (const [shard, gone] of byShard(dropped)) {
      const k = shard.keys;
      const ids = gone.map((e) => e.entry);
      // Removed jobs: their entries only (a job added again with the same id since is not theirs).
      const multi = this.#conn.multi().xack(k.pending, GROUP, ...ids).xdel(k.pending, ...ids);
      sent(multi.exec().then((result) => {
        if (!result) this.#report(new Error("an outcome transaction was aborted"));
        else {
          for (const [e] of result) {
            // A Cluster hands back MOVED, ASK or TRYAGAIN inside the replies when it could not
            // send the transaction again itself: not applied, so sent again.
            if (e && !answered(e)) throw e;
          }
          for (const [e] of result) if (e) this.#report(e);
        }
      }), gone, () => this.#dropped.push(...gone));
    }
    for (const f of failures) {
      const k = f.shard.keys;
      const keys = [k.schedule, k.pending, k.dead, k.attempts, k.errors, k.jobs];
      const args = [f.e.job, f.e.entry, this.backoff, String(f.attempt), String(this.maxAttempts), f.message,
        String(f.holdMs)];
      // A grouped job is retried into its group; '' is no group, before the group to hold.
      if (f.jobGroup !== null || f.holdGroup !== null) args.push(f.jobGroup ?? "");
      if (f.holdGroup !== null) args.push(f.holdGroup);
      sent(FAIL.run(this.#conn, keys, args), [f.e], () => this.#failures.push(f), (reply) => {
        // The failure was written (or was settled before, -3, or the job removed, -4); a
        // refused hold (held is the refusal's text) is reported, the worker goes on.
        const held = Array.isArray(reply) ? reply[1] : 0;
        if (typeof held === "string" || Buffer.isBuffer(held)) {
          const what = f.holdGroup === null ? "" : ` of group ${f.holdGroup}`;
          this.#report(new Error(`job ${f.e.job}: the failure was written but the hold${what} of ${f.holdMs} ms `
            + `was refused: ${held}`));
        }
      }, async (reply) => {
        // Answered: the hold is written (or refused), and with it the other shards' (the
        // failure written: not -3, settled before, nor -4, removed), then reads may go on.
        const fired = Array.isArray(reply) ? Number(reply[0]) : null;
        if (f.holdMs > 0 && this.#shards.length > 1 && fired !== null && fired !== -3 && fired !== -4) {
          await this.#holdOtherShards(f);
        }
        if (holdsQueue(f)) this.#holdsUnsent--;
      });
    }
    this.#flushing = Promise.all(sends).then(async () => {
      for (const e of confirmed) this.#confirming.delete(entryKey(e));
      if (!resend) {
        this.#resendMs = 0;
        return;
      }
      if (Date.now() >= this.#giveUpAt) {
        this.#abandonOutcomes();
        return;
      }
      this.#resendMs = Math.min(RESEND_MAX_MS, Math.max(RESEND_FIRST_MS, this.#resendMs * 2));
      await new Promise((r) => setTimeout(r, Math.min(this.#resendMs, Math.max(0, this.#giveUpAt - Date.now()))));
    }).finally(() => {
      this.#flushing = null;
      this.#flush();
      this.#wakeUp();
    });
  }

  // Outcomes never confirmed, at the end of the drain: left in the group, unacknowledged,
  // another worker takes them over after the lease.
  #abandonOutcomes() {
    for (const f of this.#failures) if (holdsQueue(f)) this.#holdsUnsent--;
    this.#successes = [];
    this.#failures = [];
    this.#dropped = [];
    this.#confirming.clear();
  }

  // Step 6: the entries still running, waiting to start, or whose outcome is not confirmed
  // yet, keep their lease (one XCLAIM per shard).
  #refreshLeases() {
    if (!this.#inHand.size && !this.#confirming.size) return;
    for (const [shard, held] of byShard([...this.#inHand.values(), ...this.#confirming.values()])) {
      this.#conn.xclaim(shard.keys.pending, GROUP, this.consumer, 0, ...held.map((e) => e.entry), "JUSTID")
        .catch((e) => {
          this.#report(e);
          this.#reconnect(this.#conn, e);
        });
    }
  }

  // Step 8: the running handlers get up to shutdownTimeoutMs; their outcomes are sent
  // (again, when a lost connection refused them) until that time is up.
  async #drain() {
    const deadline = Date.now() + this.shutdownTimeoutMs;
    this.#giveUpAt = deadline;
    while (this.#busy > 0 && Date.now() < deadline) await this.#waitWake(deadline - Date.now());
    if (this.#busy > 0) {
      // Left in the group, unacknowledged: another worker takes them over after the lease.
      this.#abandoned = true;
      this.#inHand.clear();
    }
    for (;;) {
      if (this.#tickScheduled) await new Promise((r) => setImmediate(r));
      this.#flush();
      if (!this.#flushing) break;
      await this.#flushing;
    }
    this.#abandonOutcomes();
  }
}

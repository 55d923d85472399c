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

// [entry id, job id] of each entry of an XREADGROUP/XAUTOCLAIM entry list; an entry
// whose data is gone has job id null.
function entriesOf(list, out) {
  for (const item of list || []) {
    if (!item) continue;
    const [entry, fields] = item;
    let job = null;
    for (let i = 0; fields && i + 1 < fields.length; i += 2) {
      if (fields[i] === "job") job = fields[i + 1];
    }
    out.push({ entry, job, deliveries: 1 });
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

export class Worker extends EventEmitter {
  #queue;
  #handler;
  #keys;
  #conn;
  #reader = null;
  #readerId = null;

  #running = false;
  #closing = false;
  #abandoned = false;
  #runDone = null;
  #waiters = new Set(); // the read loop's, a hold's or the drain's wait
  #timers = [];
  #selfPromote = true;
  #nextTakeOver = 0; // Date.now() of the next takeover; the first is at once
  #claimCursor = "0-0"; // where the next XAUTOCLAIM goes on scanning

  #busy = 0; // slots taken: entries read (or reserved for a read) whose outcome is not settled
  #inHand = new Map(); // entry id -> job id, for the lease: running, or waiting to start
  #confirming = new Map(); // entry id -> job id, for the lease: outcome not confirmed yet
  #okEntries = [];
  #okIds = [];
  #failures = [];
  #dropped = [];
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
    this.#keys = queue.keys;
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
    this.#holdsUnsent = 0;
    this.#giveUpAt = Infinity;
    this.#claimCursor = "0-0";
    let finish;
    this.#runDone = new Promise((resolve) => { finish = resolve; });
    const onTerm = () => { this.close(); };
    process.on("SIGTERM", onTerm);
    try {
      // A Cluster's duplicate is a second Cluster client, with connections of its own to the
      // nodes. Its reads go to the primaries whatever the caller's scaleReads: a replica behind
      // the primary would answer the HMGET of a payload just delivered with nothing, and the
      // worker would drop the job as removed.
      this.#reader = isCluster(this.#conn) ? this.#conn.duplicate([], { scaleReads: "master" }) : this.#conn.duplicate();
      this.#reader.on("error", (e) => this.#report(e));
      this.#reader.on("ready", () => { this.#readerId = null; }); // a new connection, a new id
      // A policy the server refuses would make every failure's ECHO.RETRY fail after the
      // entry is acknowledged: refused here instead, in the server's words (ECHO.DELAY
      // checks it as ECHO.RETRY does and writes nothing).
      await onSlot(this.#conn, this.#keys.schedule, "ECHO.DELAY", this.backoff, 1);
      // Loaded once here, on the queue's node: the first outcomes do not each fall back to EVAL.
      for (const script of [SUCCESS, FAIL, HAND_BACK]) await script.load(this.#conn, this.#keys.pending);
      await this.#createGroup();
      await this.#checkQueues();
      if (!this.#closing) {
        this.emit("ready");
        this.#every(Math.max(1, Math.floor(this.leaseMs / 3)), () => this.#refreshLeases());
        this.#every(QUEUES_CHECK_MS, () => this.#checkQueues());
        await this.#readLoop();
      }
      await this.#drain();
    } finally {
      for (const t of this.#timers) clearInterval(t);
      this.#timers = [];
      process.off("SIGTERM", onTerm);
      if (this.#reader) this.#reader.disconnect();
      this.#reader = null;
      this.#readerId = null;
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
      // A read blocked in the server comes back at once (at worst, after its BLOCK). Not on a
      // Cluster: a client id is a node's, and which node the reader's connection reached is the
      // reader's own slot map, which may differ from this connection's while a slot moves, so
      // the UNBLOCK could end another client's wait on another node; the read ends after its
      // BLOCK (at most 1 s) instead.
      if (this.#readerId !== null && !isCluster(this.#conn)) {
        this.#conn.client("UNBLOCK", this.#readerId, "TIMEOUT").catch(() => {});
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
    if (!this.#waiters.size) return;
    const waiters = [...this.#waiters];
    this.#waiters.clear();
    for (const w of waiters) w();
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

  async #createGroup() {
    await makeStream(this.#conn, this.#keys.pending, GROUP);
  }

  async #checkQueues() {
    try {
      // The node that owns the queue's slot is the one whose timer would promote it.
      const pairs = await onSlot(this.#conn, this.#keys.schedule, "ECHO.QUEUES");
      const k = this.#keys;
      this.#selfPromote = !pairs.some((p) => String(p[0]) === k.schedule && String(p[1]) === k.pending);
    } catch (e) {
      this.#selfPromote = true;
      this.#report(e);
    }
  }

  async #readLoop() {
    const k = this.#keys;
    this.#nextTakeOver = 0;
    let readPause = 0; // after a transient failure of the last read
    while (!this.#closing) {
      const free = this.concurrency - this.#busy;
      if (free <= 0 || this.#holdsUnsent > 0) {
        await this.#waitWake();
        continue;
      }
      if (Date.now() >= this.#nextTakeOver) {
        // Step 7, between reads on this connection (a takeover must not wait for a
        // blocked read, nor overfill the slots beside it).
        this.#nextTakeOver = Date.now() + this.leaseMs / 2;
        if (this.#readerId === null && !isCluster(this.#reader)) {
          await this.#reader.client("ID").then((id) => { this.#readerId = id; }, (e) => this.#report(e));
        }
        await this.#takeOver(this.#reader);
        continue;
      }
      this.#busy += free; // reserved: a takeover meanwhile does not overfill the slots
      let entries = [];
      let heldUntil = 0;
      let now = 0;
      const reader = this.#reader;
      try {
        if (this.#readerId === null && !isCluster(reader)) this.#readerId = await reader.client("ID");
        const selfPromote = this.#selfPromote;
        // Back in time for the next takeover.
        const block = Math.max(1, Math.min(selfPromote ? BLOCK_SELF_PROMOTING_MS : BLOCK_SERVER_PROMOTING_MS,
          Math.ceil(this.#nextTakeOver - Date.now())));
        // On a Cluster all four go to the queue's node, so they travel one after the other on
        // one connection as on a single server, and TIME is the clock held-until-ms is in.
        const promote = selfPromote
          ? onSlot(reader, k.schedule, "ECHO.PROMOTE", k.schedule, k.pending, "LIMIT", PROMOTE_LIMIT)
          : null;
        const read = reader.xreadgroup("GROUP", GROUP, this.consumer, "COUNT", free, "BLOCK", block,
          "STREAMS", k.pending, ">");
        const limits = onSlot(reader, k.schedule, "ECHO.LIMITS", k.schedule);
        const time = onSlot(reader, k.schedule, "TIME");
        // Each reply is awaited below only if the read succeeds: none may go unhandled.
        if (promote) promote.catch((e) => this.#report(e));
        limits.catch(ignore);
        time.catch(ignore);
        const got = await read;
        if (got) for (const [, list] of got) entriesOf(list, entries);
        try {
          heldUntil = heldUntilOf(await limits);
          now = timeMs(await time);
        } catch (e) {
          this.#report(e);
        }
      } catch (e) {
        this.#busy -= free;
        if (String(e.message).startsWith("NOGROUP")) {
          await this.#createGroup().catch((e2) => this.#report(e2));
        } else if (!this.#closing) {
          this.#report(e);
          this.#readerId = null;
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
      this.#busy -= free - entries.length;
      if (entries.length) await this.#begin(entries, heldUntil, now, reader);
    }
  }

  // Step 7: the entries of a dead or stuck worker, when slots are free.
  async #takeOver(conn) {
    const free = this.concurrency - this.#busy;
    if (free <= 0 || this.#closing) return;
    this.#busy += free;
    let reserved = free; // slots this takeover holds that #begin does not account for yet
    const entries = [];
    const k = this.#keys;
    try {
      // One call looks at no more than 10 x COUNT entries: going on from the last call's
      // cursor reaches an old entry behind many live ones.
      const claim = conn.xautoclaim(k.pending, GROUP, this.consumer, this.leaseMs, this.#claimCursor,
        "COUNT", free);
      const limits = onSlot(conn, k.schedule, "ECHO.LIMITS", k.schedule);
      const time = onSlot(conn, k.schedule, "TIME");
      limits.catch(ignore);
      time.catch(ignore);
      const [cursor, list] = await claim;
      this.#claimCursor = cursor ? String(cursor) : "0-0";
      entriesOf(list, entries);
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
      this.#wakeUp();
      if (entries.length) {
        const rows = await this.#deliveryCounts(conn, entries);
        entries.forEach((e, i) => {
          const [err, r] = rows[i] || [null, null];
          e.deliveries = !err && r && r.length ? Number(r[0][3]) : 1;
        });
        reserved = 0;
        await this.#begin(entries, heldUntil, now, conn);
      }
    } catch (e) {
      this.#busy -= reserved;
      this.#claimCursor = "0-0";
      this.#wakeUp();
      if (String(e.message).startsWith("NOGROUP")) await this.#createGroup().catch((e2) => this.#report(e2));
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
  async #deliveryCounts(conn, entries) {
    const k = this.#keys;
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
    for (const e of entries) this.#inHand.delete(e.entry);
    this.#busy -= entries.length;
    this.#wakeUp();
  }

  // Runs entries taken by a read or a takeover: waits out a hold, reads the payloads
  // and attempts in one pipeline, starts the handlers.
  async #begin(entries, heldUntil, now, conn) {
    const k = this.#keys;
    for (const e of entries) this.#inHand.set(e.entry, e.job);
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
        if (this.#closing) {
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
            this.#drop(e.entry);
            continue;
          }
          const payload = payloads[i];
          const attempt = (attempts[i] === null ? 0 : Number(attempts[i])) + 1;
          i++;
          if (payload === null) {
            this.#drop(e.entry); // removed: acknowledged, nothing runs
          } else {
            const run = unwrapPayload(payload);
            if (e.deliveries > this.maxDeliveries) {
              const error = new Error(`delivered ${e.deliveries} times without an outcome`);
              this.#settle(e.entry, e.job, attempt, error, run.jobGroup);
            } else {
              this.#start(e.entry, e.job, run.payload, attempt, run.jobGroup);
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
          this.#release(entries.filter((e) => this.#inHand.has(e.entry)));
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
    const k = this.#keys;
    const sends = entries.map((e) => (e.job === null
      ? this.#conn.multi().xack(k.pending, GROUP, e.entry).xdel(k.pending, e.entry).exec()
      : HAND_BACK.run(this.#conn, [k.pending], [e.entry, e.job])));
    for (const r of await Promise.allSettled(sends)) if (r.status === "rejected") this.#report(r.reason);
    this.#release(entries);
  }

  // jobGroup: the job's group (from its payload's envelope), null without one.
  #start(entry, id, payload, attempt, jobGroup) {
    let result;
    const failed = (err) => this.#settle(entry, id, attempt,
      err === null || err === undefined ? new Error(String(err)) : err, jobGroup);
    try {
      // entryId: the pending entry that delivered this run, for logs (a job's later runs, and a
      // run taken over, come from other entries).
      const group = jobGroup === null ? null : jobGroup.toString();
      result = this.#handler({ id, payload, attempt, entryId: entry, group });
    } catch (err) {
      failed(err);
      return;
    }
    if (result && typeof result.then === "function") {
      result.then(() => this.#settle(entry, id, attempt, null, jobGroup), failed);
    } else {
      this.#settle(entry, id, attempt, null, jobGroup);
    }
  }

  // An outcome's entry stays leased (renewed) until the outcome is confirmed.
  #toConfirm(entry) {
    const job = this.#inHand.get(entry);
    if (job === undefined || !this.#inHand.delete(entry)) return false;
    this.#confirming.set(entry, job);
    return true;
  }

  #drop(entry) {
    if (!this.#toConfirm(entry)) return;
    this.#busy--;
    this.#dropped.push(entry);
    this.#scheduleTick();
  }

  #settle(entry, id, attempt, error, jobGroup) {
    if (this.#abandoned || !this.#toConfirm(entry)) return; // left to another worker at shutdown
    this.#busy--;
    if (error === null) {
      this.#okEntries.push(entry);
      this.#okIds.push(id);
    } else {
      let holdMs = 0; // none: RetryAfter(0) holds nothing
      let holdGroup = null; // the whole queue
      if (error instanceof RetryAfter) {
        holdMs = Math.min(MAX_HOLD_MS, Math.max(0, Math.round(error.ms)));
        if (holdMs > 0) holdGroup = error.group ?? null;
      }
      const failure = { entry, id, attempt, message: errorText(error), holdMs, holdGroup, jobGroup };
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

  // Steps 3-5: the successes settled since the last round in success scripts of up to 1,000
  // runs, the entries of removed jobs in one MULTI, and one script per failure, written
  // together (each safe to send again); while they are on the wire, new
  // outcomes wait for the next round. Outcomes a lost connection refused are sent again
  // (their entries stay leased meanwhile) until they go through, or the drain gives up.
  #flush() {
    if (this.#flushing) return;
    if (!this.#okEntries.length && !this.#failures.length && !this.#dropped.length) return;
    const k = this.#keys;
    const okEntries = this.#okEntries;
    const okIds = this.#okIds;
    const failures = this.#failures;
    const dropped = this.#dropped;
    this.#okEntries = [];
    this.#okIds = [];
    this.#failures = [];
    this.#dropped = [];
    const confirmed = [];
    let resend = false;
    const sends = [];
    // A send the server answered (even with an error) is done: its entries stay delivered and
    // are taken over after the lease when it was refused. A lost connection sends it again.
    const sent = (promise, entries, onResend, onReply = ignore, onAnswered = ignore) => {
      sends.push(promise.then(
        (reply) => {
          confirmed.push(...entries);
          onAnswered();
          onReply(reply);
        },
        (e) => {
          this.#report(e);
          if (answered(e)) {
            confirmed.push(...entries);
            onAnswered();
          } else {
            this.#reconnect(this.#conn, e);
            resend = true;
            onResend();
          }
        },
      ));
    };
    const successKeys = [k.pending, k.jobs, k.attempts, k.errors];
    for (let start = 0; start < okEntries.length; start += SUCCESS_BATCH) {
      const entries = okEntries.slice(start, start + SUCCESS_BATCH);
      const ids = okIds.slice(start, start + SUCCESS_BATCH);
      const args = [];
      for (let i = 0; i < entries.length; i++) args.push(entries[i], ids[i]);
      sent(SUCCESS.run(this.#conn, successKeys, args), entries, () => {
        this.#okEntries.push(...entries);
        this.#okIds.push(...ids);
      });
    }
    if (dropped.length) {
      // Removed jobs: their entries only (a job added again with the same id since is not theirs).
      const multi = this.#conn.multi().xack(k.pending, GROUP, ...dropped).xdel(k.pending, ...dropped);
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
      }), dropped, () => this.#dropped.push(...dropped));
    }
    const keys = [k.schedule, k.pending, k.dead, k.attempts, k.errors, k.jobs];
    for (const f of failures) {
      const args = [f.id, f.entry, this.backoff, String(f.attempt), String(this.maxAttempts), f.message,
        String(f.holdMs)];
      // A grouped job is retried into its group; '' is no group, before the group to hold.
      if (f.jobGroup !== null || f.holdGroup !== null) args.push(f.jobGroup ?? "");
      if (f.holdGroup !== null) args.push(f.holdGroup);
      sent(FAIL.run(this.#conn, keys, args), [f.entry], () => this.#failures.push(f), (reply) => {
        // The failure was written (or was settled before, -3, or the job removed, -4); a
        // refused hold (held is the refusal's text) is reported, the worker goes on.
        const held = Array.isArray(reply) ? reply[1] : 0;
        if (typeof held === "string" || Buffer.isBuffer(held)) {
          const what = f.holdGroup === null ? "" : ` of group ${f.holdGroup}`;
          this.#report(new Error(`job ${f.id}: the failure was written but the hold${what} of ${f.holdMs} ms `
            + `was refused: ${held}`));
        }
      }, () => {
        // Answered: the hold is written (or refused), reads may go on.
        if (holdsQueue(f)) this.#holdsUnsent--;
      });
    }
    this.#flushing = Promise.all(sends).then(async () => {
      for (const entry of confirmed) this.#confirming.delete(entry);
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
    this.#okEntries = [];
    this.#okIds = [];
    this.#failures = [];
    this.#dropped = [];
    this.#confirming.clear();
  }

  // Step 6: the entries still running, waiting to start, or whose outcome is not confirmed
  // yet, keep their lease.
  #refreshLeases() {
    if (!this.#inHand.size && !this.#confirming.size) return;
    const entries = [...this.#inHand.keys(), ...this.#confirming.keys()];
    this.#conn.xclaim(this.#keys.pending, GROUP, this.consumer, 0, ...entries, "JUSTID")
      .catch((e) => {
        this.#report(e);
        this.#reconnect(this.#conn, e);
      });
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

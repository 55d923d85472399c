#!/usr/bin/env node
// A job worker on echomq, in Node.js (18 or later) with the `iovalkey` client
// (or `ioredis`, the same API).
//
// Consumers take jobs from {NAME}:pending, fail some of them
// (deterministically), retry those with ECHO.RETRY under a jittered policy,
// and one promoter moves due retries back with ECHO.PROMOTE (or, with
// --no-promoter, the server does it: echomq.auto-promote). The server decides
// when a job has failed for the last time: the same ECHO.RETRY call moves it
// to the dead set instead (MAXATTEMPTS n DEAD dead), so the worker never
// counts attempts to decide when to give up.
//
// Two layouts of {NAME}:pending:
//   stream (default)  a stream read through a consumer group: a taken job stays
//                     pending in the group until acknowledged, in the same
//                     MULTI/EXEC as its outcome; entries idle longer than the
//                     lease are taken over with XAUTOCLAIM; an entry delivered
//                     more than --max-deliveries times is failed unrun, so a job
//                     that kills its workers ends in the dead set. At least
//                     once: handlers must be idempotent.
//   list              a list taken with BRPOP: simpler, but a job popped by a
//                     worker that then dies is lost.
//
// A dependency that answers "overloaded, retry after N ms" (simulated with
// --overload-every K --retry-after-ms N) is answered with ECHO.HOLD
// {NAME}:schedule N before the job is failed as usual: one worker's hold stops
// the release of due jobs to every worker. --seed --seed-delay-ms D gives each
// seeded job a delayed first run with ECHO.SCHEDULE, as a producer would.
//
// Same keys and options as examples/worker.rs and examples/worker.py, so
// workers in all three languages can share one queue:
//
//     npm install iovalkey
//     node examples/worker.mjs --url redis://127.0.0.1:6379/ --queue orders --jobs 100 --fresh --seed
//
// Options: `--help` prints them (the HELP text below), each also read from an
// environment variable. Exit status: 0 when every job is done or dead, 2 at
// the deadline, 1 on an error.

import { parseArgs } from "node:util";
import { setTimeout as sleep } from "node:timers/promises";

let Client;
try {
  ({ default: Client } = await import("iovalkey"));
} catch {
  try {
    ({ default: Client } = await import("ioredis")); // the same API
  } catch {
    console.error("worker.mjs needs the 'iovalkey' (or 'ioredis') package: npm install iovalkey");
    process.exit(1);
  }
}

// The promoter sleeps at most this long, so retries scheduled meanwhile are
// picked up within this much of their fire time.
const PROMOTER_CAP_MS = 50;
// How long the promoter pauses when a job is due yet stayed in the schedule: a
// hold (ECHO.HOLD) or a release limit kept it there, and asking again at once
// would only spin.
const PROMOTER_HELD_MS = 10;
const PROMOTE_LIMIT = 1000;
// One entry per read or claim: an entry's idle time (what the lease is
// measured against) runs from its delivery, so entries waiting in a worker's
// own batch would age there; and a claimed batch would share the fate of a job
// that kills its worker.
const BATCH = 1;
const BLOCK_MS = 200;
const BACKOFF_FIRST_MS = 20;
const BACKOFF_MAX_MS = 1000;

const HELP = `A job worker on echomq (examples/worker.mjs): consumers take jobs from
{NAME}:pending, fail some of them as planned, retry those with ECHO.RETRY,
and one promoter moves due retries back with ECHO.PROMOTE.

Options (each also read from the environment variable in brackets):
  --url URL[,URL...]   [ECHOMQ_URL] default redis://127.0.0.1:6379/; several
                       addresses, comma-separated: the worker uses whichever
                       reports itself primary (ROLE) and moves to the new one
                       after a failover; in a cluster it follows MOVED
  --reconnect-secs S   [ECHOMQ_RECONNECT_SECS] default 30: retry commands
                       refused by a failover (READONLY, UNBLOCKED, MOVED,
                       LOADING, ...) or a lost connection, with a short
                       backoff, for at most S seconds without a successful
                       command, then give up (exit 1); 0: give up at once
  --queue NAME         [ECHOMQ_QUEUE] default jobs; keys {NAME}:pending,
                       {NAME}:schedule, {NAME}:attempts, {NAME}:done (a set),
                       {NAME}:done-by, {NAME}:dead
  --fresh              [ECHOMQ_FRESH=1] first delete those six keys: start the
                       queue afresh (what a second --seed run needs)
  --seed               add job-0 .. job-(N-1) to {NAME}:pending first
  --seed-delay-ms D    [ECHOMQ_SEED_DELAY_MS] default 0: with --seed, schedule
                       each job's first run D ms ahead instead, with
                       ECHO.SCHEDULE {NAME}:schedule <job> D (the promoter, or
                       the server's own promotion, moves it when due)
  --layout L           [ECHOMQ_LAYOUT] stream (default) or list
  --group NAME         [ECHOMQ_GROUP] default workers: the consumer group
  --lease-ms MS        [ECHOMQ_LEASE_MS] default 30000: take over entries idle
                       that long (choose it above the longest job)
  --max-deliveries K   [ECHOMQ_MAX_DELIVERIES] default 3: fail, unrun, an entry
                       taken over after K deliveries
  --jobs N             [ECHOMQ_JOBS] default 100: stop once N distinct jobs are
                       done or dead
  --fail-first K       [ECHOMQ_FAIL_FIRST] default 2: job-<i> fails its first
                       i % (K + 1) attempts, then succeeds
  --policy P           [ECHOMQ_POLICY] default jitter:exponential:50:2000
  --max-attempts M     [ECHOMQ_MAX_ATTEMPTS] default 5: a job's M-th failure
                       sends it to {NAME}:dead instead of scheduling it again
  --work-ms MS         [ECHOMQ_WORK_MS] default 0: simulated work per job
  --overload-every K   [ECHOMQ_OVERLOAD_EVERY] default 0 (never): a job's run
                       whose attempt number is a multiple of K answers
                       "overloaded, retry after --retry-after-ms" (before the
                       planned failures): the worker holds the schedule with
                       ECHO.HOLD {NAME}:schedule <ms>, so no worker gets more
                       jobs until then, and fails the job as usual
  --retry-after-ms MS  [ECHOMQ_RETRY_AFTER_MS] default 1000: the wait an
                       overloaded answer asks for
  --crash-on JOB       [ECHOMQ_CRASH_ON] the process aborts when it takes that job
  --consumers C        [ECHOMQ_CONSUMERS] default 4 (each its own connection),
                       consumers <name>-<i>
  --deadline-secs S    [ECHOMQ_DEADLINE_SECS] default 60: give up (exit 2)
  --name NAME          [ECHOMQ_WORKER_NAME] default node-<pid>
  --no-promoter        [ECHOMQ_NO_PROMOTER=1] run no promoter and rely on the
                       server promoting the queue itself; the server must list
                       the pair in echomq.auto-promote (e.g. CONFIG SET
                       echomq.auto-promote "{NAME}:schedule {NAME}:pending")
  --log-takes          [ECHOMQ_LOG_TAKES=1] print "took <entry-id> <job>" on
                       stdout for each stream entry a consumer receives
                       (XREADGROUP or an XAUTOCLAIM takeover)
  -h, --help           this text

Through a failover, a command refused because the server is no longer the
primary (READONLY, UNBLOCKED, MASTERDOWN), is loading (LOADING), or cannot be
reached is retried after a short backoff (20 ms doubling to 1 s) on whichever
address reports itself primary (ROLE; a replica's ROLE names its primary,
which is tried too); a cluster's MOVED is followed to the slot's new owner,
ASK, TRYAGAIN and CLUSTERDOWN retried. A job's outcome refused by the old
primary is written on the new one only while its entry is still this
consumer's: not when the write went through and only the reply was lost, nor
when another consumer took the entry over meanwhile (it settles it). So a job
runs again only if it was in flight at the failover, and no completion is
counted twice.

Exit status: 0 when every job is done or dead, 2 at the deadline, 1 on an error.
`;

function config() {
  const env = (name, dflt) => process.env[name] ?? dflt;
  const { values } = parseArgs({
    options: {
      url: { type: "string", default: env("ECHOMQ_URL", "redis://127.0.0.1:6379/") },
      "reconnect-secs": { type: "string", default: env("ECHOMQ_RECONNECT_SECS", "30") },
      fresh: { type: "boolean", default: env("ECHOMQ_FRESH", "") === "1" },
      queue: { type: "string", default: env("ECHOMQ_QUEUE", "jobs") },
      layout: { type: "string", default: env("ECHOMQ_LAYOUT", "stream") },
      group: { type: "string", default: env("ECHOMQ_GROUP", "workers") },
      "lease-ms": { type: "string", default: env("ECHOMQ_LEASE_MS", "30000") },
      "max-deliveries": { type: "string", default: env("ECHOMQ_MAX_DELIVERIES", "3") },
      jobs: { type: "string", default: env("ECHOMQ_JOBS", "100") },
      seed: { type: "boolean", default: false },
      "fail-first": { type: "string", default: env("ECHOMQ_FAIL_FIRST", "2") },
      policy: { type: "string", default: env("ECHOMQ_POLICY", "jitter:exponential:50:2000") },
      "max-attempts": { type: "string", default: env("ECHOMQ_MAX_ATTEMPTS", "5") },
      "work-ms": { type: "string", default: env("ECHOMQ_WORK_MS", "0") },
      "overload-every": { type: "string", default: env("ECHOMQ_OVERLOAD_EVERY", "0") },
      "retry-after-ms": { type: "string", default: env("ECHOMQ_RETRY_AFTER_MS", "1000") },
      "seed-delay-ms": { type: "string", default: env("ECHOMQ_SEED_DELAY_MS", "0") },
      "crash-on": { type: "string", default: env("ECHOMQ_CRASH_ON", "") },
      consumers: { type: "string", default: env("ECHOMQ_CONSUMERS", "4") },
      "deadline-secs": { type: "string", default: env("ECHOMQ_DEADLINE_SECS", "60") },
      name: { type: "string", default: env("ECHOMQ_WORKER_NAME", `node-${process.pid}`) },
      "no-promoter": { type: "boolean", default: env("ECHOMQ_NO_PROMOTER", "") === "1" },
      "log-takes": { type: "boolean", default: env("ECHOMQ_LOG_TAKES", "") === "1" },
      help: { type: "boolean", short: "h", default: false },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(HELP);
    process.exit(0);
  }
  const number = (flag) => {
    const v = Number(values[flag]);
    if (!Number.isFinite(v) || v < 0) throw new Error(`--${flag}: '${values[flag]}' is not a number`);
    return Math.floor(v);
  };
  if (values.layout !== "stream" && values.layout !== "list") {
    throw new Error(`--layout: '${values.layout}' is neither stream nor list`);
  }
  const urls = values.url.split(",").map((u) => u.trim()).filter(Boolean);
  if (!urls.length) throw new Error("--url: no address");
  return {
    urls,
    reconnectMs: number("reconnect-secs") * 1000,
    fresh: values.fresh,
    queue: values.queue,
    layout: values.layout,
    group: values.group,
    leaseMs: Math.max(1, number("lease-ms")),
    maxDeliveries: Math.max(1, number("max-deliveries")),
    jobs: number("jobs"),
    seed: values.seed,
    failFirst: number("fail-first"),
    policy: values.policy,
    maxAttempts: Math.max(1, number("max-attempts")),
    workMs: number("work-ms"),
    overloadEvery: number("overload-every"),
    retryAfterMs: number("retry-after-ms"),
    seedDelayMs: number("seed-delay-ms"),
    crashOn: values["crash-on"],
    consumers: Math.max(1, number("consumers")),
    deadlineMs: number("deadline-secs") * 1000,
    name: values.name,
    promoter: !values["no-promoter"],
    logTakes: values["log-takes"],
  };
}

// Hash-tagged so a cluster keeps one queue in one slot.
function keys(queue) {
  const key = (suffix) => `{${queue}}:${suffix}`;
  return {
    pending: key("pending"),
    schedule: key("schedule"),
    attempts: key("attempts"),
    done: key("done"),
    doneBy: key("done-by"),
    dead: key("dead"),
  };
}

// job-<i> fails its first i % (K + 1) attempts; other names never fail.
function failures(job, failFirst) {
  const m = /^job-(\d+)$/.exec(job);
  return m ? Number(BigInt(m[1]) % BigInt(failFirst + 1)) : 0;
}

// Errors a failover (or a resharding) causes: retried on the primary of now.
const RETRIED_CODES = ["READONLY", "UNBLOCKED", "LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "ASK"];
const LOST = /Connection is closed|isn't writeable|ECONNREFUSED|ECONNRESET|EPIPE|ETIMEDOUT|ENOTCONN|EHOSTUNREACH|timed out/;

// ["moved", "host:port"], ["failover"], or null for a real error.
function trouble(e) {
  const replies = [e, ...(e && e.previousErrors) || []]; // a MULTI/EXEC's queued errors too
  for (const r of replies) {
    const msg = String(r && r.message || r);
    const moved = /^MOVED \d+ (\S+)/.exec(msg);
    if (moved) return ["moved", moved[1]];
    if (RETRIED_CODES.includes(msg.split(" ", 1)[0])) return ["failover"];
  }
  if (e && e.name !== "ReplyError" && LOST.test(String(e.message))) return ["failover"];
  return null;
}

// url with its host:port replaced by addr (scheme, credentials, database kept).
function urlWithAddr(url, addr) {
  const [scheme, rest] = url.includes("://") ? url.split(/:\/\/(.*)/s) : ["redis", url];
  const slash = rest.indexOf("/");
  const authority = slash < 0 ? rest : rest.slice(0, slash);
  const path = slash < 0 ? "" : rest.slice(slash);
  const at = authority.lastIndexOf("@");
  return `${scheme}://${at < 0 ? "" : authority.slice(0, at + 1)}${addr}${path}`;
}

const addrOf = (url) => {
  const rest = url.includes("://") ? url.split(/:\/\/(.*)/s)[1] : url;
  const authority = rest.split("/")[0];
  return authority.slice(authority.lastIndexOf("@") + 1);
};

// One connection to the queue's primary that outlives failovers: call(op)
// runs op(con, tries) and, when the server refuses it for a failover or the
// connection is lost, finds the primary again and reruns it, for at most
// --reconnect-secs without a success. The client itself never reconnects or
// queues commands: this does, on the primary of now.
const links = new Set(); // every Link, closed when the worker gives up

class Link {
  constructor(cfg, who) {
    links.add(this);
    this.who = who;
    this.seeds = cfg.urls;
    this.current = cfg.urls[0];
    this.patienceMs = cfg.reconnectMs;
    this.con = null;
  }

  static async open(url) {
    const con = new Client(url, {
      lazyConnect: true,
      retryStrategy: () => null,
      maxRetriesPerRequest: 0,
      enableOfflineQueue: false,
      connectTimeout: 2000,
      // A command may wait out a failover's pause; a dead peer must not hang us.
      commandTimeout: 10000,
    });
    con.on("error", () => {}); // each failure surfaces through its command
    try {
      await con.connect();
    } catch (e) {
      con.disconnect();
      throw e;
    }
    return con;
  }

  close() {
    if (this.con) this.con.disconnect();
    this.con = null;
  }

  async call(op) {
    let outage = null, backoff = BACKOFF_FIRST_MS, tries = 0;
    for (;;) {
      try {
        if (!this.con) this.con = await Link.open(this.current);
        const value = await op(this.con, tries);
        if (tries) console.error(`worker ${this.who}: going on with ${this.current}`);
        return value;
      } catch (e) {
        const what = trouble(e);
        if (!what) throw e;
        outage ??= Date.now();
        if (Date.now() - outage >= this.patienceMs) {
          throw new Error(`no primary for ${this.patienceMs / 1000}s (--reconnect-secs) on ` +
                          `${this.seeds.join(",")}: ${e.message}`);
        }
        if (!tries) console.error(`worker ${this.who}: ${e.message} (on ${this.current}): retrying`);
        this.close();
        tries++;
        if (what[0] === "moved") {
          this.current = urlWithAddr(this.current, what[1]);
        } else {
          await sleep(backoff);
          backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
          await this.findPrimary();
        }
      }
    }
  }

  // Points current at the first address whose ROLE is master: the current
  // one, the primary a replica names, then the seeds; else keeps it (a
  // cluster replica redirects with MOVED).
  async findPrimary() {
    const candidates = [this.current, ...this.seeds];
    for (let i = 0; i < candidates.length && i < 16; i++) {
      const url = candidates[i];
      let con, role;
      try {
        con = await Link.open(url);
        role = await con.call("ROLE");
      } catch {
        if (con) con.disconnect();
        continue;
      }
      if (role[0] === "master") {
        this.current = url;
        this.con = con;
        return;
      }
      con.disconnect();
      if (role[0] === "slave" && role.length > 2) {
        const primary = urlWithAddr(url, `${role[1]}:${role[2]}`);
        if (candidates.every((c) => addrOf(c) !== addrOf(primary))) candidates.splice(i + 1, 0, primary);
      }
    }
  }
}

// Why a stream worker cannot use pending, and what to run.
const wrongLayout = (pending, kind) =>
  `${pending} is a ${kind}, not a stream (XGROUP CREATE: WRONGTYPE): the stream workers ` +
  `need a stream with the group; a list is left by --layout list workers, or by a ` +
  `promotion (ECHO.PROMOTE or echomq.auto-promote) into ${pending} before any stream ` +
  `worker created it. Run the worker with --fresh to start the queue afresh (it ` +
  `deletes the queue's keys), or DEL ${pending} to drop only what it holds`;

// The replies of a MULTI/EXEC, failing on the first error.
async function transaction(multi) {
  const replies = await multi.exec();
  if (!replies) throw new Error("transaction aborted");
  return replies.map(([e, r]) => { if (e) throw e; return r; });
}

// [id, job] of each entry of a stream reply's entry array; entries whose data
// is gone have no job.
function entriesOf(list) {
  return (list || []).filter(Boolean).map(([id, fields]) => {
    let job = null;
    for (let i = 0; fields && i + 1 < fields.length; i += 2) {
      if (fields[i] === "job") job = fields[i + 1];
    }
    return [id, job];
  });
}

async function main() {
  const cfg = config();
  const k = keys(cfg.queue);
  const link = new Link(cfg, cfg.name);
  const state = { stop: false, completed: 0, retried: 0, dead: 0, held: 0, takenOver: 0, error: null };

  if (cfg.fresh) {
    await link.call((db) => db.del(k.pending, k.schedule, k.attempts, k.done, k.doneBy, k.dead));
  }
  if (cfg.layout === "stream") {
    // The protocol's step 1: the group, before any entry; a group that exists
    // already is fine, a list there is explained.
    const kind = await link.call(async (db) => {
      try {
        // At 0, not $: entries a producer added before the group existed
        // are delivered too.
        await db.xgroup("CREATE", k.pending, cfg.group, "0", "MKSTREAM");
      } catch (e) {
        const msg = String(e.message);
        if (msg.includes("BUSYGROUP")) return null;
        if (msg.startsWith("WRONGTYPE")) return db.type(k.pending);
        throw e;
      }
      return null;
    });
    if (kind !== null) throw new Error(wrongLayout(k.pending, kind));
  }
  if (cfg.seed && cfg.jobs > 0 && cfg.seedDelayMs > 0) {
    const jobs = Array.from({ length: cfg.jobs }, (_, i) => `job-${i}`);
    // A delayed first run: ECHO.SCHEDULE (not a failure, not a retry), all or
    // nothing, so a retry after a refusal cannot seed twice.
    const fireAt = (await link.call((db) => {
      const multi = db.multi();
      for (const job of jobs) multi.call("ECHO.SCHEDULE", k.schedule, job, cfg.seedDelayMs);
      return transaction(multi);
    })).map(Number);
    console.log(`worker ${cfg.name}: scheduled job-0 .. job-${cfg.jobs - 1} with ECHO.SCHEDULE, ` +
                `due at ${Math.min(...fireAt)} .. ${Math.max(...fireAt)} (server ms)`);
  } else if (cfg.seed && cfg.jobs > 0) {
    const jobs = Array.from({ length: cfg.jobs }, (_, i) => `job-${i}`);
    // All or nothing, so a retry after a refusal cannot seed twice.
    await link.call((db) => {
      const multi = db.multi();
      if (cfg.layout === "stream") for (const job of jobs) multi.xadd(k.pending, "*", "job", job);
      else multi.lpush(k.pending, ...jobs);
      return transaction(multi);
    });
  }

  // Runs `job` for its attempt-th take: "done", "failed", or "overloaded"
  // (every --overload-every-th attempt: retry after --retry-after-ms).
  async function work(job, attempt) {
    if (cfg.crashOn && job === cfg.crashOn) {
      console.error(`worker ${cfg.name}: ${job} kills its worker: aborting`);
      process.abort();
    }
    if (cfg.workMs > 0) await sleep(cfg.workMs);
    if (cfg.overloadEvery > 0 && attempt % cfg.overloadEvery === 0) return "overloaded";
    return attempt > failures(job, cfg.failFirst) ? "done" : "failed";
  }

  // ECHO.HOLD schedule ms: nothing leaves the schedule, for any worker, before
  // the server's now + ms (a longer hold in force is kept).
  async function hold(con) {
    await con.call((db) => db.call("ECHO.HOLD", k.schedule, cfg.retryAfterMs));
    state.held++;
  }

  // ECHO.RETRY: the server draws the jittered delay and schedules the retry in
  // one step (the reply is the fire time), or, at the last attempt, moves the
  // job to the dead set (-1).
  const retryArgs = (job, attempt) =>
    ["ECHO.RETRY", k.schedule, job, cfg.policy, attempt, "MAXATTEMPTS", cfg.maxAttempts, "DEAD", k.dead];
  const countRetry = (fireAtMs) => { if (Number(fireAtMs) === -1) state.dead++; else state.retried++; };

  // The list layout: a blocking pop holds its connection, so each consumer has its own.
  async function consumeList(consumer) {
    const con = new Link(cfg, consumer);
    try {
      while (!state.stop) {
        // A short timeout so the loop sees `stop`; the pop blocks in the server.
        const popped = await con.call((db) => db.brpop(k.pending, BLOCK_MS / 1000));
        if (!popped) continue;
        const job = popped[1];
        const attempt = await con.call((db) => db.hincrby(k.attempts, job, 1));
        const outcome = await work(job, attempt);
        if (outcome === "overloaded") await hold(con);
        if (outcome !== "done") {
          countRetry(await con.call((db) => db.call(...retryArgs(job, attempt))));
        } else {
          await con.call((db) => transaction(db.multi().sadd(k.done, job).hincrby(k.doneBy, cfg.name, 1)));
          state.completed++;
        }
      }
    } finally {
      con.close();
    }
  }

  // The stream layout: the protocol's steps 2 to 6, for one consumer.
  async function consumeStream(consumer) {
    const con = new Link(cfg, consumer);

    async function runEntry(id, job, takenOver) {
      // One line per entry taken (stdout to a pipe is synchronous on Linux).
      if (cfg.logTakes && job !== null) process.stdout.write(`took ${id} ${job}\n`);
      if (job === null) { // its data is gone: only acknowledge it
        await con.call((db) => db.xack(k.pending, cfg.group, id));
        return;
      }
      const attempt = await con.call((db) => db.hincrby(k.attempts, job, 1));
      let outcome;
      if (takenOver && (await con.call((db) => pendingRow(db, id))).deliveries > cfg.maxDeliveries) {
        outcome = "failed"; // the poison bound: failed without being run again
      } else {
        outcome = await work(job, attempt);
      }
      // Held first, so the retry below is not released before the wait.
      if (outcome === "overloaded") await hold(con);
      const ok = outcome === "done";
      const replies = await con.call(async (db, tries) => {
        // After a failure (a failover refused the step, or the connection
        // went away with it), the step is written only while the entry is
        // still this consumer's: acknowledged means the step went through
        // before the reply was lost; another owner took it over and settles it.
        if (tries && (await pendingRow(db, id)).consumer !== consumer) return null;
        // The outcome and the acknowledgement are one step: the job is never
        // both scheduled and pending, nor neither.
        const multi = db.multi();
        if (ok) multi.sadd(k.done, job).hincrby(k.doneBy, cfg.name, 1);
        else multi.call(...retryArgs(job, attempt));
        multi.xack(k.pending, cfg.group, id).xdel(k.pending, id);
        return transaction(multi);
      });
      if (replies === null) {
        console.error(`worker ${consumer}: ${job} (${id}) was settled elsewhere meanwhile: ` +
                      "its outcome here is dropped");
      } else if (ok) state.completed++;
      else countRetry(replies[0]);
    }

    // How many times the group has delivered entry `id`, and to whom (XPENDING).
    async function pendingRow(db, id) {
      const rows = await db.xpending(k.pending, cfg.group, id, id, 1);
      return rows.length ? { consumer: rows[0][1], deliveries: Number(rows[0][3]) }
        : { consumer: null, deliveries: 0 };
    }

    // XAUTOCLAIM: entries idle longer than the lease change owner to this
    // consumer atomically, so two consumers never take over the same one.
    async function takeOver() {
      let cursor = "0-0";
      while (!state.stop) {
        const [next, claimed] = await con.call((db) => db.call(
          "XAUTOCLAIM", k.pending, cfg.group, consumer, cfg.leaseMs, cursor, "COUNT", BATCH));
        for (const [id, job] of entriesOf(claimed)) {
          state.takenOver++;
          await runEntry(id, job, true);
        }
        cursor = next;
        if (cursor === "0-0") return;
      }
    }

    try {
      let nextClaim = 0; // take over at once what a dead worker left
      while (!state.stop) {
        if (Date.now() >= nextClaim) {
          await takeOver();
          nextClaim = Date.now() + cfg.leaseMs / 2;
        }
        // A read whose reply a failover lost leaves its entry delivered to
        // this consumer: the lease brings it back (takeOver).
        const read = await con.call((db) => db.xreadgroup(
          "GROUP", cfg.group, consumer, "COUNT", BATCH, "BLOCK", BLOCK_MS, "STREAMS", k.pending, ">"));
        for (const [, list] of read || []) {
          for (const [id, job] of entriesOf(list)) await runEntry(id, job, false);
        }
      }
    } finally {
      con.close();
    }
  }

  async function promote() {
    const con = new Link(cfg, `${cfg.name}-promoter`);
    try {
      while (!state.stop) {
        const moved = await con.call((db) => db.call("ECHO.PROMOTE", k.schedule, k.pending, "LIMIT", PROMOTE_LIMIT));
        if (moved === PROMOTE_LIMIT) continue; // more may be due already
        const [next, time] = await con.call(async (db) => {
          const [[e1, next], [e2, time]] = await db.pipeline().zrange(k.schedule, 0, 0, "WITHSCORES").time().exec();
          if (e1 || e2) throw e1 || e2;
          return [next, time];
        });
        const nowMs = Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000);
        // Sleep by the server's clock, but never past the cap.
        const dueInMs = next.length ? Number(next[1]) - nowMs : PROMOTER_CAP_MS;
        const wait = dueInMs <= 0 ? PROMOTER_HELD_MS : Math.min(dueInMs, PROMOTER_CAP_MS);
        await sleep(wait);
      }
    } finally {
      con.close();
    }
  }

  // How many distinct jobs are done and how many dead, in one round trip.
  function finished() {
    return link.call(async (db) => {
      const [[e1, done], [e2, dead]] = await db.pipeline().scard(k.done).zcard(k.dead).exec();
      if (e1 || e2) throw e1 || e2;
      return [Number(done), Number(dead)];
    });
  }

  const guarded = (fn) => fn().catch((e) => { state.error ??= e; state.stop = true; });
  const consumers = Array.from({ length: cfg.consumers }, (_, i) =>
    guarded(() => (cfg.layout === "stream" ? consumeStream : consumeList)(`${cfg.name}-${i}`)));
  const tasks = cfg.promoter ? [...consumers, guarded(promote)] : consumers;

  const started = Date.now();
  let allDone = false;
  // Every worker sharing the queue stops once each job is done or dead.
  while (Date.now() - started < cfg.deadlineMs && !state.stop) {
    let counts;
    try {
      counts = await finished();
    } catch (e) {
      state.error ??= e;
      break;
    }
    if (counts[0] + counts[1] >= cfg.jobs) {
      allDone = true;
      break;
    }
    await sleep(20);
  }
  state.stop = true;
  await Promise.all(tasks);
  if (state.error) {
    console.error(`worker ${cfg.name}: ${state.error.message || state.error}`);
    link.close();
    return 1;
  }
  const [done, dead] = await finished();
  link.close();
  const secs = ((Date.now() - started) / 1000).toFixed(2);
  console.log(`worker ${cfg.name}: completed ${state.completed} here, retried ${state.retried} here, ` +
              `dead-lettered ${state.dead} here, held ${state.held} here, took over ${state.takenOver} here; ` +
              `${done}/${cfg.jobs} done and ${dead} dead on queue '${cfg.queue}' after ${secs}s`);
  if (!allDone) {
    console.error(`worker ${cfg.name}: deadline of ${cfg.deadlineMs / 1000}s reached with ` +
                  `${done}/${cfg.jobs} done and ${dead} dead`);
    return 2;
  }
  return 0;
}

main().then(
  (code) => { process.exitCode = code; },
  (e) => {
    console.error(`worker: ${e && e.message || e}`);
    process.exitCode = 1;
    for (const l of links) l.close(); // nothing may keep the process alive
  },
);

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
// Same keys and options as examples/worker.rs and examples/worker.py, so
// workers in all three languages can share one queue:
//
//     npm install iovalkey
//     node examples/worker.mjs --url redis://127.0.0.1:6379/ --queue orders --jobs 100 --seed
//
// Options (each also read from the environment variable in brackets):
//   --url URL            [ECHOMQ_URL]  default redis://127.0.0.1:6379/
//   --queue NAME         [ECHOMQ_QUEUE] default jobs; keys {NAME}:pending,
//                        {NAME}:schedule, {NAME}:attempts, {NAME}:done (a set),
//                        {NAME}:done-by, {NAME}:dead
//   --layout L           [ECHOMQ_LAYOUT] stream (default) or list
//   --group NAME         [ECHOMQ_GROUP] default workers: the consumer group
//   --lease-ms MS        [ECHOMQ_LEASE_MS] default 30000: take over entries idle that long
//   --max-deliveries K   [ECHOMQ_MAX_DELIVERIES] default 3: fail, unrun, an entry
//                        taken over after K deliveries
//   --jobs N             [ECHOMQ_JOBS] default 100: stop once N distinct jobs are done or dead
//   --seed               first add job-0 .. job-(N-1) to {NAME}:pending
//   --fail-first K       [ECHOMQ_FAIL_FIRST] default 2: job-<i> fails its first
//                        i % (K + 1) attempts, then succeeds
//   --policy P           [ECHOMQ_POLICY] default jitter:exponential:50:2000
//   --max-attempts M     [ECHOMQ_MAX_ATTEMPTS] default 5: a job's M-th failure
//                        sends it to {NAME}:dead instead of scheduling it again
//   --work-ms MS         [ECHOMQ_WORK_MS] default 0: simulated work per job
//   --crash-on JOB       [ECHOMQ_CRASH_ON] the process aborts when it takes that job
//   --consumers C        [ECHOMQ_CONSUMERS] default 4 (each its own connection),
//                        consumers <name>-<i>
//   --deadline-secs S    [ECHOMQ_DEADLINE_SECS] default 60: give up (exit 2)
//   --name NAME          [ECHOMQ_WORKER_NAME] default node-<pid>
//   --no-promoter        [ECHOMQ_NO_PROMOTER=1] run no promoter and rely on the
//                        server promoting the queue itself; the server must list
//                        the pair in echomq.auto-promote
//
// Exit status: 0 when every job is done or dead, 2 at the deadline, 1 on an error.

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
const PROMOTE_LIMIT = 1000;
// One entry per read or claim: an entry's idle time (what the lease is
// measured against) runs from its delivery, so entries waiting in a worker's
// own batch would age there; and a claimed batch would share the fate of a job
// that kills its worker.
const BATCH = 1;
const BLOCK_MS = 200;

function config() {
  const env = (name, dflt) => process.env[name] ?? dflt;
  const { values } = parseArgs({
    options: {
      url: { type: "string", default: env("ECHOMQ_URL", "redis://127.0.0.1:6379/") },
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
      "crash-on": { type: "string", default: env("ECHOMQ_CRASH_ON", "") },
      consumers: { type: "string", default: env("ECHOMQ_CONSUMERS", "4") },
      "deadline-secs": { type: "string", default: env("ECHOMQ_DEADLINE_SECS", "60") },
      name: { type: "string", default: env("ECHOMQ_WORKER_NAME", `node-${process.pid}`) },
      "no-promoter": { type: "boolean", default: env("ECHOMQ_NO_PROMOTER", "") === "1" },
      help: { type: "boolean", short: "h", default: false },
    },
    strict: true,
  });
  if (values.help) {
    console.log("see the comment at the top of examples/worker.mjs");
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
  return {
    url: values.url,
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
    crashOn: values["crash-on"],
    consumers: Math.max(1, number("consumers")),
    deadlineMs: number("deadline-secs") * 1000,
    name: values.name,
    promoter: !values["no-promoter"],
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

// Like the Rust and Python workers, give up on a server that is gone: a few
// reconnection attempts (ioredis would retry forever), then the pending
// commands fail and the worker reports the error and exits 1. The client's
// 'error' events repeat at each attempt: only the last is kept, to say why.
let connectionError = null;
const connect = (url) => {
  const con = new Client(url, {
    maxRetriesPerRequest: 1,
    retryStrategy: (times) => (times > 3 ? null : 100 * times),
  });
  con.on("error", (e) => { connectionError = e; });
  return con;
};
const why = (e) => `${e && e.message || e}${connectionError ? ` (${connectionError.message})` : ""}`;

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
  const db = connect(cfg.url);
  const state = { stop: false, completed: 0, retried: 0, dead: 0, takenOver: 0, error: null };

  if (cfg.layout === "stream") {
    try { // the protocol's step 1: the group, before any entry
      await db.xgroup("CREATE", k.pending, cfg.group, "$", "MKSTREAM");
    } catch (e) {
      if (!String(e.message).includes("BUSYGROUP")) throw e;
    }
  }
  if (cfg.seed && cfg.jobs > 0) {
    const jobs = Array.from({ length: cfg.jobs }, (_, i) => `job-${i}`);
    if (cfg.layout === "stream") {
      const p = db.pipeline();
      for (const job of jobs) p.xadd(k.pending, "*", "job", job);
      await p.exec();
    } else {
      await db.lpush(k.pending, ...jobs);
    }
  }

  // Runs `job` for its attempt-th take: true when it succeeded.
  async function work(job, attempt) {
    if (cfg.crashOn && job === cfg.crashOn) {
      console.error(`worker ${cfg.name}: ${job} kills its worker: aborting`);
      process.abort();
    }
    if (cfg.workMs > 0) await sleep(cfg.workMs);
    return attempt > failures(job, cfg.failFirst);
  }

  // ECHO.RETRY: the server draws the jittered delay and schedules the retry in
  // one step (the reply is the fire time), or, at the last attempt, moves the
  // job to the dead set (-1).
  const retryArgs = (job, attempt) =>
    ["ECHO.RETRY", k.schedule, job, cfg.policy, attempt, "MAXATTEMPTS", cfg.maxAttempts, "DEAD", k.dead];
  const countRetry = (fireAtMs) => { if (Number(fireAtMs) === -1) state.dead++; else state.retried++; };

  // The list layout: a blocking pop holds its connection, so each consumer has its own.
  async function consumeList() {
    const con = connect(cfg.url);
    try {
      while (!state.stop) {
        // A short timeout so the loop sees `stop`; the pop blocks in the server.
        const popped = await con.brpop(k.pending, BLOCK_MS / 1000);
        if (!popped) continue;
        const job = popped[1];
        const attempt = await con.hincrby(k.attempts, job, 1);
        if (!(await work(job, attempt))) {
          countRetry(await con.call(...retryArgs(job, attempt)));
        } else {
          await transaction(con.multi().sadd(k.done, job).hincrby(k.doneBy, cfg.name, 1));
          state.completed++;
        }
      }
    } finally {
      con.disconnect();
    }
  }

  // The stream layout: the protocol's steps 2 to 6, for one consumer.
  async function consumeStream(consumer) {
    const con = connect(cfg.url);

    async function runEntry(id, job, takenOver) {
      if (job === null) { // its data is gone: only acknowledge it
        await con.xack(k.pending, cfg.group, id);
        return;
      }
      const attempt = await con.hincrby(k.attempts, job, 1);
      let ok;
      if (takenOver && (await deliveries(id)) > cfg.maxDeliveries) {
        ok = false; // the poison bound: failed without being run again
      } else {
        ok = await work(job, attempt);
      }
      // The outcome and the acknowledgement are one step: the job is never
      // both scheduled and pending, nor neither.
      const multi = con.multi();
      if (ok) multi.sadd(k.done, job).hincrby(k.doneBy, cfg.name, 1);
      else multi.call(...retryArgs(job, attempt));
      multi.xack(k.pending, cfg.group, id).xdel(k.pending, id);
      const replies = await transaction(multi);
      if (ok) state.completed++;
      else countRetry(replies[0]);
    }

    // How many times the group has delivered entry `id` (XPENDING).
    async function deliveries(id) {
      const rows = await con.xpending(k.pending, cfg.group, id, id, 1);
      return rows.length ? Number(rows[0][3]) : 0;
    }

    // XAUTOCLAIM: entries idle longer than the lease change owner to this
    // consumer atomically, so two consumers never take over the same one.
    async function takeOver() {
      let cursor = "0-0";
      while (!state.stop) {
        const [next, claimed] = await con.call(
          "XAUTOCLAIM", k.pending, cfg.group, consumer, cfg.leaseMs, cursor, "COUNT", BATCH);
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
        const read = await con.xreadgroup(
          "GROUP", cfg.group, consumer, "COUNT", BATCH, "BLOCK", BLOCK_MS, "STREAMS", k.pending, ">");
        for (const [, list] of read || []) {
          for (const [id, job] of entriesOf(list)) await runEntry(id, job, false);
        }
      }
    } finally {
      con.disconnect();
    }
  }

  async function promote() {
    const con = connect(cfg.url);
    try {
      while (!state.stop) {
        const moved = await con.call("ECHO.PROMOTE", k.schedule, k.pending, "LIMIT", PROMOTE_LIMIT);
        if (moved === PROMOTE_LIMIT) continue; // more may be due already
        const [[e1, next], [e2, time]] = await con.pipeline().zrange(k.schedule, 0, 0, "WITHSCORES").time().exec();
        if (e1 || e2) throw e1 || e2;
        const nowMs = Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000);
        // Sleep by the server's clock, but never past the cap.
        const wait = next.length ? Math.min(Math.max(Number(next[1]) - nowMs, 0), PROMOTER_CAP_MS) : PROMOTER_CAP_MS;
        await sleep(wait);
      }
    } finally {
      con.disconnect();
    }
  }

  // How many distinct jobs are done and how many dead, in one round trip.
  async function finished() {
    const [[e1, done], [e2, dead]] = await db.pipeline().scard(k.done).zcard(k.dead).exec();
    if (e1 || e2) throw e1 || e2;
    return [Number(done), Number(dead)];
  }

  const guarded = (fn) => fn().catch((e) => { state.error ??= e; state.stop = true; });
  const consumers = Array.from({ length: cfg.consumers }, (_, i) =>
    guarded(() => (cfg.layout === "stream" ? consumeStream(`${cfg.name}-${i}`) : consumeList())));
  const tasks = cfg.promoter ? [...consumers, guarded(promote)] : consumers;

  const started = Date.now();
  let allDone = false;
  // Every worker sharing the queue stops once each job is done or dead.
  while (Date.now() - started < cfg.deadlineMs && !state.stop) {
    const [done, dead] = await finished();
    if (done + dead >= cfg.jobs) {
      allDone = true;
      break;
    }
    await sleep(20);
  }
  state.stop = true;
  await Promise.all(tasks);
  if (state.error) {
    console.error(`worker ${cfg.name}: ${why(state.error)}`);
    db.disconnect();
    return 1;
  }
  const [done, dead] = await finished();
  db.disconnect();
  const secs = ((Date.now() - started) / 1000).toFixed(2);
  console.log(`worker ${cfg.name}: completed ${state.completed} here, retried ${state.retried} here, ` +
              `dead-lettered ${state.dead} here, took over ${state.takenOver} here; ` +
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
  (e) => { console.error(`worker: ${why(e)}`); process.exitCode = 1; },
);

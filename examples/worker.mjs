#!/usr/bin/env node
// A job worker on echomq, in Node.js (20 or later) with the `iovalkey` client
// (or `ioredis`, the same API).
//
// Consumers take jobs from a pending list with a blocking pop, fail some of
// them (deterministically), retry those with ECHO.RETRY under a jittered
// policy, and one promoter moves due retries back to the pending list with
// ECHO.PROMOTE. Same keys and options as examples/worker.rs and
// examples/worker.py, so workers in all three languages can share one queue:
//
//     npm install iovalkey
//     node examples/worker.mjs --url redis://127.0.0.1:6379/ --queue orders --jobs 100 --seed
//
// Options (each also read from the environment variable in brackets):
//   --url URL            [ECHOMQ_URL]  default redis://127.0.0.1:6379/
//   --queue NAME         [ECHOMQ_QUEUE] default jobs; keys {NAME}:pending,
//                        {NAME}:schedule, {NAME}:attempts, {NAME}:done, {NAME}:done-by
//   --jobs N             [ECHOMQ_JOBS] default 100: stop once {NAME}:done holds N jobs
//   --seed               first push job-0 .. job-(N-1) onto the pending list
//   --fail-first K       [ECHOMQ_FAIL_FIRST] default 2: job-<i> fails its first
//                        i % (K + 1) attempts, then succeeds
//   --policy P           [ECHOMQ_POLICY] default jitter:exponential:50:2000
//   --consumers C        [ECHOMQ_CONSUMERS] default 4 (each its own connection)
//   --deadline-secs S    [ECHOMQ_DEADLINE_SECS] default 60: give up (exit 2)
//   --name NAME          [ECHOMQ_WORKER_NAME] default node-<pid>
//
// Exit status: 0 when every job is done, 2 at the deadline, 1 on an error.

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

function config() {
  const env = (name, dflt) => process.env[name] ?? dflt;
  const { values } = parseArgs({
    options: {
      url: { type: "string", default: env("ECHOMQ_URL", "redis://127.0.0.1:6379/") },
      queue: { type: "string", default: env("ECHOMQ_QUEUE", "jobs") },
      jobs: { type: "string", default: env("ECHOMQ_JOBS", "100") },
      seed: { type: "boolean", default: false },
      "fail-first": { type: "string", default: env("ECHOMQ_FAIL_FIRST", "2") },
      policy: { type: "string", default: env("ECHOMQ_POLICY", "jitter:exponential:50:2000") },
      consumers: { type: "string", default: env("ECHOMQ_CONSUMERS", "4") },
      "deadline-secs": { type: "string", default: env("ECHOMQ_DEADLINE_SECS", "60") },
      name: { type: "string", default: env("ECHOMQ_WORKER_NAME", `node-${process.pid}`) },
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
    return v;
  };
  return {
    url: values.url,
    queue: values.queue,
    jobs: Math.floor(number("jobs")),
    seed: values.seed,
    failFirst: Math.floor(number("fail-first")),
    policy: values.policy,
    consumers: Math.max(1, Math.floor(number("consumers"))),
    deadlineMs: number("deadline-secs") * 1000,
    name: values.name,
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

async function main() {
  const cfg = config();
  const k = keys(cfg.queue);
  const db = connect(cfg.url);
  const state = { stop: false, completed: 0, retried: 0, error: null };

  if (cfg.seed && cfg.jobs > 0) {
    await db.lpush(k.pending, ...Array.from({ length: cfg.jobs }, (_, i) => `job-${i}`));
  }

  // A blocking pop holds its connection, so each consumer has its own.
  async function consume() {
    const con = connect(cfg.url);
    try {
      while (!state.stop) {
        // A short timeout so the loop sees `stop`; the pop blocks in the server.
        const popped = await con.brpop(k.pending, 0.2);
        if (!popped) continue;
        const job = popped[1];
        const attempt = await con.hincrby(k.attempts, job, 1);
        if (attempt <= failures(job, cfg.failFirst)) {
          // The job failed: the server draws the jittered delay and schedules
          // the retry in one step; the reply is the fire time.
          await con.call("ECHO.RETRY", k.schedule, job, cfg.policy, attempt);
          state.retried++;
        } else {
          await con.multi().rpush(k.done, job).hincrby(k.doneBy, cfg.name, 1).exec();
          state.completed++;
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

  const guarded = (fn) => fn().catch((e) => { state.error ??= e; state.stop = true; });
  const tasks = [...Array.from({ length: cfg.consumers }, () => guarded(consume)), guarded(promote)];

  const started = Date.now();
  let allDone = false;
  // Every worker sharing the queue stops once the done list is complete.
  while (Date.now() - started < cfg.deadlineMs && !state.stop) {
    if ((await db.llen(k.done)) >= cfg.jobs) {
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
  const done = await db.llen(k.done);
  db.disconnect();
  const secs = ((Date.now() - started) / 1000).toFixed(2);
  console.log(`worker ${cfg.name}: completed ${state.completed} here, retried ${state.retried} here; ` +
              `${done}/${cfg.jobs} done on queue '${cfg.queue}' after ${secs}s`);
  if (!allDone) {
    console.error(`worker ${cfg.name}: deadline of ${cfg.deadlineMs / 1000}s reached with ${done}/${cfg.jobs} done`);
    return 2;
  }
  return 0;
}

main().then(
  (code) => { process.exitCode = code; },
  (e) => { console.error(`worker: ${why(e)}`); process.exitCode = 1; },
);

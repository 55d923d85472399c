// BullMQ's Worker with its limiter against the herd's dependency, for the
// `herd_first` section of make bench (scripts/bench/herd_first.py says how
// the section measures). Run from target/bench-node, where the clients
// section installs package.json's packages.
//
//   node bullmq_herd.mjs --url redis://127.0.0.1:PORT/ --queue NAME --jobs N
//        [--concurrency 8] [--rate 500] [--burst 50] [--max-attempts 50]
//
// Prints {"event":"ready"} once connected and the Worker is ready (limiter
// {max: rate, duration: 1000}, concurrency --concurrency); on the line `go`
// adds N jobs with queue.addBulk in chunks of 1,000 (attempts
// --max-attempts, a custom backoff: full jitter of min(100 * 2^(a-1),
// 30000), as echomq's jitter:exponential:100:30000; removeOnComplete and
// removeOnFail), each handler calling the dependency: herd.py's model, a
// token bucket of --rate a second and --burst, up from the first add; a call
// beyond it throws ("overloaded"). Prints {"event":"done",...} when every job
// has succeeded or failed for good, then closes and exits 0.

import { parseArgs } from "node:util";
import { performance } from "node:perf_hooks";
import { createInterface } from "node:readline";
import { Queue, Worker } from "bullmq";
import IORedis from "ioredis";

const { values: o } = parseArgs({
  options: {
    url: { type: "string" },
    queue: { type: "string" },
    jobs: { type: "string" },
    concurrency: { type: "string", default: "8" },
    rate: { type: "string", default: "500" },
    burst: { type: "string", default: "50" },
    "max-attempts": { type: "string", default: "50" },
  },
});
const n = Number(o.jobs);
const rate = Number(o.rate);
const burst = Number(o.burst);
const maxAttempts = Number(o["max-attempts"]);
const url = new URL(o.url);
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const say = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");

// the dependency: a token bucket, full at t0
let t0 = 0;
let tokens = burst;
let last = 0;
let calls = 0;
let failedCalls = 0;
function callDependency() {
  const now = performance.now();
  tokens = Math.min(burst, tokens + ((now - last) / 1000) * rate);
  last = now;
  calls++;
  if (tokens >= 1) {
    tokens -= 1;
    return true;
  }
  failedCalls++;
  return false;
}

const connection = new IORedis({ host: url.hostname, port: Number(url.port), maxRetriesPerRequest: null });
const queue = new Queue(o.queue, { connection });
await queue.waitUntilReady();
let succeeded = 0;
let dead = 0;
let tLast = 0;
let allDone;
const finished = new Promise((resolve) => { allDone = resolve; });
const settle = () => { if (succeeded + dead === n) allDone(); };
const worker = new Worker(o.queue, async () => {
  if (!callDependency()) throw new Error("overloaded");
  succeeded++;
  tLast = performance.now();
  settle();
}, {
  connection,
  concurrency: Number(o.concurrency),
  limiter: { max: rate, duration: 1000 },
  settings: {
    backoffStrategy: (attemptsMade) =>
      Math.floor(Math.random() * (Math.min(100 * 2 ** (attemptsMade - 1), 30000) + 1)),
  },
});
worker.on("failed", (job) => {
  if (job && job.attemptsMade >= maxAttempts) {
    dead++;
    tLast = performance.now();
    settle();
  }
});
worker.on("error", (e) => console.error(`worker error: ${e && e.message ? e.message : e}`));
await worker.waitUntilReady();
say({ event: "ready" });

const { value } = await lines.next();
if (!value || value.trim() !== "go") throw new Error(`expected 'go' on stdin, got ${value}`);
const opts = { removeOnComplete: true, removeOnFail: true, attempts: maxAttempts, backoff: { type: "custom" } };
t0 = performance.now();
last = t0;
for (let start = 0; start < n; start += 1000) {
  const chunk = [];
  for (let i = start; i < Math.min(n, start + 1000); i++) chunk.push({ name: "job", data: { i }, opts });
  await queue.addBulk(chunk);
}
const addS = (performance.now() - t0) / 1000;
await finished;
say({
  event: "done", jobs: n, succeeded, dead, calls, failed: failedCalls, finished: true,
  seconds: (tLast - t0) / 1000, add_s: addS,
});
await worker.close();
await queue.close();
connection.disconnect();
process.exit(0);

// BullMQ's Worker, driven for the `clients` section of make bench
// (scripts/bench/clients.py says how the section measures). Run from
// target/bench-node, where the section installs package.json's packages, so
// that `import "bullmq"` resolves there.
//
//   node bullmq.mjs --url redis://127.0.0.1:PORT/ --queue NAME --jobs N
//                   [--concurrency 50] [--fail-once]
//
// Speaks the drivers' line protocol on stdin/stdout (the same in every
// driver): prints {"event":"ready"} once connected, then on the line `add`
// adds N jobs with queue.addBulk in chunks of 1,000 (payload {"i":<i>}) and
// prints {"event":"added",...}; on the line `work` starts one Worker
// (concurrency --concurrency, an empty handler; with --fail-once the first
// run of every job throws, and the job has attempts 2 and no backoff, so
// BullMQ retries it at once), and prints {"event":"done",...} when every
// job has succeeded and the queue is seen empty; then closes and exits 0.

import { parseArgs } from "node:util";
import { performance } from "node:perf_hooks";
import { createInterface } from "node:readline";
import { setTimeout as sleep } from "node:timers/promises";
import { Queue, Worker } from "bullmq";
import IORedis from "ioredis";

const { values: o } = parseArgs({
  options: {
    url: { type: "string" },
    queue: { type: "string" },
    jobs: { type: "string" },
    concurrency: { type: "string", default: "50" },
    "fail-once": { type: "boolean", default: false },
  },
});
const n = Number(o.jobs);
const concurrency = Number(o.concurrency);
const failOnce = o["fail-once"];
const url = new URL(o.url);
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const say = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");
async function expect(word) {
  const { value, done } = await lines.next();
  if (done || value.trim() !== word) throw new Error(`expected '${word}' on stdin, got ${done ? "EOF" : value}`);
}

// ESM code must hand BullMQ a client instance (it cannot load ioredis itself
// there); the Worker duplicates it for its own and its blocking connection.
const connection = new IORedis({ host: url.hostname, port: Number(url.port), maxRetriesPerRequest: null });
const queue = new Queue(o.queue, { connection });
await queue.waitUntilReady();
say({ event: "ready" });

await expect("add");
const opts = { removeOnComplete: true, removeOnFail: true, attempts: failOnce ? 2 : 1 };
let t0 = performance.now();
for (let start = 0; start < n; start += 1000) {
  const chunk = [];
  for (let i = start; i < Math.min(n, start + 1000); i++) chunk.push({ name: "job", data: { i }, opts });
  await queue.addBulk(chunk);
}
say({ event: "added", jobs: n, seconds: (performance.now() - t0) / 1000 });

await expect("work");
const seen = new Set();
let succeeded = 0;
let failed = 0;
let runs = 0;
let tFirst = null;
let allDone;
const finished = new Promise((resolve) => { allDone = resolve; });
t0 = performance.now();
const worker = new Worker(o.queue, async (job) => {
  runs++;
  if (failOnce && !seen.has(job.id)) {
    seen.add(job.id);
    failed++;
    throw new Error("fails once");
  }
  succeeded++;
  if (tFirst === null) tFirst = performance.now();
  if (succeeded === n) allDone();
}, { connection, concurrency, autorun: false });
worker.on("error", (e) => console.error(`worker error: ${e && e.message ? e.message : e}`));
const running = worker.run();
await finished;
// The last handler has returned; its outcome is written once the queue holds nothing.
for (;;) {
  const c = await queue.getJobCounts("wait", "active", "delayed", "prioritized", "waiting-children", "paused");
  if (Object.values(c).every((v) => v === 0)) break;
  await sleep(1);
}
const tLast = performance.now();
say({
  event: "done", jobs: n, succeeded, failed, runs,
  seconds: (tLast - t0) / 1000, first_to_last: (tLast - tFirst) / 1000,
});
await worker.close();
await running;
await queue.close();
connection.disconnect();
process.exit(0);

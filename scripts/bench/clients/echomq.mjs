// The echomq Node.js worker (clients/node), driven for the `clients` section
// of make bench (scripts/bench/clients.py says how the section measures).
// The library is imported from the checkout's clients/node (--client), with
// the iovalkey installed there.
//
//   node echomq.mjs --client DIR --url redis://127.0.0.1:PORT/ --queue NAME --jobs N
//                   [--concurrency 50] [--fail-once]
//
// Speaks the drivers' line protocol on stdin/stdout (the same in every
// driver): prints {"event":"ready"} once connected, then on the line `add`
// adds N jobs with one queue.addMany (payload {"i":<i>}) and prints
// {"event":"added",...}; on the line `work` starts one Worker (concurrency
// --concurrency, an empty handler; with --fail-once the first run of every
// job throws, retried under backoff fixed:0 with maxAttempts 2), and prints
// {"event":"done",...} when every job has succeeded and the queue is seen
// empty; then closes and exits 0.

import { parseArgs } from "node:util";
import { performance } from "node:perf_hooks";
import { createInterface } from "node:readline";
import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { setTimeout as sleep } from "node:timers/promises";

const { values: o } = parseArgs({
  options: {
    client: { type: "string" },
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
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const say = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");
async function expect(word) {
  const { value, done } = await lines.next();
  if (done || value.trim() !== word) throw new Error(`expected '${word}' on stdin, got ${done ? "EOF" : value}`);
}

const { Queue, Worker } = await import(pathToFileURL(join(o.client, "index.js")).href);
const iovalkey = createRequire(join(o.client, "package.json")).resolve("iovalkey");
const { default: Valkey } = await import(pathToFileURL(iovalkey).href);

const connection = new Valkey(o.url);
const queue = new Queue(connection, o.queue);
await connection.ping();
say({ event: "ready" });

await expect("add");
const payloads = [];
for (let i = 0; i < n; i++) payloads.push(JSON.stringify({ i }));
let t0 = performance.now();
await queue.addMany(payloads);
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
const worker = new Worker(queue, async (job) => {
  runs++;
  if (failOnce && !seen.has(job.id)) {
    seen.add(job.id);
    failed++;
    throw new Error("fails once");
  }
  succeeded++;
  if (tFirst === null) tFirst = performance.now();
  if (succeeded === n) allDone();
}, { concurrency, backoff: "fixed:0", maxAttempts: 2 });
worker.on("error", (e) => console.error(`worker error: ${e && e.message ? e.message : e}`));
const running = worker.run();
await finished;
// The last handler has returned; its outcome is written once the queue holds nothing.
for (;;) {
  const c = await queue.counts();
  if (c.scheduled + c.due + c.pending + c.inFlight + c.dead === 0) break;
  await sleep(1);
}
const tLast = performance.now();
say({
  event: "done", jobs: n, succeeded, failed, runs,
  seconds: (tLast - t0) / 1000, first_to_last: (tLast - tFirst) / 1000,
});
await worker.close();
await running;
connection.disconnect();
process.exit(0);

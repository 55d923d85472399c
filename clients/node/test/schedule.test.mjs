// Scenarios 2 (delays by the server's clock) and 3 (concurrency).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { Queue, Worker } from "../index.js";
import { TestServer, queueName, serverTime, waitFor } from "./server.mjs";

let server;
before(async () => { server = await TestServer.start(); });
after(async () => { await server?.stop(); });

async function delayedJobWaits(autoPromote) {
  const client = server.client();
  const clock = server.client();
  const queue = new Queue(client, queueName("delay"));
  const k = queue.keys;
  await client.call("CONFIG", "SET", "echomq.auto-promote", autoPromote ? `${k.schedule} ${k.pending}` : "");
  const started = new Map();
  const worker = new Worker(queue, async (job) => { started.set(job.id, await serverTime(clock)); });
  const running = worker.run();
  await new Promise((r) => worker.once("ready", r));
  try {
    const before = await serverTime(clock);
    const id = await queue.add("later", { delayMs: 700 });
    const now = await queue.add("now");
    await waitFor(() => started.has(id) && started.has(now), "both jobs to run");
    assert.ok(started.get(id) >= before + 700,
      `the delayed job started at ${started.get(id)}, before ${before} + 700 (server ms)`);
    assert.ok(started.get(now) < started.get(id), "the job without a delay ran first");
  } finally {
    await worker.close();
    await running;
    await client.call("CONFIG", "SET", "echomq.auto-promote", "");
  }
}

test("delayMs is kept by the server's clock (the worker promotes)", () => delayedJobWaits(false));
test("delayMs is kept by the server's clock (the server promotes)", () => delayedJobWaits(true));

test("concurrency=20 runs 20 handlers at once, never 21", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("concurrency"));
  await queue.addMany(Array.from({ length: 100 }, (_, i) => `job-${i}`));
  let running = 0;
  let max = 0;
  let done = 0;
  const worker = new Worker(queue, async () => {
    running++;
    max = Math.max(max, running);
    await sleep(200);
    running--;
    done++;
  }, { concurrency: 20 });
  const run = worker.run();
  try {
    await waitFor(() => done === 100, "100 jobs to finish", 60000);
  } finally {
    await worker.close();
    await run;
  }
  assert.equal(max, 20);
  assert.deepEqual(await queue.counts(), { scheduled: 0, due: 0, pending: 0, inFlight: 0, dead: 0 });
});

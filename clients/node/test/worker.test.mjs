// The Worker's life cycle: SIGTERM while run() is active, a second run(), options.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Queue, Worker, RetryAfter } from "../index.js";
import { TestServer, queueName, waitFor } from "./server.mjs";

let server;
before(async () => { server = await TestServer.start(); });
after(async () => { await server?.stop(); });

test("SIGTERM closes a running worker; the listener is gone after run() returns", async () => {
  const queue = new Queue(server.client(), queueName("sigterm"));
  const listeners = process.listenerCount("SIGTERM");
  const ran = [];
  const worker = new Worker(queue, async (job) => { ran.push(job.id); });
  const running = worker.run();
  await new Promise((r) => worker.once("ready", r));
  assert.equal(process.listenerCount("SIGTERM"), listeners + 1);
  const id = await queue.add("x");
  await waitFor(() => ran.length === 1, "the job to run");
  await assert.rejects(worker.run(), /already running/);
  process.emit("SIGTERM", "SIGTERM");
  await running;
  assert.equal(process.listenerCount("SIGTERM"), listeners);
  assert.deepEqual(ran, [id]);
  assert.deepEqual(await queue.counts(), { scheduled: 0, due: 0, pending: 0, inFlight: 0, dead: 0 });
  // Closed, it takes nothing: the next job waits.
  await queue.add("y");
  assert.equal((await queue.counts()).pending, 1);
  await worker.close();
});

test("options are checked; RetryAfter carries its ms", () => {
  const queue = new Queue(server.client(), queueName("options"));
  assert.throws(() => new Worker(queue, async () => {}, { concurrency: 0 }), RangeError);
  assert.throws(() => new Worker(queue, async () => {}, { maxAttempts: 1.5 }), RangeError);
  assert.throws(() => new Worker(queue, "not a function"), TypeError);
  assert.throws(() => new Worker(queue, async () => {}, { backoff: "" }), TypeError);
  const w = new Worker(queue, async () => {});
  assert.deepEqual(
    [w.concurrency, w.backoff, w.maxAttempts, w.leaseMs, w.maxDeliveries, w.shutdownTimeoutMs],
    [10, "jitter:exponential:1000:3600000", 10, 30000, 3, 10000]);
  assert.match(w.consumer, /^.+-\d+-[0-9a-f]{6}$/);
  const e = new RetryAfter(1500);
  assert.ok(e instanceof Error);
  assert.equal(e.ms, 1500);
  assert.throws(() => new RetryAfter(-1), RangeError);
  assert.throws(() => new Queue(server.client(), ""), TypeError);
});

test("run() refuses a backoff policy the server refuses, in the server's words", async () => {
  const queue = new Queue(server.client(), queueName("policy"));
  const listeners = process.listenerCount("SIGTERM");
  const worker = new Worker(queue, async () => {}, { backoff: "sometimes:100" });
  await assert.rejects(worker.run(), /invalid policy/);
  assert.equal(process.listenerCount("SIGTERM"), listeners);
});

test("a handler that throws synchronously, or a non-Error, fails the job with its text", async () => {
  const queue = new Queue(server.client(), queueName("sync-throw"));
  const worker = new Worker(queue, (job) => {
    if (job.payload.toString() === "sync") throw new Error("thrown at once");
    return Promise.reject("a plain string"); // eslint-disable-line prefer-promise-reject-errors
  }, { maxAttempts: 1 });
  const running = worker.run();
  try {
    await queue.add("sync", { id: "sync" });
    await queue.add("string", { id: "string" });
    await waitFor(async () => (await queue.counts()).dead === 2, "two dead jobs");
  } finally {
    await worker.close();
    await running;
  }
  const errors = Object.fromEntries((await queue.dead(0, 10)).map((r) => [r.id, r.error]));
  assert.deepEqual(errors, { sync: "thrown at once", string: "a plain string" });
});

test("entries read during a hold wait for its end; lifted, they run; closed meanwhile, they are given back", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("held"));
  const k = queue.keys;
  const ran = [];
  const first = await queue.add("first");
  await client.call("ECHO.HOLD", k.schedule, 600000);
  // Added while held, a job waits in the schedule, due, not in pending.
  const second = await queue.add("second");
  assert.deepEqual(await queue.counts(), { scheduled: 0, due: 1, pending: 1, inFlight: 0, dead: 0 });
  let worker = new Worker(queue, async (job) => { ran.push(job.id); });
  let running = worker.run();
  try {
    await waitFor(async () => (await queue.counts()).inFlight === 1, "the entry to be read");
  } finally {
    await worker.close();
    await running;
  }
  assert.deepEqual(ran, []);
  assert.deepEqual(await queue.counts(), { scheduled: 0, due: 1, pending: 1, inFlight: 0, dead: 0 });

  worker = new Worker(queue, async (job) => { ran.push(job.id); });
  running = worker.run();
  try {
    await waitFor(async () => (await queue.counts()).inFlight === 1, "the entry to be read again");
    assert.deepEqual(ran, []);
    await client.call("ECHO.HOLD", k.schedule, 0);
    await waitFor(() => ran.length === 2, "the jobs to run once the hold is lifted");
  } finally {
    await worker.close();
    await running;
  }
  assert.deepEqual(ran, [first, second]);
});

test("a worker whose connections are killed reconnects and runs every job", async () => {
  const client = server.client();
  const admin = server.client();
  const queue = new Queue(client, queueName("reconnect"));
  const ran = new Map();
  const errors = [];
  const worker = new Worker(queue, async (job) => { ran.set(job.id, (ran.get(job.id) || 0) + 1); },
    { concurrency: 5, leaseMs: 1000 });
  worker.on("error", (e) => errors.push(e));
  const running = worker.run();
  const ids = [];
  try {
    await new Promise((r) => worker.once("ready", r));
    ids.push(...await queue.addMany(["a", "b", "c"]));
    await waitFor(() => ran.size === 3, "the first jobs");
    // Every other client of the server, the worker's two connections among them.
    assert.ok(await admin.client("KILL", "TYPE", "normal", "SKIPME", "yes") >= 2);
    ids.push(...await queue.addMany(["d", "e", "f"]));
    await waitFor(() => ran.size === 6, "the jobs added after the kill", 30000);
  } finally {
    await worker.close();
    await running;
  }
  for (const id of ids) assert.ok(ran.get(id) >= 1);
  await waitFor(async () => (await queue.counts()).inFlight === 0, "every outcome written");
  assert.deepEqual(await queue.counts(), { scheduled: 0, due: 0, pending: 0, inFlight: 0, dead: 0 });
});

test("job.entryId is the pending entry that delivered the run, a new one for a retry", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("entry"));
  const seen = []; // [entryId, entries this worker holds in the group during the run]
  const worker = new Worker(queue, async (job) => {
    const pending = await client.xpending(queue.keys.pending, "workers", "-", "+", 10);
    seen.push([job.entryId, pending.map((p) => p[0])]);
    if (job.attempt === 1) throw new Error("once");
  }, { backoff: "fixed:0" });
  const running = worker.run();
  await queue.add("x", { id: "e1" });
  await waitFor(() => seen.length === 2, "two runs");
  await worker.close();
  await running;
  for (const [entry, pending] of seen) {
    assert.match(entry, /^\d+-\d+$/);
    assert.deepEqual(pending, [entry]);
  }
  assert.notEqual(seen[0][0], seen[1][0]);
});

// Scenarios 4 (retries, the dead set, requeue, purge) and 5 (RetryAfter holds the queue).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { Queue, Worker, RetryAfter } from "../index.js";
import { TestServer, queueName, serverTime, waitFor, traces } from "./server.mjs";

let server;
before(async () => { server = await TestServer.start(); });
after(async () => { await server?.stop(); });

const NOTHING = { jobs: 0, attempts: 0, errors: 0, schedule: null, dead: null };

async function emptyQueue(client, queue) {
  const k = queue.keys;
  assert.equal(await client.zcard(k.schedule), 0);
  assert.equal(await client.zcard(k.dead), 0);
  assert.equal(await client.xlen(k.pending), 0);
  assert.equal((await client.xpending(k.pending, "workers"))[0], 0);
}

test("a handler failing twice then succeeding is retried twice, then leaves no trace", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("retry"));
  const runs = [];
  let done = false;
  const worker = new Worker(queue, async (job) => {
    runs.push(job.attempt);
    if (job.attempt <= 2) throw new Error(`failure ${job.attempt}`);
    done = true;
  }, { backoff: "fixed:100", maxAttempts: 10 });
  const running = worker.run();
  let id;
  try {
    id = await queue.add("flaky");
    await waitFor(() => done, "the third run");
  } finally {
    await worker.close();
    await running;
  }
  assert.deepEqual(runs, [1, 2, 3]);
  assert.deepEqual(await traces(client, queue, id), NOTHING);
  await emptyQueue(client, queue);
});

test("a handler always failing ends dead after maxAttempts; requeue runs it again; purgeDead removes it", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("dead"));
  const runs = [];
  const worker = new Worker(queue, async (job) => {
    runs.push(job.attempt);
    throw new Error(`it broke on attempt ${job.attempt}`);
  }, { backoff: "fixed:50", maxAttempts: 3 });
  const running = worker.run();
  const payload = Buffer.from([0, 1, 2, 250, 255]);
  let id;
  try {
    const before = await serverTime(client);
    id = await queue.add(payload);
    await waitFor(async () => (await queue.counts()).dead === 1, "the job to die");
    assert.deepEqual(runs, [1, 2, 3]);
    const records = await queue.dead(0, 10);
    assert.equal(records.length, 1);
    const [r] = records;
    assert.equal(r.id, id);
    assert.equal(r.attempts, 3);
    assert.equal(r.error, "it broke on attempt 3");
    assert.deepEqual(r.payload, payload);
    assert.ok(r.diedAtMs >= before && r.diedAtMs <= await serverTime(client));
    assert.deepEqual(await queue.dead(1, 10), []);
    assert.deepEqual(await queue.counts(), { scheduled: 0, due: 0, pending: 0, inFlight: 0, dead: 1 });

    assert.equal(await queue.requeue(id), true);
    await waitFor(() => runs.length === 6, "three more runs");
    assert.deepEqual(runs, [1, 2, 3, 1, 2, 3]);
    await waitFor(async () => (await queue.counts()).dead === 1, "the job to die again");
  } finally {
    await worker.close();
    await running;
  }
  assert.equal(await queue.requeue("not-dead"), false);
  assert.equal(await queue.purgeDead(3600000), 0, "the job died less than an hour ago");
  assert.equal(await queue.purgeDead(0), 1);
  assert.deepEqual(await traces(client, queue, id), NOTHING);
  assert.deepEqual(await queue.dead(0, 10), []);
  await emptyQueue(client, queue);
});

test("an error text is cut to 4,096 bytes", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("long-error"));
  const worker = new Worker(queue, async () => { throw new Error("é".repeat(5000)); }, { maxAttempts: 1 });
  const running = worker.run();
  try {
    await queue.add("x");
    await waitFor(async () => (await queue.counts()).dead === 1, "the job to die");
  } finally {
    await worker.close();
    await running;
  }
  const [r] = await queue.dead(0, 1);
  assert.equal(r.attempts, 1);
  assert.equal(r.error, "é".repeat(2048));
});

test("RetryAfter(500): no job of the queue starts in any worker for 500 ms", async () => {
  const client = server.client();
  const clock = server.client();
  const queue = new Queue(client, queueName("hold"));
  const k = queue.keys;
  const starts = []; // [id, attempt, server ms at handler start]
  let triggerStart = null;
  let heldUntil = null;
  // Two workers, one slot each. Worker B first runs "sleeper", which returns only once the
  // hold is in force; worker A runs "trigger", which adds jobs to pending and to the
  // schedule, then answers RetryAfter(500).
  const handler = async (job) => {
    const at = await serverTime(clock);
    const name = job.payload.toString();
    if (name === "trigger" && job.attempt === 1) {
      triggerStart = at;
      await Promise.all([
        ...Array.from({ length: 4 }, (_, i) => queue.add(`pending-${i}`)),
        ...Array.from({ length: 3 }, (_, i) => queue.add(`scheduled-${i}`, { delayMs: 50 })),
      ]);
      throw new RetryAfter(500);
    }
    if (name === "sleeper") {
      await waitFor(async () => {
        const limits = await clock.call("ECHO.LIMITS", k.schedule);
        heldUntil = Number(limits[limits.indexOf("held-until-ms") + 1]);
        return heldUntil > 0;
      }, "the hold");
      return;
    }
    starts.push([name, job.attempt, at]);
  };
  const sleeperId = await queue.add("sleeper");
  const b = new Worker(queue, handler, { concurrency: 1, backoff: "fixed:50" });
  const runB = b.run();
  await waitFor(async () => (await queue.counts()).inFlight === 1, "the sleeper to start");
  await queue.add("trigger");
  const a = new Worker(queue, handler, { concurrency: 1, backoff: "fixed:50" });
  const runA = a.run();
  try {
    await waitFor(() => starts.length === 8, "the other jobs and the trigger's retry", 30000);
  } finally {
    await Promise.all([a.close(), b.close()]);
    await Promise.all([runA, runB]);
  }
  assert.ok(triggerStart !== null && heldUntil !== null);
  assert.ok(heldUntil >= triggerStart + 500, `held until ${heldUntil}, the trigger started at ${triggerStart}`);
  for (const [name, attempt, at] of starts) {
    assert.ok(at >= heldUntil, `${name} (attempt ${attempt}) started at ${at}, before the hold's end ${heldUntil}`);
  }
  assert.deepEqual(starts.map(([n, a]) => `${n}/${a}`).sort(), [
    "pending-0/1", "pending-1/1", "pending-2/1", "pending-3/1",
    "scheduled-0/1", "scheduled-1/1", "scheduled-2/1", "trigger/2",
  ]);
  assert.deepEqual(await traces(client, queue, sleeperId),
    { jobs: 0, attempts: 0, errors: 0, schedule: null, dead: null });
  assert.deepEqual(await queue.counts(), { scheduled: 0, due: 0, pending: 0, inFlight: 0, dead: 0 });
  await sleep(0);
});

// Issue 23: no job lost by the library's scripts. A script that fails halfway keeps what it
// wrote, and a script sent again after its reply was lost runs twice: a refused requeue keeps
// the job dead, a resent success leaves a new job with the same id alone, a refused hold does
// not stop a failure being written, and a job removed while it runs leaves no trace.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import Redis from "iovalkey";
import { Queue, Worker, RetryAfter } from "../index.js";
import { TestServer, queueName, serverTime, waitFor, traces } from "./server.mjs";
import { DroppingProxy } from "./proxy.mjs";

let server;
before(async () => { server = await TestServer.start(); });
after(async () => { await server?.stop(); });

const NOTHING = { jobs: 0, attempts: 0, errors: 0, schedule: null, dead: null };

test("a requeue refused by the pending stream (another type, out of IDs) keeps the job dead", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("requeue-refused"));
  const k = queue.keys;
  const id = "dead-job";
  const diedAt = await serverTime(client);
  await client.multi()
    .hset(k.jobs, id, "payload").hset(k.attempts, id, "3").hset(k.errors, id, "boom")
    .zadd(k.dead, diedAt, id)
    .exec();
  const stillDead = async () => {
    assert.equal(Number(await client.zscore(k.dead, id)), diedAt, "the job is still in dead");
    assert.equal(await client.hget(k.attempts, id), "3");
    assert.equal(await client.hget(k.errors, id), "boom");
    assert.equal(await client.hget(k.jobs, id), "payload");
    const [record] = await queue.dead(0, 10);
    assert.equal(record.id, id);
    assert.equal(record.attempts, 3);
    assert.equal(record.error, "boom");
  };

  await client.set(k.pending, "not a stream");
  await assert.rejects(queue.requeue(id), /WRONGTYPE/);
  await stillDead();

  await client.del(k.pending);
  await client.xadd(k.pending, "18446744073709551615-18446744073709551615", "job", "top");
  await assert.rejects(queue.requeue(id), /ERR/);
  await stillDead();

  // Once the stream has room again, the same requeue goes through.
  await client.del(k.pending);
  assert.equal(await queue.requeue(id), true);
  assert.equal(await client.zscore(k.dead, id), null);
  assert.equal(await client.hexists(k.attempts, id), 0);
  assert.equal(await client.hexists(k.errors, id), 0);
  assert.equal((await client.xrange(k.pending, "-", "+"))[0][1][1], id);
});

test("a success resent after its reply was lost leaves a new job with the same id runnable", async () => {
  const admin = server.client();
  const proxy = await DroppingProxy.start(server.port);
  // The worker's connections go through the proxy; the test's do not.
  const client = new Redis({ port: proxy.port, host: "127.0.0.1" });
  client.on("error", () => {});
  const name = queueName("resent-success");
  const queue = new Queue(client, name);
  const direct = new Queue(admin, name);
  const k = queue.keys;
  const id = "same-id";
  const runs = [];
  // The worker's success for this id (a script, or the MULTI of older versions), whichever
  // form it takes: the handler only succeeds.
  proxy.dropReplyOnce((text) => text.includes(id) && /\r\n(evalsha|exec)\r\n/i.test(text),
    async () => {
      // The success was written: the id is free again, and a new job takes it (delayed, so
      // that the resend comes before it is due).
      assert.equal(await admin.hexists(k.jobs, id), 0);
      assert.equal(await direct.add("second", { id, delayMs: 1500 }), id);
    });
  const worker = new Worker(queue, async (job) => {
    runs.push(job.payload.toString());
  }, { backoff: "fixed:0", leaseMs: 3000 });
  worker.on("error", () => {});
  const running = worker.run();
  try {
    await direct.add("first", { id });
    await waitFor(() => proxy.answeredAfterMatch > 0, "the success to be sent again and answered", 10000);
    assert.equal(await admin.hget(k.jobs, id), "second", "the resend left the new job's payload");
    await waitFor(() => runs.includes("second"), "the new job to run", 10000);
    await waitFor(async () => (await admin.hexists(k.jobs, id)) === 0, "the new job's success");
  } finally {
    await worker.close();
    await running;
    client.disconnect();
    await proxy.stop();
  }
  assert.deepEqual(runs, ["first", "second"]);
  assert.deepEqual(await traces(admin, queue, id), NOTHING);
  assert.equal(await admin.xlen(k.pending), 0);
});

test("RetryAfter with a full hold table still writes the failure", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("full-holds"));
  const k = queue.keys;
  // 10,000 schedules held by somebody else: a module with a hold table refuses one more.
  const names = Array.from({ length: 10000 }, (_, i) => `{other-${i}}:schedule`);
  const holds = client.pipeline();
  for (const n of names) holds.call("ECHO.HOLD", n, 60000);
  await holds.exec();
  const errors = [];
  const runs = [];
  const worker = new Worker(queue, async (job) => {
    runs.push(job.attempt);
    throw new RetryAfter(1000, "busy");
  }, { backoff: "fixed:600000", leaseMs: 60000 });
  worker.on("error", (e) => errors.push(e));
  const running = worker.run();
  let id;
  try {
    id = await queue.add("x");
    await waitFor(async () => (await client.hget(k.attempts, id)) === "1", "the failure to be written", 10000);
    assert.equal(await client.hget(k.errors, id), "busy");
    assert.ok(await client.zscore(k.schedule, id) !== null, "retried into the schedule");
    assert.equal((await client.xpending(k.pending, "workers"))[0], 0, "the entry is acknowledged");
    assert.equal(await client.xlen(k.pending), 0);
    // Either the hold was taken, or its refusal was reported (and the worker went on).
    const limits = await client.call("ECHO.LIMITS", k.schedule);
    const heldUntil = Number(limits[limits.indexOf("held-until-ms") + 1]);
    const refused = errors.some((e) => e.message.includes(id) && /hold/.test(e.message));
    assert.ok(refused || heldUntil > 0, `no hold and no refusal reported: ${errors.map((e) => e.message)}`);
  } finally {
    await worker.close();
    await running;
    const lift = client.pipeline();
    for (const n of [...names, k.schedule]) lift.call("ECHO.HOLD", n, 0);
    await lift.exec();
  }
  assert.deepEqual(runs, [1]);
});

test("remove() while the job runs leaves no key holding a trace of it", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("remove-running"));
  const k = queue.keys;
  let started;
  const running_ = new Promise((r) => { started = r; });
  let removed;
  const afterRemove = new Promise((r) => { removed = r; });
  const worker = new Worker(queue, async () => {
    started();
    await afterRemove;
    throw new Error("failed after its removal");
  }, { backoff: "fixed:600000", leaseMs: 60000 });
  worker.on("error", () => {});
  const running = worker.run();
  let id;
  try {
    id = await queue.add("x");
    await running_;
    assert.equal(await queue.remove(id), true);
    removed();
    await waitFor(async () => (await client.xlen(k.pending)) === 0
      && (await client.xpending(k.pending, "workers"))[0] === 0, "the entry to be settled", 10000);
  } finally {
    removed();
    await worker.close();
    await running;
  }
  assert.deepEqual(await traces(client, queue, id), NOTHING);
});

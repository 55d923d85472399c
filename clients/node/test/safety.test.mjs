// No job lost or run twice: a refused add or retry leaves the job whole, RetryAfter(0) lifts
// no hold, takeover reaches an orphan behind many live entries, an outcome refused by a lost
// connection is sent again.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import Redis from "iovalkey";
import { Queue, Worker, RetryAfter } from "../index.js";
import { TestServer, queueName, serverTime, waitFor, traces } from "./server.mjs";

let server;
before(async () => { server = await TestServer.start(); });
after(async () => { await server?.stop(); });

const NOTHING = { jobs: 0, attempts: 0, errors: 0, schedule: null, dead: null };

test("a given-id add refused leaves no trace: delayMs out of range, a schedule of another type", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("add-refused"));
  const k = queue.keys;
  await assert.rejects(queue.add("x", { id: "far", delayMs: 10000000000001 }), RangeError);
  await assert.rejects(queue.addMany(["x"], { ids: ["far-many"], delayMs: 10000000000001 }), RangeError);
  await assert.rejects(queue.add("x", { delayMs: -1 }), RangeError);
  assert.deepEqual(await traces(client, queue, "far"), NOTHING);
  assert.deepEqual(await traces(client, queue, "far-many"), NOTHING);

  await client.set(k.schedule, "not a sorted set");
  await assert.rejects(queue.add("x", { id: "wrong", delayMs: 100 }), /WRONGTYPE/);
  await assert.rejects(queue.addMany(["x", "y"], { ids: ["wrong-1", "wrong-2"], delayMs: 100 }), /WRONGTYPE/);
  // A generated id: the error inside EXEC's reply reaches the caller.
  await assert.rejects(queue.add("x", { delayMs: 100 }), /WRONGTYPE/);
  await assert.rejects(queue.addMany(["x"], { delayMs: 100 }), /WRONGTYPE/);
  assert.equal(await client.hexists(k.jobs, "wrong"), 0, "the payload of a refused add is taken back");
  assert.equal(await client.hexists(k.jobs, "wrong-1"), 0);
  assert.equal(await client.hexists(k.jobs, "wrong-2"), 0);

  // The id is free: once the schedule is right again, the same add goes through.
  await client.del(k.schedule);
  assert.equal(await queue.add("x", { id: "wrong", delayMs: 100 }), "wrong");
  assert.deepEqual(await queue.addMany(["a", "b"], { ids: ["wrong-1", "wrong-2"], delayMs: 100 }),
    ["wrong-1", "wrong-2"]);
  assert.equal(await client.zcard(k.schedule), 3);
  assert.deepEqual(await client.hgetBuffer(k.jobs, "wrong-2"), Buffer.from("b"));
  // Given ids are idempotent in addMany as in add.
  assert.deepEqual(await queue.addMany(["c"], { ids: ["wrong-2"] }), ["wrong-2"]);
  assert.deepEqual(await client.hgetBuffer(k.jobs, "wrong-2"), Buffer.from("b"));
  assert.equal(await client.xlen(k.pending), 0);
  await assert.rejects(queue.addMany(["a", "b"], { ids: ["only-one"] }), RangeError);
  await assert.rejects(queue.add("x", { id: "lone \ud800 surrogate" }), TypeError);
});

test("a generated-id add refused by a pending of another type takes its payload back and raises", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("add-refused-pending"));
  const k = queue.keys;
  // The first add makes the stream and the group (once per Queue); then pending is replaced.
  const first = await queue.add("first");
  await client.del(k.pending);
  await client.set(k.pending, "not a stream");
  // The HSET of the MULTI is applied, the ECHO.ADD beside it refused inside EXEC.
  await assert.rejects(queue.add("refused"), /WRONGTYPE/);
  // Two transactions (1,000 jobs each at most), both refused.
  await assert.rejects(queue.addMany(Array.from({ length: 1500 }, (_, i) => `refused-${i}`)), /WRONGTYPE/);
  assert.deepEqual(await client.hkeys(k.jobs), [first], "the payloads of refused adds are taken back");

  // The key repaired (the stream and its group again), an add goes through.
  await client.del(k.pending);
  await client.xgroup("CREATE", k.pending, "workers", "0", "MKSTREAM");
  const id = await queue.add("after");
  assert.deepEqual(await client.hgetBuffer(k.jobs, id), Buffer.from("after"));
  assert.equal(await client.xlen(k.pending), 1);
  assert.deepEqual((await queue.addMany(["a", "b"])).length, 2);
  assert.equal(await client.hlen(k.jobs), 4);
});

test("a failure whose retry the server refuses leaves the job delivered, in the group", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("retry-refused"));
  const k = queue.keys;
  const id = await queue.add("x");
  await client.set(k.schedule, "not a sorted set");
  const runs = [];
  const worker = new Worker(queue, async (job) => {
    runs.push(job.attempt);
    throw new Error("boom");
  }, { backoff: "fixed:0", leaseMs: 60000 });
  const errors = [];
  worker.on("error", (e) => errors.push(e));
  const running = worker.run();
  try {
    // The refused ECHO.RETRY is the script's first write: nothing of the failure is written.
    await waitFor(() => errors.some((e) => /WRONGTYPE/.test(e.message)), "the refused failure");
    assert.equal(await client.hexists(k.attempts, id), 0);
    assert.equal(await client.hexists(k.errors, id), 0);
    const summary = await client.xpending(k.pending, "workers");
    assert.equal(summary[0], 1, "the entry is still delivered, unacknowledged");
    assert.equal(await client.xlen(k.pending), 1);
    assert.equal(await client.hexists(k.jobs, id), 1);
  } finally {
    await worker.close();
    await running;
  }
  assert.deepEqual(runs, [1]);
  assert.equal((await client.xpending(k.pending, "workers"))[0], 1, "left to a takeover after the lease");
});

test("RetryAfter(0) holds nothing and leaves another worker's hold in force", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("retry-after-0"));
  const k = queue.keys;
  const worker = new Worker(queue, async () => {
    // Another worker's RetryAfter while this job runs.
    await client.call("ECHO.HOLD", k.schedule, 600000);
    throw new RetryAfter(0);
  }, { backoff: "fixed:0" });
  const running = worker.run();
  let id;
  try {
    id = await queue.add("x");
    await waitFor(async () => (await client.hget(k.attempts, id)) === "1", "the failure to be written");
    const limits = await client.call("ECHO.LIMITS", k.schedule);
    const heldUntil = Number(limits[limits.indexOf("held-until-ms") + 1]);
    assert.ok(heldUntil > await serverTime(client) + 500000, `held until ${heldUntil}`);
  } finally {
    await client.call("ECHO.HOLD", k.schedule, 0);
    await worker.close();
    await running;
  }
});

test("takeover reaches an orphan entry behind many live ones", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("orphan"));
  const k = queue.keys;
  await client.xgroup("CREATE", k.pending, "workers", "0", "MKSTREAM");
  await queue.addMany(Array.from({ length: 40 }, (_, i) => `live-${i}`));
  const live = (await client.xreadgroup("GROUP", "workers", "live", "COUNT", 40, "STREAMS", k.pending, ">"))[0][1]
    .map(([entry]) => entry);
  assert.equal(live.length, 40);
  const orphan = await queue.add("orphan", { id: "orphan" });
  await client.xreadgroup("GROUP", "workers", "gone", "COUNT", 1, "STREAMS", k.pending, ">");
  // The live consumer keeps its 40 entries fresh; the orphan's idle time grows.
  const keeper = server.client();
  const keep = setInterval(() => {
    keeper.xclaim(k.pending, "workers", "live", 0, ...live, "JUSTID").catch(() => {});
  }, 100);
  const ran = [];
  // One free slot: an XAUTOCLAIM looks at no more than 10 entries.
  const worker = new Worker(queue, async (job) => { ran.push(job.id); }, { concurrency: 1, leaseMs: 1000 });
  const running = worker.run();
  try {
    await waitFor(() => ran.includes(orphan), "the orphan to be taken over", 20000);
  } finally {
    clearInterval(keep);
    await worker.close();
    await running;
  }
  assert.deepEqual(await traces(client, queue, orphan), NOTHING);
});

for (const outcome of ["success", "failure"]) {
  test(`a ${outcome} refused by a lost connection is sent again: the job runs once`, async () => {
    const admin = server.client();
    // No offline queue: a command on the lost connection fails at once instead of waiting.
    const client = new Redis({ port: server.port, host: "127.0.0.1", enableOfflineQueue: false });
    server.clients.push(client);
    await new Promise((r) => (client.status === "ready" ? r() : client.once("ready", r)));
    const queue = new Queue(client, queueName(`lost-${outcome}`));
    const k = queue.keys;
    const mainId = await client.client("ID");
    const runs = [];
    let killed = false;
    const worker = new Worker(queue, async (job) => {
      runs.push(job.attempt);
      if (!killed) {
        killed = true;
        const closed = new Promise((r) => client.once("close", r));
        await admin.client("KILL", "ID", mainId);
        await closed;
        if (outcome === "failure") throw new Error("failed while the connection was gone");
      }
    }, { backoff: "fixed:0", leaseMs: 1000 });
    worker.on("error", () => {});
    const running = worker.run();
    let id;
    try {
      id = await queue.add("x");
      if (outcome === "failure") await waitFor(() => runs.length === 2, "the retry");
      await waitFor(async () => {
        const c = await new Queue(admin, queue.name).counts();
        return c.pending === 0 && c.inFlight === 0 && c.scheduled === 0 && c.due === 0;
      }, "every outcome written");
    } finally {
      await worker.close();
      await running;
    }
    assert.deepEqual(runs, outcome === "success" ? [1] : [1, 2]);
    assert.deepEqual(await traces(admin, queue, id), NOTHING);
    assert.equal(await admin.xlen(k.pending), 0);
  });
}

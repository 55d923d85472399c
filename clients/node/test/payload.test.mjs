// Scenario 1 (payloads, ids) and the queue's inspection and repair calls.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Queue, Worker } from "../index.js";
import { TestServer, queueName, waitFor, traces } from "./server.mjs";

let server;
before(async () => { server = await TestServer.start(); });
after(async () => { await server?.stop(); });

// Runs a worker until `until(seen)` holds; seen maps id -> list of jobs handled.
async function work(queue, until, options = {}) {
  const seen = new Map();
  const worker = new Worker(queue, async (job) => {
    if (!seen.has(job.id)) seen.set(job.id, []);
    seen.get(job.id).push(job);
  }, options);
  const running = worker.run();
  try {
    await waitFor(() => until(seen), "the jobs to run");
  } finally {
    await worker.close();
    await running;
  }
  return seen;
}

test("payloads round-trip byte for byte; equal payloads are two jobs; a given id adds once", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("payload"));
  const binary = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
  const big = Buffer.alloc(1024 * 1024);
  for (let i = 0; i < big.length; i++) big[i] = (i * 7 + (i >> 8)) & 0xff;
  const ids = {
    binary: await queue.add(binary),
    empty: await queue.add(Buffer.alloc(0)),
    big: await queue.add(big),
    text: await queue.add("héllo, wörld ✓"),
    same1: await queue.add("same"),
    same2: await queue.add("same"),
  };
  assert.notEqual(ids.same1, ids.same2);
  for (const id of Object.values(ids)) assert.match(id, /^\d{13}-[0-9a-f]{16}$/);
  assert.equal(await queue.add("first", { id: "order-1" }), "order-1");
  assert.equal(await queue.add("second", { id: "order-1" }), "order-1");
  assert.equal((await queue.counts()).pending, 7);

  const seen = await work(queue, (s) => s.size === 7);
  assert.deepEqual(seen.get(ids.binary)[0].payload, binary);
  assert.equal(seen.get(ids.empty)[0].payload.length, 0);
  assert.ok(Buffer.isBuffer(seen.get(ids.empty)[0].payload));
  assert.ok(seen.get(ids.big)[0].payload.equals(big));
  assert.deepEqual(seen.get(ids.text)[0].payload, Buffer.from("héllo, wörld ✓", "utf8"));
  assert.deepEqual(seen.get(ids.same1)[0].payload, Buffer.from("same"));
  assert.deepEqual(seen.get(ids.same2)[0].payload, Buffer.from("same"));
  assert.equal(seen.get("order-1").length, 1);
  assert.deepEqual(seen.get("order-1")[0].payload, Buffer.from("first"));
  for (const jobs of seen.values()) assert.equal(jobs[0].attempt, 1);
  assert.deepEqual(await queue.counts(), { scheduled: 0, due: 0, pending: 0, inFlight: 0, dead: 0 });
  for (const id of [...Object.values(ids), "order-1"]) {
    assert.deepEqual(await traces(client, queue, id),
      { jobs: 0, attempts: 0, errors: 0, schedule: null, dead: null });
  }
  assert.equal(await client.xlen(queue.keys.pending), 0);

  // A done job's id is free again.
  await queue.add("again", { id: "order-1" });
  const again = await work(queue, (s) => s.size === 1);
  assert.deepEqual(again.get("order-1")[0].payload, Buffer.from("again"));
});

test("addMany adds one job per payload, in order, across transactions of 1,000", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("many"));
  const payloads = Array.from({ length: 2500 }, (_, i) => (i % 2 ? `p-${i}` : Buffer.from([i & 0xff, 0, 255])));
  const ids = await queue.addMany(payloads);
  assert.equal(ids.length, 2500);
  assert.equal(new Set(ids).size, 2500);
  assert.equal((await queue.counts()).pending, 2500);
  const stored = await client.hgetBuffer(queue.keys.jobs, ids[1234]);
  assert.deepEqual(stored, Buffer.from([1234 & 0xff, 0, 255]));
  const seen = await work(queue, (s) => s.size === 2500, { concurrency: 50 });
  ids.forEach((id, i) => {
    const expected = Buffer.isBuffer(payloads[i]) ? payloads[i] : Buffer.from(payloads[i]);
    assert.deepEqual(seen.get(id)[0].payload, expected);
    assert.equal(seen.get(id).length, 1);
  });
  assert.equal(await client.hlen(queue.keys.jobs), 0);
  assert.equal(await client.xlen(queue.keys.pending), 0);
});

test("counts, remove: a delayed job is scheduled; a removed job leaves no trace and does not run", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("remove"));
  const later = await queue.add("later", { delayMs: 600000 });
  const waiting = await queue.add("waiting");
  assert.deepEqual(await queue.counts(), { scheduled: 1, due: 0, pending: 1, inFlight: 0, dead: 0 });
  assert.equal(await queue.remove(later), true);
  assert.equal(await queue.remove(later), false);
  assert.equal(await queue.remove("no-such-job"), false);
  assert.equal(await queue.remove(waiting), true);
  assert.deepEqual(await traces(client, queue, later),
    { jobs: 0, attempts: 0, errors: 0, schedule: null, dead: null });
  // The removed job's entry is still in the stream: the worker drops it unrun.
  const marker = await queue.add("marker");
  const seen = await work(queue, (s) => s.has(marker));
  assert.equal(seen.has(waiting), false);
  await waitFor(async () => (await client.xlen(queue.keys.pending)) === 0, "the dropped entry to be deleted");
  assert.deepEqual(await queue.counts(), { scheduled: 0, due: 0, pending: 0, inFlight: 0, dead: 0 });
  assert.equal(await queue.requeue(waiting), false);
});

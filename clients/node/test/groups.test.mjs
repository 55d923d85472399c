// Groups (docs/clients.md, Groups): add(..., { group }) puts the job in its group's part of the
// schedule, released by the server's timer; a grouped job keeps its group through a retry; a group
// the server would refuse is refused by the library with nothing written.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Queue, Worker } from "../index.js";
import { TestServer, queueName, waitFor } from "./server.mjs";

let server;
before(async () => { server = await TestServer.start(); });
after(async () => { await server?.stop(); });

const groupKey = (queue, group) => `${queue.keys.schedule}:echomq-g:${group}`;
const members = async (client, key) => (await client.zrange(key, 0, -1)).sort();

// Runs a worker with the queue's pair in echomq.auto-promote (the server releases it).
async function withTimer(client, queue, handler, options, body) {
  const k = queue.keys;
  await client.call("CONFIG", "SET", "echomq.auto-promote", `${k.schedule} ${k.pending}`);
  const worker = new Worker(queue, handler, options);
  const running = worker.run();
  await new Promise((r) => worker.once("ready", r));
  try {
    await body();
  } finally {
    await worker.close();
    await running;
    await client.call("CONFIG", "SET", "echomq.auto-promote", "");
  }
}

test("a grouped add waits in its group and the timer releases it", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("groups"));
  const k = queue.keys;
  const generated = await queue.add("one", { group: "acme" });
  const given = await queue.add("two", { id: "given-1", group: "acme" });
  const many = await queue.addMany(["three", "four"], { group: "other" });
  // Not straight into pending, though nothing governs the queue: into the group's own set.
  assert.equal(await client.xlen(k.pending), 0);
  assert.equal(await client.zcard(k.schedule), 0);
  assert.deepEqual(await members(client, groupKey(queue, "acme")), [generated, given].sort());
  assert.deepEqual(await members(client, groupKey(queue, "other")), [...many].sort());
  const runs = new Map();
  await withTimer(client, queue, (job) => { runs.set(job.id, [job.payload.toString(), job.group]); }, {}, () =>
    waitFor(() => runs.size === 4, "the grouped jobs to run"));
  assert.deepEqual(Object.fromEntries(runs), {
    [generated]: ["one", "acme"],
    [given]: ["two", "acme"],
    [many[0]]: ["three", "other"],
    [many[1]]: ["four", "other"],
  });
  await waitFor(async () => (await client.keys(`{${queue.name}}:*`)).join() === k.pending, "every job to be done");
});

test("a grouped job is retried into its group", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("groups-retry"));
  const k = queue.keys;
  const grouped = await queue.add("g", { group: "acme" });
  const plain = await queue.add("p");
  const attempts = [];
  const handler = (job) => {
    attempts.push([job.id, job.attempt, job.group]);
    if (job.attempt === 1) throw new Error("once");
  };
  await withTimer(client, queue, handler, { backoff: "fixed:600000" }, async () => {
    await waitFor(async () => (await client.hget(k.attempts, grouped)) === "1", "the grouped failure");
    await waitFor(async () => (await client.hget(k.attempts, plain)) === "1", "the ungrouped failure");
    // The grouped retry is in its group, the ungrouped one in the schedule, as before.
    assert.notEqual(await client.zscore(groupKey(queue, "acme"), grouped), null);
    assert.equal(await client.zscore(k.schedule, grouped), null);
    assert.notEqual(await client.zscore(k.schedule, plain), null);
    // Due now (still in its group): the timer releases it and it succeeds.
    await client.call("ECHO.SCHEDULE", k.schedule, grouped, "0", "XX", "GROUP", "acme");
    await waitFor(async () => (await client.hexists(k.jobs, grouped)) === 0, "the grouped retry to be done");
  });
  assert.deepEqual(attempts.filter(([id]) => id === grouped), [[grouped, 1, "acme"], [grouped, 2, "acme"]]);
  assert.equal(await client.exists(groupKey(queue, "acme")), 0);
});

test("a dead grouped job keeps its group; a payload that looks like an envelope stays as it is", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("groups-dead"));
  const tricky = Buffer.from("\0echomq-group:4:acmepayload");
  const runs = [];
  const id = await queue.add("d", { group: "acme" });
  await queue.add(tricky);
  await withTimer(client, queue, (job) => {
    runs.push([job.payload, job.group]);
    throw new Error("never");
  }, { maxAttempts: 1 }, () => waitFor(async () => (await queue.counts()).dead === 2, "both to die"));
  const dead = await queue.dead();
  const byId = Object.fromEntries(dead.map((d) => [d.id, d]));
  assert.deepEqual([byId[id].payload.toString(), byId[id].group], ["d", "acme"]);
  const other = dead.find((d) => d.id !== id);
  assert.deepEqual([other.payload, other.group], [tricky, null]);
  assert.deepEqual(runs.map(([p, g]) => [p.toString("latin1"), g]).sort(),
    [["d", "acme"], [tricky.toString("latin1"), null]].sort());
});

test("a bad group is refused with nothing written", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("groups-bad"));
  for (const group of ["", "x".repeat(1025), "é".repeat(513)]) {
    await assert.rejects(queue.add("x", { group }), RangeError);
    await assert.rejects(queue.add("x", { id: "given", group }), RangeError);
    await assert.rejects(queue.addMany(["x", "y"], { group }), RangeError);
  }
  await assert.rejects(queue.add("x", { group: 7 }), TypeError);
  await assert.rejects(queue.add("x", { group: "\uD800" }), TypeError);
  assert.deepEqual(await client.keys(`{${queue.name}}:*`), []);
  // The longest group the server takes is taken.
  await queue.add("x", { group: "x".repeat(1024) });
  assert.equal(await client.zcard(groupKey(queue, "x".repeat(1024))), 1);
});

// Groups (docs/clients.md, Groups): add(..., { group }) puts the job in its group's part of the
// schedule, released by the server's timer; a grouped job keeps its group through a retry; a group
// the server would refuse is refused by the library with nothing written.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Queue, RetryAfter, Worker } from "../index.js";
import { TestServer, queueName, serverTime, waitFor } from "./server.mjs";

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

// How many times the server ran `command` (INFO commandstats).
async function calls(client, command) {
  const line = (await client.info("commandstats")).split("\r\n").find((l) => l.startsWith(`cmdstat_${command}:`));
  return line ? Number(/calls=(\d+)/.exec(line)[1]) : 0;
}

// The whole queue's hold, ECHO.LIMITS' held-until-ms (0: not held).
async function queueHeldUntil(client, queue) {
  const flat = await client.call("ECHO.LIMITS", queue.keys.schedule);
  const at = flat.findIndex((v) => String(v) === "held-until-ms");
  return Number(flat[at + 1] ?? 0);
}

test("a group limit set by the library binds that group only", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("groups-limit"));
  await queue.setGroupLimit("slow", "2/s", 1);
  assert.deepEqual(await queue.groups(), [], "a limit alone makes no group: it has no jobs");
  await queue.addMany(Array(6).fill("s"), { group: "slow" });
  await queue.addMany(Array(6).fill("f"), { group: "fast" });
  const byName = Object.fromEntries((await queue.groups()).map((g) => [g.group, g]));
  assert.deepEqual([byName.slow.limitRate, byName.slow.limitBurst], [2, 1]);
  assert.deepEqual([byName.fast.limitRate, byName.fast.limitBurst], [null, null]);
  const order = [];
  await withTimer(client, queue, (job) => { order.push(job.group); }, {}, () =>
    waitFor(() => order.length === 12, "every job to run"));
  // At 2/s, burst 1, the slow group's six jobs take 2.5 s at least (one now, then one every
  // 500 ms); the fast one's leave at the first release with the slow group's first (started in
  // any order), so all six run before the slow group's second job. Without the limit both would
  // leave at once.
  assert.ok(order.indexOf("slow") < 7, order.join());
  const secondSlow = order.findIndex((g, i) => g === "slow" && i > order.indexOf("slow"));
  assert.equal(order.slice(0, secondSlow).filter((g) => g === "fast").length, 6, order.join());
});

test("a cleared group limit lets the group go", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("groups-clear"));
  await queue.setGroupLimit("g", "1/h", 1);
  await queue.addMany(["a", "b", "c"], { group: "g" });
  assert.deepEqual((await queue.groups()).map((g) => [g.limitRate, g.limitBurst]), [[1 / 3600, 1]]);
  const ran = [];
  await withTimer(client, queue, (job) => { ran.push(job.id); }, {}, async () => {
    await waitFor(() => ran.length === 1, "the one job its burst lets go");
    assert.deepEqual((await queue.groups()).map((g) => g.members), [2], "one an hour: the two others wait");
    await queue.clearGroupLimit("g");
    await waitFor(() => ran.length === 3, "the two others once the limit is cleared");
  });
  await queue.clearGroupLimit("g"); // nothing left to clear is no error
  assert.deepEqual(await queue.groups(), []);
});

test("RetryAfter with a group holds that group only", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("groups-hold"));
  const k = queue.keys;
  const held = await queue.add("h", { group: "held" });
  const runs = [];
  const handler = async (job) => {
    runs.push({ id: job.id, group: job.group, attempt: job.attempt, at: await serverTime(client) });
    if (job.group === "held" && job.attempt === 1) throw new RetryAfter(3000, { group: job.group });
  };
  let holdEnd = 0;
  let later;
  let others;
  await withTimer(client, queue, handler, { backoff: "fixed:0" }, async () => {
    await waitFor(async () => (await client.hget(k.attempts, held)) === "1", "the held group's failure");
    holdEnd = (await queue.groups()).find((g) => g.group === "held").heldUntilMs;
    assert.ok(holdEnd > runs[0].at + 2000, "the group is held for about 3 s");
    assert.equal(await queueHeldUntil(client, queue), 0, "the queue itself is not held");
    later = await queue.add("h2", { group: "held" });
    others = await queue.addMany(Array(5).fill("o"), { group: "other" });
    // The other group runs during the hold, the held group's jobs wait it out.
    await waitFor(() => others.every((id) => runs.some((r) => r.id === id)), "the other group's jobs");
    assert.ok(runs.filter((r) => others.includes(r.id)).every((r) => r.at < holdEnd));
    assert.deepEqual(runs.filter((r) => r.id === later), []);
    await waitFor(() => runs.length === 8, "the held group's jobs after the hold", 30000);
  });
  for (const r of runs) {
    if ((r.id === held && r.attempt > 1) || r.id === later) assert.ok(r.at >= holdEnd, "ran before its hold ended");
  }
  assert.deepEqual(runs.filter((r) => r.group === "held").map((r) => `${r.id}/${r.attempt}`).sort(),
    [`${held}/1`, `${held}/2`, `${later}/1`].sort());
});

test("RetryAfter without a group of its own holds the queue", async () => {
  // An ungrouped job's new RetryAfter(ms, { group: job.group }) is group null: the whole queue.
  const client = server.client();
  const queue = new Queue(client, queueName("groups-hold-all"));
  const id = await queue.add("u");
  const worker = new Worker(queue, (job) => {
    assert.equal(job.group, null);
    throw new RetryAfter(60000, { group: job.group });
  }, { backoff: "fixed:600000" });
  const running = worker.run();
  try {
    await waitFor(async () => (await client.hexists(queue.keys.errors, id)) === 1, "the failure");
    await waitFor(async () => (await queueHeldUntil(client, queue)) > 0, "the queue's hold");
  } finally {
    await worker.close();
    await running;
    await client.call("ECHO.HOLD", queue.keys.schedule, "0");
  }
});

test("groups() lists every group with its counts across pages", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("groups-list"));
  const k = queue.keys;
  const sizes = Object.fromEntries(Array.from({ length: 7 }, (_, i) => [`g0${i}`, i + 1]));
  for (const [name, n] of Object.entries(sizes)) {
    await queue.addMany(Array(n).fill("x"), { group: name });
    await queue.add("later", { group: name, delayMs: 600000 });
  }
  await queue.addMany(["u", "u"]); // nothing governs the ungrouped jobs: straight into pending
  await queue.add("u", { delayMs: 600000 });
  await client.call("ECHO.SCHEDULE", k.schedule, "due-now", "0");
  await client.call("ECHO.HOLD", k.schedule, "60000", "GROUP", "g03");
  const before = await calls(client, "ECHO.GROUPS");
  const got = await queue.groups({ pageSize: 2 });
  assert.ok((await calls(client, "ECHO.GROUPS")) - before >= 4, "eight groups, two a page");
  assert.deepEqual(got.map((g) => g.group), [null, ...Object.keys(sizes).sort()]);
  assert.deepEqual([got[0].members, got[0].due], [2, 1]);
  for (const g of got.slice(1)) {
    assert.deepEqual([g.members, g.due], [sizes[g.group] + 1, sizes[g.group]], g.group);
    assert.equal(g.limitRate, null);
    assert.equal(g.available, null);
  }
  assert.deepEqual(got.filter((g) => g.heldUntilMs > 0).map((g) => g.group), ["g03"]);
  assert.deepEqual(await queue.groups(), got);
  // More groups than the default page: 1,000 more, two pages or more.
  const p = client.pipeline();
  const z = (i) => `z${String(i).padStart(4, "0")}`;
  for (let i = 0; i < 1000; i++) p.call("ECHO.SCHEDULE", k.schedule, `m${i}`, "600000", "GROUP", z(i));
  await p.exec();
  const start = await calls(client, "ECHO.GROUPS");
  const many = await queue.groups();
  assert.ok((await calls(client, "ECHO.GROUPS")) - start >= 2);
  assert.equal(many.length, 1 + 7 + 1000);
  assert.deepEqual(many.slice(-1000).map((g) => g.group), Array.from({ length: 1000 }, (_, i) => z(i)));
  assert.ok(many.slice(-1000).every((g) => g.members === 1 && g.due === 0));
  // counts() adds every group's jobs to the schedule's own, past the first page too.
  const counts = await queue.counts();
  const sum = (f) => many.reduce((n, g) => n + f(g), 0);
  assert.deepEqual([counts.scheduled, counts.due], [sum((g) => g.members - g.due), sum((g) => g.due)]);
  assert.deepEqual([counts.scheduled, counts.due, counts.pending], [1 + 7 + 1000, 1 + 28, 2]);
});

test("bad group arguments are refused with nothing sent", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("groups-badlimit"));
  const before = [await calls(client, "ECHO.GROUPLIMIT"), await calls(client, "ECHO.GROUPS")];
  const bad = [
    ["", "5/s", 1, RangeError], ["x".repeat(1025), "5/s", 1, RangeError], [null, "5/s", 1, TypeError],
    [7, "5/s", 1, TypeError], ["\uD800", "5/s", 1, TypeError],
    ["g", "0/s", 1, RangeError], ["g", "05/s", 1, RangeError], ["g", "5/d", 1, RangeError], ["g", "5", 1, RangeError],
    ["g", "-5/s", 1, RangeError], ["g", "1000001/s", 1, RangeError], ["g", "adaptive:5/s", 1, RangeError],
    ["g", " 5/s", 1, RangeError], ["g", 5, 1, TypeError], ["g", "5/s", 0, RangeError],
    ["g", "5/s", 1000001, RangeError], ["g", "5/s", "1", RangeError], ["g", "5/s", 1.5, RangeError],
    ["g", "5/s", undefined, RangeError],
  ];
  for (const [group, rate, burst, error] of bad) {
    await assert.rejects(queue.setGroupLimit(group, rate, burst), error, `${group} ${rate} ${burst}`);
  }
  for (const group of ["", "x".repeat(1025), null, undefined]) {
    await assert.rejects(queue.clearGroupLimit(group), group ? RangeError : group === "" ? RangeError : TypeError);
  }
  for (const pageSize of [0, 1001, 2.5, "10"]) await assert.rejects(queue.groups({ pageSize }), RangeError);
  for (const group of ["", "x".repeat(1025)]) assert.throws(() => new RetryAfter(1000, { group }), RangeError);
  assert.throws(() => new RetryAfter(1000, { group: 7 }), TypeError);
  assert.deepEqual([await calls(client, "ECHO.GROUPLIMIT"), await calls(client, "ECHO.GROUPS")], before);
  assert.deepEqual(await client.keys(`{${queue.name}}:*`), []);
  // The largest the server takes is taken, and counted.
  await queue.setGroupLimit("x".repeat(1024), "1000000/H", 1000000);
  await queue.setGroupLimit("g", "1/m", 1);
  assert.equal(await client.get(`${queue.keys.schedule}:echomq-glim:g`), "1 1 60000 1");
  assert.equal(await calls(client, "ECHO.GROUPLIMIT"), before[0] + 2);
  // The message form of RetryAfter is kept.
  assert.deepEqual([new RetryAfter(5, "slow down").message, new RetryAfter(5, "slow down").group], ["slow down", null]);
});

test("the server's refusal of a group limit is raised", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("groups-wrongtype"));
  const key = `${queue.keys.schedule}:echomq-glim:g`;
  await client.rpush(key, "not an override");
  await assert.rejects(queue.setGroupLimit("g", "5/s", 1), /WRONGTYPE/);
  await assert.rejects(queue.clearGroupLimit("g"), /WRONGTYPE/);
  assert.deepEqual(await client.lrange(key, 0, -1), ["not an override"]);
});

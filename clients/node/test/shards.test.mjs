// Sharded queues (docs/clients.md, Sharded queues): the shards' tags and a job's shard as the
// vectors of protocol/shards.json say, each job in its shard's keys, the inspecting calls over
// every shard, the split release limit in every node's config, and a worker that reads every
// shard fairly and at once.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { Queue, RetryAfter, Worker, crc16, keySlot, shardTags, splitLimit } from "../index.js";
import { TestServer, queueName, repoRoot, serverTime, waitFor } from "./server.mjs";

const vectors = () => JSON.parse(readFileSync(resolve(repoRoot, "protocol", "shards.json"), "utf8"));
const constants = () => JSON.parse(readFileSync(resolve(repoRoot, "protocol", "constants.json"), "utf8"));

let server;
before(async () => { server = await TestServer.start(); });
after(async () => { await server?.stop(); });

// `count` ids of the form `<prefix><n>` whose shard in `queue` is `shard`.
function idsIn(queue, shard, count, prefix = "job-") {
  const out = [];
  for (let n = 0; out.length < count; n++) {
    const id = `${prefix}${n}`;
    if (queue.shardOf(id) === shard) out.push(id);
  }
  return out;
}

// Runs a worker for the length of body(); resolves to body's result.
async function withWorker(queue, handler, options, body) {
  const worker = new Worker(queue, handler, options);
  worker.on("error", () => {});
  const ready = new Promise((r) => worker.once("ready", r));
  const running = worker.run();
  await ready;
  try {
    return await body(worker);
  } finally {
    await worker.close();
    await running;
  }
}

async function commandCalls(client, name) {
  const m = new RegExp(`^cmdstat_${name}:calls=(\\d+)`, "m").exec(await client.info("commandstats"));
  return m ? Number(m[1]) : 0;
}

test("the shards' tags, KEYSLOT and a job's shard are the vectors of protocol/shards.json", () => {
  const { layouts, jobs } = vectors();
  assert.ok(layouts.length > 0 && jobs.length > 0);
  for (const { queue, shards, tags } of layouts) {
    assert.deepEqual(shardTags(queue, shards), tags, `the tags of ${queue} over ${shards}`);
    assert.deepEqual(new Queue(server.client(), queue, { shards }).shards, tags);
  }
  for (const { id, shards, slot, shard } of jobs) {
    assert.equal(keySlot(id), slot, `KEYSLOT ${id}`);
    assert.equal(new Queue(server.client(), "q", { shards }).shardOf(id), shard, `the shard of ${id} over ${shards}`);
  }
  // The XMODEM check value, and the hash tag rule.
  assert.equal(crc16("123456789"), 0x31c3);
  assert.equal(keySlot("{user1000}.following"), keySlot("user1000"));
  assert.equal(keySlot("foo{}{bar}"), crc16("foo{}{bar}") % 16384);
});

test("each shard's keys carry its tag: one slot a shard, no two shards on one slot", async () => {
  const client = server.client();
  // A single server has no CLUSTER KEYSLOT: the vectors above and test/cluster-shards.test.mjs
  // check the slots against the server's.
  const queue = new Queue(client, queueName("slots"), { shards: 5 });
  queue.shardKeys.forEach((k, i) => {
    for (const key of Object.values(k)) assert.equal(keySlot(key), crc16(queue.shards[i]) % 16384, key);
  });
  assert.equal(new Set(queue.shards.map((t) => crc16(t) % 16384)).size, 5);
  assert.equal(queue.shardKeys[0], queue.keys);
});

test("a shard count out of 1..=max_shards is refused", () => {
  const client = server.client();
  const max = constants().max_shards;
  for (const shards of [0, -1, max + 1, 1.5, "2", null, Number.NaN]) {
    assert.throws(() => new Queue(client, "q", { shards }), RangeError, String(shards));
  }
  assert.equal(new Queue(client, "q", { shards: max }).shards.length, max);
  assert.deepEqual(new Queue(client, "q").shards, ["q"]);
  // Read-only.
  const queue = new Queue(client, "q", { shards: 2 });
  assert.throws(() => { queue.shards.push("x"); }, TypeError);
  assert.throws(() => { queue.shards = []; }, TypeError);
});

test("the split limit: each shard gets rate / N in the first unit where it divides, and ceil(burst / N)", () => {
  const table = [
    ["500/s", 60, 6, "5000/m", 10],
    ["7/s", 1, 6, "70/m", 1],
    ["10/s", 5, 3, "200/m", 2],
    ["1000000/s", 10, 3, "333333/s", 4],
    ["600/s", 7, 6, "100/s", 2],
    ["500/s", 50, 1, "500/s", 50],
    ["7/M", 3, 1, "7/M", 3],
    ["adaptive:500/s", 12, 6, "adaptive:5000/m", 2],
    ["ADAPTIVE:7/s", 1, 6, "adaptive:70/m", 1],
    ["1/h", 1, 6, "1/h", 1], // floored to 0: at least 1/h
    ["7/h", 1, 3, "2/h", 1], // no unit divides: floored in the longest unit
    ["999999/m", 1, 7, "142857/m", 1],
    ["1000000/m", 1, 7, "142857/m", 1], // 60000000/h over 7 neither divides nor fits: floored per minute
    ["5/m", 100, 4, "75/h", 25],
  ];
  for (const [rate, burst, shards, shareRate, shareBurst] of table) {
    assert.deepEqual(splitLimit(rate, burst, shards), [shareRate, shareBurst], `${rate} ${burst} over ${shards}`);
  }
  for (const [rate, burst] of [["0/s", 1], ["01/s", 1], ["1000001/s", 1], ["5/d", 1], ["+5/s", 1], ["5/s", 0],
    ["5/s", 1000001], ["5/s", 1.5], [5, 1], ["adaptive:", 1], ["adaptive:adaptive:1/s", 1], [" 5/s", 1]]) {
    assert.throws(() => splitLimit(rate, burst, 3), `${rate} ${burst}`);
  }
});

test("a job with an id lands in its shard, twice is one job, generated ids spread over every shard", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("place"), { shards: 3 });
  for (const id of ["job-1", "job-2", "order:42", "a{b}c", "über"]) {
    const k = queue.shardKeys[queue.shardOf(id)];
    assert.equal(await queue.add(`p-${id}`, { id }), id);
    assert.equal(await queue.add("again", { id }), id);
    assert.equal((await client.hgetBuffer(k.jobs, id)).toString(), `p-${id}`);
    const entries = await client.xrange(k.pending, "-", "+");
    assert.equal(entries.filter(([, f]) => f[1] === id).length, 1, `${id} once in its shard's pending`);
    for (const other of queue.shardKeys.filter((o) => o !== k)) assert.equal(await client.hexists(other.jobs, id), 0);
  }
  const made = [...await queue.addMany(Array.from({ length: 60 }, (_, i) => `g${i}`)), await queue.add("one")];
  for (const id of made) assert.equal(await client.hexists(queue.shardKeys[queue.shardOf(id)].jobs, id), 1, id);
  const perShard = await Promise.all(queue.shardKeys.map((k) => client.hlen(k.jobs)));
  assert.equal(perShard.reduce((a, b) => a + b, 0), 66);
  for (const n of perShard) assert.ok(n >= 5, `generated ids spread: ${perShard}`);
  const counts = await queue.counts({ perShard: true });
  assert.equal(counts.pending, 66);
  assert.deepEqual(counts.shards.map((c) => c.pending), perShard);
  assert.deepEqual(counts.shards.map((c) => c.tag), queue.shards);
});

test("addMany sends one transaction per shard and batch, and its scripts by shard", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("many"), { shards: 3 });
  // The streams first: the add makes them once per Queue and shard.
  await queue.addMany(["warm-0", "warm-1", "warm-2", "warm-3", "warm-4", "warm-5", "warm-6", "warm-7"]);
  const before = await commandCalls(client, "exec");
  const made = await queue.addMany(Array.from({ length: 1500 }, (_, i) => `m${i}`));
  const shardsHit = new Set(made.map((id) => queue.shardOf(id)));
  const perShard = [0, 1, 2].map((s) => made.filter((id) => queue.shardOf(id) === s).length);
  const expected = perShard.reduce((sum, n) => sum + Math.ceil(n / 1000), 0);
  assert.equal(shardsHit.size, 3);
  assert.equal(await commandCalls(client, "exec") - before, expected, `transactions for ${perShard}`);
  const ids = ["a", "b", "c", "d", "e", "f", "g"];
  assert.deepEqual(await queue.addMany(ids.map((id) => `p-${id}`), { ids }), ids);
  assert.deepEqual(await queue.addMany(ids.map(() => "again"), { ids }), ids);
  for (const id of ids) {
    assert.equal((await client.hget(queue.shardKeys[queue.shardOf(id)].jobs, id)), `p-${id}`);
  }
  assert.equal((await queue.counts()).pending, 8 + 1500 + ids.length);
});

test("dead, requeue, remove, purgeDead and counts see every shard; dead is merged oldest first", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("dead"), { shards: 3 });
  const ids = [...idsIn(queue, 0, 3, "d-"), ...idsIn(queue, 1, 3, "d-"), ...idsIn(queue, 2, 3, "d-")];
  // Deaths written straight, with times that interleave the shards.
  const now = await serverTime(client);
  const died = new Map();
  for (const [i, id] of ids.entries()) {
    const k = queue.shardKeys[queue.shardOf(id)];
    const at = now - 100000 + ((i * 7) % 9) * 1000;
    died.set(id, at);
    await client.multi().hset(k.jobs, id, `p-${id}`).zadd(k.dead, at, id).hset(k.attempts, id, "3")
      .hset(k.errors, id, "boom").exec();
  }
  const all = await queue.dead(0, 100);
  const order = [...died].sort((a, b) => a[1] - b[1]).map(([id]) => id);
  assert.deepEqual(all.map((d) => d.id), order);
  assert.deepEqual(all.map((d) => d.diedAtMs), order.map((id) => died.get(id)));
  assert.deepEqual(all[0], { id: order[0], diedAtMs: died.get(order[0]), attempts: 3, error: "boom",
    payload: Buffer.from(`p-${order[0]}`), group: null });
  for (const [offset, count] of [[0, 4], [4, 4], [8, 4], [2, 5], [9, 1], [0, 0]]) {
    assert.deepEqual((await queue.dead(offset, count)).map((d) => d.id), order.slice(offset, offset + count));
  }
  const counts = await queue.counts({ perShard: true });
  assert.equal(counts.dead, 9);
  assert.deepEqual(counts.shards.map((c) => c.dead), [3, 3, 3]);

  // requeue and remove go to the id's shard.
  assert.equal(await queue.requeue(order[0]), true);
  assert.equal(await queue.requeue(order[0]), false);
  const k0 = queue.shardKeys[queue.shardOf(order[0])];
  assert.equal((await client.xrange(k0.pending, "-", "+")).filter(([, f]) => f[1] === order[0]).length, 1);
  assert.equal(await queue.remove(order[1]), true);
  assert.equal(await queue.remove(order[1]), false);
  assert.equal(await queue.remove("never-added"), false);
  assert.equal((await queue.counts()).dead, 7);
  // Everything older than 0 ms: the rest, summed over the shards.
  assert.equal(await queue.purgeDead(0), 7);
  assert.deepEqual(await queue.dead(), []);
});

test("repeats are merged over the shards, repeat and unrepeat go to the id's shard", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("rep"), { shards: 4 });
  const ids = ["r-a", "r-b", "r-c", "r-d", "r-e", "r-f"];
  for (const id of ids) await queue.repeat(id, "every:60000", `p-${id}`);
  for (const id of ids) {
    const k = queue.shardKeys[queue.shardOf(id)];
    const there = (await client.call("ECHO.REPEATS", k.schedule)).map((e) => e[e.indexOf("id") + 1]);
    assert.ok(there.includes(id), `${id} in its shard`);
  }
  assert.ok(new Set(ids.map((id) => queue.shardOf(id))).size >= 2);
  assert.deepEqual((await queue.repeats()).map((r) => r.id), [...ids].sort());
  assert.equal(await queue.unrepeat("r-c"), true);
  assert.equal(await queue.unrepeat("r-c"), false);
  assert.deepEqual((await queue.repeats()).map((r) => r.id), ids.filter((id) => id !== "r-c"));
});

test("a worker over 3 shards runs every job of every shard exactly once", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("work"), { shards: 3 });
  const made = await queue.addMany(Array.from({ length: 300 }, (_, i) => `w${i}`));
  const given = [...idsIn(queue, 0, 5, "w-"), ...idsIn(queue, 1, 5, "w-"), ...idsIn(queue, 2, 5, "w-")];
  await queue.addMany(given.map((id) => id), { ids: given });
  const delayed = await queue.addMany(["late-1", "late-2", "late-3", "late-4"], { delayMs: 200 });
  const runs = new Map();
  await withWorker(queue, (job) => { runs.set(job.id, (runs.get(job.id) ?? 0) + 1); }, { concurrency: 8 }, () =>
    waitFor(() => runs.size === made.length + given.length + delayed.length, "every job to run", 15000));
  assert.equal(runs.size, 319);
  for (const [id, n] of runs) assert.equal(n, 1, `${id} ran ${n} times`);
  const left = await queue.counts();
  assert.deepEqual(left, { scheduled: 0, due: 0, pending: 0, inFlight: 0, dead: 0 });
  for (const k of queue.shardKeys) assert.equal(await client.hlen(k.jobs), 0);
});

test("fairness: a job of another shard starts within 200 ms while one shard is 10,000 deep", async (t) => {
  const client = server.client();
  const queue = new Queue(client, queueName("fair"), { shards: 3 });
  const deep = idsIn(queue, 0, 10000, "deep-");
  await queue.addMany(deep.map(() => "deep"), { ids: deep });
  assert.equal((await queue.counts({ perShard: true })).shards[0].pending, 10000);
  const started = new Map();
  let deepRuns = 0;
  const handler = async (job) => {
    if (job.payload.toString() === "deep") {
      deepRuns++;
      await sleep(20); // the deep shard keeps every slot busy
    } else {
      started.set(job.id, Date.now());
    }
  };
  const latencies = await withWorker(queue, handler, { concurrency: 4, shutdownTimeoutMs: 2000 }, async () => {
    await waitFor(() => deepRuns >= 20, "the deep shard to run");
    const out = [];
    for (const [shard, id] of [[1, idsIn(queue, 1, 1, "other-")[0]], [2, idsIn(queue, 2, 1, "other-")[0]]]) {
      const addedAt = Date.now();
      await queue.add("other", { id });
      await waitFor(() => started.has(id), `the job of shard ${shard} to start`, 5000, 2);
      out.push(started.get(id) - addedAt);
    }
    return out;
  });
  t.diagnostic(`fairness: jobs of shards 1 and 2 started ${latencies.join(" and ")} ms after their add`);
  for (const ms of latencies) assert.ok(ms < 200, `started ${ms} ms after its add`);
  // The deep shard was still deep: the other jobs did not wait for it to empty.
  assert.ok((await queue.counts()).pending > 9000);
});

test("a stale run of one shard is taken over while another shard keeps every slot busy", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("stale"), { shards: 2 });
  const deep = idsIn(queue, 0, 100, "deep-");
  await queue.addMany(deep.map(() => "deep"), { ids: deep });
  // A run of shard 1 delivered to a worker that died.
  const lost = idsIn(queue, 1, 1, "lost-")[0];
  await queue.add("lost", { id: lost });
  const k1 = queue.shardKeys[1];
  await client.xreadgroup("GROUP", "workers", "ghost", "COUNT", 1, "STREAMS", k1.pending, ">");
  let release;
  const gate = new Promise((r) => { release = r; });
  let ran = false;
  await withWorker(queue, async (job) => {
    if (job.id === lost) ran = true;
    else await gate; // shard 0's runs hold every slot
  }, { concurrency: 2, leaseMs: 300 }, async (worker) => {
    await waitFor(async () => {
      const [[, owner]] = await client.xpending(k1.pending, "workers", "-", "+", 1);
      return owner === worker.consumer;
    }, "the takeover of the lost run", 3000);
    release();
    await waitFor(() => ran, "the lost run to start once a slot is free");
  });
});

test("an idle worker waits on every shard at once: a job on the last of 4 starts within 200 ms", async (t) => {
  const client = server.client();
  const queue = new Queue(client, queueName("idle"), { shards: 4 });
  // The server promotes the shards: each read blocks up to 1 s, so a wait that went shard by
  // shard would be seen.
  await client.call("CONFIG", "SET", "echomq.auto-promote",
    queue.shardKeys.map((k) => `${k.schedule} ${k.pending}`).join(" "));
  const started = new Map();
  try {
    const latencies = await withWorker(queue, (job) => { started.set(job.id, Date.now()); }, {}, async () => {
      const out = [];
      for (const shard of [3, 1]) {
        await sleep(300); // every read blocked
        const id = idsIn(queue, shard, 1, "idle-")[0];
        const addedAt = Date.now();
        await queue.add("x", { id });
        await waitFor(() => started.has(id), `the job of shard ${shard}`, 5000, 2);
        out.push(started.get(id) - addedAt);
      }
      return out;
    });
    t.diagnostic(`idle wait: jobs of shards 3 and 1 started ${latencies.join(" and ")} ms after their add`);
    for (const ms of latencies) assert.ok(ms < 200, `started ${ms} ms after its add`);
  } finally {
    await client.call("CONFIG", "SET", "echomq.auto-promote", "");
  }
});

test("runs taken beyond the concurrency wait for a slot and are handed back at close, none lost", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("over"), { shards: 4 });
  const ids = [0, 1, 2, 3].flatMap((shard) => idsIn(queue, shard, 5, "o-"));
  await queue.addMany(ids, { ids });
  let running = 0;
  let most = 0;
  const ran = new Set();
  let release;
  const gate = new Promise((r) => { release = r; });
  await withWorker(queue, async (job) => {
    running++;
    most = Math.max(most, running);
    ran.add(job.id);
    await gate;
    running--;
  }, { concurrency: 2 }, async () => {
    await waitFor(() => ran.size === 2, "two runs");
    // Every shard's reader has taken what it may: two runs and at most one more per shard.
    await waitFor(async () => (await queue.counts()).inFlight >= 4, "the reads beyond the concurrency");
    await sleep(100);
    const taken = (await queue.counts()).inFlight;
    assert.ok(taken <= 2 + 4, `${taken} taken with a concurrency of 2 over 4 shards`);
    assert.equal(ran.size, 2);
    release();
  });
  assert.equal(most, 2);
  // Close handed the waiting runs back: nothing is left leased, nothing lost.
  const left = await queue.counts();
  assert.equal(left.inFlight, 0);
  assert.equal(left.pending + ran.size, ids.length);
});

test("a RetryAfter holds every shard; one with a group holds that group on every shard", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("hold"), { shards: 3 });
  const id = idsIn(queue, 1, 1, "h-")[0];
  const grouped = idsIn(queue, 2, 1, "hg-")[0];
  await queue.add("x", { id });
  await queue.add("y", { id: grouped, group: "acme" });
  const failed = new Set();
  await withWorker(queue, (job) => {
    failed.add(job.id);
    if (job.id === id) throw new RetryAfter(60000);
    throw new RetryAfter(60000, { group: job.group });
  }, { backoff: "fixed:600000" }, async () => {
    const now = await serverTime(client);
    await waitFor(async () => {
      const held = await Promise.all(queue.shardKeys.map(async (k) => {
        const limits = await client.call("ECHO.LIMITS", k.schedule);
        return Number(limits[limits.indexOf("held-until-ms") + 1]);
      }));
      return held.every((until) => until > now + 50000);
    }, "every shard held");
    await waitFor(async () => {
      const holds = await Promise.all(queue.shardKeys.map((k) => client.pttl(`${k.schedule}:echomq-ghold:acme`)));
      return holds.every((ms) => ms > 50000);
    }, "the group held on every shard");
  });
  assert.deepEqual([...failed].sort(), [id, grouped].sort());
});

test("setLimit writes each shard's share into echomq.release-limits, keeps another queue's, clearLimit removes", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("limit"), { shards: 6 });
  const limits = async () => (await client.config("GET", "echomq.release-limits"))[1];
  await client.config("SET", "echomq.release-limits", "{other}:schedule 5/s 2");
  try {
    await queue.setLimit("500/s", 60);
    const ours = queue.shardKeys.map((k) => `${k.schedule} 5000/m 10`).join(" ");
    assert.equal(await limits(), `{other}:schedule 5/s 2 ${ours}`);
    // Set again: replaced, not added.
    await queue.setLimit("7/s", 1);
    assert.equal(await limits(), `{other}:schedule 5/s 2 ${queue.shardKeys.map((k) => `${k.schedule} 70/m 1`).join(" ")}`);
    const configCalls = await commandCalls(client, "config\\|set");
    for (const [rate, burst] of [["500/x", 1], ["0/s", 1], ["5/s", 0], ["5/s", "1"], ["adaptive:5/d", 1]]) {
      await assert.rejects(queue.setLimit(rate, burst), RangeError);
    }
    assert.equal(await commandCalls(client, "config\\|set"), configCalls, "a refused limit sent a CONFIG SET");
    await queue.clearLimit();
    assert.equal(await limits(), "{other}:schedule 5/s 2");
    // One shard: the limit as given, under the queue's own schedule.
    const one = new Queue(client, queueName("limit1"));
    await one.setLimit("500/s", 50);
    assert.equal(await limits(), `{other}:schedule 5/s 2 ${one.keys.schedule} 500/s 50`);
    await one.clearLimit();
  } finally {
    await client.config("SET", "echomq.release-limits", "");
  }
});

test("setGroupLimit gives each shard's part of the group its share", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("glimit"), { shards: 3 });
  await queue.setGroupLimit("acme", "10/s", 5);
  for (const k of queue.shardKeys) {
    assert.equal(await client.get(`${k.schedule}:echomq-glim:acme`), "1 200 60000 2");
  }
  await queue.clearGroupLimit("acme");
  for (const k of queue.shardKeys) assert.equal(await client.exists(`${k.schedule}:echomq-glim:acme`), 0);
});

test("growth: jobs queued and delayed over 2 shards all run once under a worker opened with 3", async () => {
  const client = server.client();
  const name = queueName("grow");
  const two = new Queue(client, name, { shards: 2 });
  const three = new Queue(client, name, { shards: 3 });
  const queued = await two.addMany(Array.from({ length: 60 }, (_, i) => `q${i}`));
  const given = Array.from({ length: 30 }, (_, i) => `grow-${i}`);
  await two.addMany(given, { ids: given });
  const delayed = await two.addMany(Array.from({ length: 10 }, (_, i) => `d${i}`), { delayMs: 300 });
  // Ids whose shard differs between the layouts are found where they are by id.
  const moved = given.filter((id) => two.shardOf(id) !== three.shardOf(id));
  assert.ok(moved.length > 0);
  assert.equal(await three.remove(moved[0]), true);
  const runs = new Map();
  await withWorker(three, (job) => { runs.set(job.id, (runs.get(job.id) ?? 0) + 1); }, {}, async () => {
    await waitFor(() => runs.size === 99, "every job of the old layout to run", 10000);
    // New adds go to the 3-shard layout, its new shard included.
    const fresh = idsIn(three, 2, 1, "fresh-")[0];
    await three.add("new", { id: fresh });
    await waitFor(() => runs.has(fresh), "a job of the new shard");
  });
  for (const [id, n] of runs) assert.equal(n, 1, `${id} ran ${n} times`);
  assert.equal(runs.has(moved[0]), false);
  for (const id of [...queued, ...delayed, ...given.filter((id) => id !== moved[0])]) assert.ok(runs.has(id), id);
});

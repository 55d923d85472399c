// A sharded queue on a real Valkey Cluster (three primaries, one replica): the shards' tags and
// the jobs' slots are what CLUSTER KEYSLOT answers, the shards spread over the primaries, a
// worker over them runs every job once, a RetryAfter holds the shards on every node, and
// setLimit writes the split limit into every node's config, the replica's too.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { Cluster } from "iovalkey";
import { Queue, RetryAfter, Worker, keySlot } from "../index.js";
import { TestServer, queueName, repoRoot, waitFor } from "./server.mjs";

const RANGES = [[0, 5460], [5461, 10922], [10923, 16383]];
let nodes = [];
let admin = [];
let cluster;

let early; // a client that read the slots before the replica joined

before(async () => {
  nodes = await Promise.all([0, 1, 2, 3].map(() => TestServer.start({ cluster: true })));
  admin = nodes.map((n) => n.client());
  const primaries = admin.slice(0, 3);
  await Promise.all(RANGES.map(([from, to], i) => admin[i].call("CLUSTER", "ADDSLOTSRANGE", from, to)));
  for (const a of primaries.slice(1)) await a.call("CLUSTER", "MEET", "127.0.0.1", nodes[0].port);
  const formed = async (members) => {
    for (const a of members) {
      if (!/cluster_state:ok/.test(await a.call("CLUSTER", "INFO"))) return false;
      if ((await a.call("CLUSTER", "NODES")).trim().split("\n").length !== members.length) return false;
    }
    return true;
  };
  await waitFor(() => formed(primaries), "the primaries to form a cluster", 30000, 50);
  early = new Cluster([{ host: "127.0.0.1", port: nodes[1].port }]);
  early.on("error", () => {});
  await early.ping();
  await admin[3].call("CLUSTER", "MEET", "127.0.0.1", nodes[0].port);
  const first = await admin[0].call("CLUSTER", "MYID");
  await waitFor(async () => (await admin[3].call("CLUSTER", "NODES")).includes(first), "the replica to know its primary");
  await admin[3].call("CLUSTER", "REPLICATE", first);
  await waitFor(async () => await formed(admin) && /master_link_status:up/.test(await admin[3].info("replication")),
    "the replica to join", 30000, 50);
  // CLUSTER SLOTS lists a replica once its replication offset is not 0: one write to its
  // primary's slots (slot 3300) makes it so.
  await admin[0].set("{b}:replicated", "1");
  cluster = new Cluster([{ host: "127.0.0.1", port: nodes[0].port }]);
  cluster.on("error", () => {});
  // Every node known to the client, the replica included.
  await waitFor(async () => {
    await cluster.ping();
    await new Promise((done) => { cluster.refreshSlotsCache(() => done()); });
    return cluster.nodes("all").length === 4;
  }, "the client to see every node", 10000, 50);
});

after(async () => {
  cluster?.disconnect();
  early?.disconnect();
  await Promise.all(nodes.map((n) => n.stop()));
});

test("on a cluster: the tags and the jobs' slots are CLUSTER KEYSLOT's, the shards on every primary", async () => {
  const { layouts, jobs } = JSON.parse(readFileSync(resolve(repoRoot, "protocol", "shards.json"), "utf8"));
  for (const { id, slot } of jobs) {
    assert.equal(keySlot(id), slot);
    assert.equal(Number(await admin[0].call("CLUSTER", "KEYSLOT", id)), slot, id);
  }
  for (const { queue, shards } of layouts) {
    const q = new Queue(cluster, queue, { shards });
    for (const [i, k] of q.shardKeys.entries()) {
      assert.equal(Number(await admin[0].call("CLUSTER", "KEYSLOT", k.pending)), keySlot(`{${q.shards[i]}}`));
    }
  }
  const queue = new Queue(cluster, "mail", { shards: 6 });
  const owners = new Set(queue.shardKeys.map((k) => RANGES.findIndex(([a, b]) => keySlot(k.pending) >= a
    && keySlot(k.pending) <= b)));
  assert.equal(owners.size, 3, "six shards over three primaries");
});

test("on a cluster: a worker over 6 shards runs every job once; a RetryAfter holds every shard", async () => {
  const queue = new Queue(cluster, queueName("cl"), { shards: 6 });
  const made = await queue.addMany(Array.from({ length: 120 }, (_, i) => `c${i}`));
  const given = Array.from({ length: 12 }, (_, i) => `given-${i}`);
  await queue.addMany(given, { ids: given });
  const holder = "hold-me";
  const runs = new Map();
  const worker = new Worker(queue, (job) => {
    runs.set(job.id, (runs.get(job.id) ?? 0) + 1);
    if (job.id === holder) throw new RetryAfter(60000);
  }, { concurrency: 8, backoff: "fixed:600000" });
  worker.on("error", () => {});
  const running = worker.run();
  try {
    await waitFor(() => runs.size === made.length + given.length, "every job to run", 15000);
    for (const [id, n] of runs) assert.equal(n, 1, `${id} ran ${n} times`);
    assert.deepEqual(await queue.counts(), { scheduled: 0, due: 0, pending: 0, inFlight: 0, dead: 0 });
    await queue.add("x", { id: holder });
    await waitFor(async () => {
      const ttls = await Promise.all(queue.shardKeys.map((k) => cluster.pttl(`${k.schedule}:echomq-hold`)));
      return ttls.every((ms) => ms > 50000);
    }, "every shard held, on every primary");
  } finally {
    await worker.close();
    await running;
  }
});

test("on a cluster: setLimit writes each shard's share on every node, the replica too", async () => {
  const queue = new Queue(cluster, queueName("cl-limit"), { shards: 6 });
  await Promise.all(admin.map((a) => a.config("SET", "echomq.release-limits", "{other}:schedule 5/s 2")));
  try {
    await queue.setLimit("7/s", 12);
    const ours = queue.shardKeys.map((k) => `${k.schedule} 70/m 2`).join(" ");
    for (const a of admin) {
      assert.equal((await a.config("GET", "echomq.release-limits"))[1], `{other}:schedule 5/s 2 ${ours}`);
    }
    await queue.clearLimit();
    for (const a of admin) assert.equal((await a.config("GET", "echomq.release-limits"))[1], "{other}:schedule 5/s 2");
  } finally {
    await Promise.all(admin.map((a) => a.config("SET", "echomq.release-limits", "")));
  }
});

test("on a cluster: setLimit reaches a replica the client has not seen yet", async () => {
  // iovalkey reads the slots again only on a redirection or an error: this client still knows
  // the three primaries alone.
  assert.equal(early.nodes("all").length, 3);
  const queue = new Queue(early, queueName("cl-early"), { shards: 3 });
  try {
    await queue.setLimit("10/s", 3);
    const ours = queue.shardKeys.map((k) => `${k.schedule} 200/m 1`).join(" ");
    for (const a of admin) assert.equal((await a.config("GET", "echomq.release-limits"))[1], ours);
    await queue.clearLimit();
    for (const a of admin) assert.equal((await a.config("GET", "echomq.release-limits"))[1], "");
  } finally {
    await Promise.all(admin.map((a) => a.config("SET", "echomq.release-limits", "")));
  }
});

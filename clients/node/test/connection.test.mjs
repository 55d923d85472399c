// What a Queue takes as its connection: an iovalkey Redis or Cluster (the cluster behaviour
// itself is tested on a real cluster by clients/tests/on_cluster.rs); nothing else.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Cluster } from "iovalkey";
import { Queue, Worker } from "../index.js";

test("a Queue and a Worker take an iovalkey Cluster, without connecting before they are used", () => {
  // lazyConnect: no node is contacted until a command is sent, and none is sent here.
  const cluster = new Cluster([{ host: "127.0.0.1", port: 1 }], { lazyConnect: true });
  const queue = new Queue(cluster, "orders");
  assert.equal(queue.connection, cluster);
  assert.deepEqual(Object.values(queue.keys).map((k) => k.slice(0, 9)), Array(6).fill("{orders}:"));
  const worker = new Worker(queue, async () => {});
  assert.equal(worker.queue, queue);
  assert.equal(cluster.status, "wait");
  cluster.disconnect();
});

test("a Queue refuses what is not an iovalkey connection", () => {
  for (const bad of [null, undefined, {}, { multi() {} }]) {
    assert.throws(() => new Queue(bad, "q"), { name: "TypeError", message: "a Queue needs an iovalkey Redis or Cluster connection" });
  }
});

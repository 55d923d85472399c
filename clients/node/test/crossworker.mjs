#!/usr/bin/env node
// The cross-language test worker: the same CLI in the Python, Node.js and Rust clients.
//
//   crossworker work --url URL --queue NAME [--done KEY] [--fail MSG] [--sleep-ms MS]
//                    [--concurrency N] [--lease-ms MS] [--max-attempts N] [--backoff POLICY]
//                    [--max-deliveries N] [--shutdown-timeout-ms MS] [--started KEY] [--crash]
//   crossworker add --url URL --queue NAME --count N [--id-prefix P] [--delay-ms D]
//   crossworker dead --url URL --queue NAME
//   crossworker requeue --url URL --queue NAME --id ID
//   crossworker purge --url URL --queue NAME [--older-than-ms MS]
import { parseArgs } from "node:util";
import { setTimeout as sleep } from "node:timers/promises";
import Redis from "iovalkey";
import { Queue, Worker } from "../index.js";

const USAGE = "usage: crossworker.mjs work|add|dead|requeue|purge --url URL --queue NAME [options]";

function int(values, name, dflt) {
  if (values[name] === undefined) return dflt;
  const v = Number(values[name]);
  if (!Number.isInteger(v) || v < 0) throw new Error(`--${name}: '${values[name]}' is not an integer >= 0`);
  return v;
}

function write(line) {
  return new Promise((r) => process.stdout.write(line + "\n", r));
}

async function work(values, connection, queue) {
  const sleepMs = int(values, "sleep-ms", 0);
  // The handler's own writes. Behind a primary endpoint a failover leaves this connection on
  // the old primary, now a replica: a write it refuses (READONLY, nothing written) is sent
  // again on a new connection, which the endpoint leads to the new primary.
  const side = connection.duplicate({ reconnectOnError: (e) => (/^READONLY/.test(e.message) ? 2 : false) });
  // A restart of the server resets every connection; ioredis reconnects
  // them, and without a listener would print each reset as unhandled.
  side.on("error", () => {});
  const worker = new Worker(queue, async (job) => {
    if (values.started) await side.rpush(values.started, job.id);
    // A job that kills whatever runs it: this process dies as under SIGKILL.
    if (values.crash) process.kill(process.pid, "SIGKILL");
    if (sleepMs > 0) await sleep(sleepMs);
    if (values.fail !== undefined) throw new Error(values.fail);
    if (values.done) await side.hincrby(values.done, job.id, 1);
  }, {
    concurrency: int(values, "concurrency", undefined),
    leaseMs: int(values, "lease-ms", undefined),
    maxAttempts: int(values, "max-attempts", undefined),
    backoff: values.backoff,
    maxDeliveries: int(values, "max-deliveries", undefined),
    shutdownTimeoutMs: int(values, "shutdown-timeout-ms", undefined),
  });
  worker.on("error", (e) => console.error(`crossworker: ${e.message}`));
  worker.once("ready", () => { write("ready"); });
  await worker.run();
  side.disconnect();
}

async function add(values, queue) {
  const count = int(values, "count", undefined);
  if (count === undefined) throw new Error("add needs --count N");
  const delayMs = int(values, "delay-ms", 0);
  const payloads = Array.from({ length: count }, (_, i) => `payload-${i}`);
  const prefix = values["id-prefix"];
  const ids = await queue.addMany(payloads, {
    ids: prefix === undefined ? undefined : payloads.map((_, i) => `${prefix}${i}`),
    delayMs,
  });
  await write(ids.join("\n"));
}

async function dead(queue) {
  for (let offset = 0; ; offset += 1000) {
    const records = await queue.dead(offset, 1000);
    for (const r of records) {
      await write(JSON.stringify({
        id: r.id,
        died_at_ms: r.diedAtMs,
        attempts: r.attempts,
        error: r.error,
        payload_hex: r.payload === null ? null : r.payload.toString("hex"),
      }));
    }
    if (records.length < 1000) return;
  }
}

// Prints true when the job was dead and is pending again, else false.
async function requeue(values, queue) {
  if (values.id === undefined) throw new Error("requeue needs --id ID");
  await write(String(await queue.requeue(values.id)));
}

// Prints how many dead jobs were removed.
async function purge(values, queue) {
  await write(String(await queue.purgeDead(int(values, "older-than-ms", 0))));
}

async function main() {
  const [command, ...rest] = process.argv.slice(2);
  const { values } = parseArgs({
    args: rest,
    options: {
      url: { type: "string" },
      queue: { type: "string" },
      done: { type: "string" },
      fail: { type: "string" },
      "sleep-ms": { type: "string" },
      concurrency: { type: "string" },
      "lease-ms": { type: "string" },
      "max-attempts": { type: "string" },
      backoff: { type: "string" },
      "max-deliveries": { type: "string" },
      "shutdown-timeout-ms": { type: "string" },
      started: { type: "string" },
      crash: { type: "boolean" },
      count: { type: "string" },
      "id-prefix": { type: "string" },
      "delay-ms": { type: "string" },
      id: { type: "string" },
      "older-than-ms": { type: "string" },
    },
    strict: true,
  });
  const commands = {
    work: () => work(values, connection, queue),
    add: () => add(values, queue),
    dead: () => dead(queue),
    requeue: () => requeue(values, queue),
    purge: () => purge(values, queue),
  };
  if (!Object.hasOwn(commands, command) || !values.url || !values.queue) throw new Error(USAGE);
  const connection = new Redis(values.url);
  connection.on("error", () => {}); // reconnected by ioredis (see work)
  const queue = new Queue(connection, values.queue);
  try {
    await commands[command]();
  } finally {
    connection.disconnect();
  }
}

// Exits explicitly: a handler that outlived the shutdown timeout may still hold a timer,
// and its job is left to another worker.
main().then(
  () => process.exit(0),
  (e) => {
    console.error(`crossworker: ${e.message}`);
    process.exit(1);
  },
);

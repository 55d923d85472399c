#!/usr/bin/env node
// The cross-language test worker: the same CLI in the Python, Node.js and Rust clients.
//
//   crossworker work --url URL --queue NAME [--done KEY] [--fail MSG] [--sleep-ms MS]
//                    [--concurrency N] [--lease-ms MS] [--max-attempts N] [--backoff POLICY]
//                    [--max-deliveries N] [--shutdown-timeout-ms MS] [--started KEY] [--crash]
//                    [--cluster] [--fail-first K] [--overload-every K] [--retry-after-ms MS]
//                    [--crash-on ID] [--hold-group-on ID] [--log-takes] [--log-starts KEY] [--jobs N]
//                    [--deadline-secs S] [--ran KEY]
//   crossworker add --url URL --queue NAME --count N [--id-prefix P] [--delay-ms D] [--group G]
//                   [--cluster]
//   crossworker dead --url URL --queue NAME [--cluster]
//   crossworker requeue --url URL --queue NAME --id ID [--cluster]
//   crossworker purge --url URL --queue NAME [--older-than-ms MS] [--cluster]
//   crossworker repeat --url URL --queue NAME --id ID --spec SPEC --payload TEXT [--jitter-ms MS]
//                      [--tz ZONE] [--from-ms MS] [--until-ms MS] [--cluster]
//   crossworker repeats --url URL --queue NAME [--cluster]
//   crossworker unrepeat --url URL --queue NAME --id ID [--cluster]
//
// --shards N (every subcommand, default 1): the queue is sharded over N sub-queues
// (docs/clients.md, Sharded queues), so a worker reads them all and the other calls see them all.
// --cluster: --url is one seed node, or several comma-separated, of a Valkey Cluster, and every
// connection is an iovalkey Cluster. `work` prints `ready` once the group exists, with
// --log-takes `took <entry-id> <job-id> <attempt>` as each run starts, and, on every exit that is
// not a crash, `summary {"runs":R,"max_concurrent":C}`; --deadline-secs exits 2 after it.
// --log-starts KEY adds `job <id> attempt <n> entry <entry-id>` to the stream KEY as each run starts
// (the new entry's id is the server's clock then); --hold-group-on ID fails that job's first
// attempt with RetryAfter(--retry-after-ms) holding the job's own group.
// --ran pushes `<job-id> <payload as hex>` as each run starts (after --started's push of the id).
// `repeat` prints the fire time of the armed occurrence, `repeats` one JSON object a line (id,
// spec, jitter_ms, tz, from_ms, until_ms, next_ms, fire_at_ms), `unrepeat` true or false.
import { parseArgs } from "node:util";
import { setTimeout as sleep } from "node:timers/promises";
import Redis, { Cluster } from "iovalkey";
import { Queue, RetryAfter, Worker } from "../index.js";

const USAGE =
  "usage: crossworker.mjs work|add|dead|requeue|purge|repeat|repeats|unrepeat --url URL --queue NAME [--shards N] [options]";

function int(values, name, dflt) {
  if (values[name] === undefined) return dflt;
  const v = Number(values[name]);
  if (!Number.isInteger(v) || v < 0) throw new Error(`--${name}: '${values[name]}' is not an integer >= 0`);
  return v;
}

// A launcher may stop reading once it has seen `ready` (clients/tests' Worker::start drops the
// pipe): a later line (a took line, the summary) then has no reader, and EPIPE is no reason to
// fail the work; the line is dropped.
process.stdout.on("error", (e) => {
  if (e.code !== "EPIPE") throw e;
});

function write(line) {
  return new Promise((r) => process.stdout.write(line + "\n", () => r()));
}

// --cluster's seed nodes: each a URL as --url takes (redis://host:port, rediss:// for TLS, with
// an optional user and password), or a bare host:port.
function clusterOf(url) {
  const seeds = [];
  let redisOptions = {};
  for (const part of url.split(",").map((p) => p.trim()).filter(Boolean)) {
    const u = new URL(part.includes("://") ? part : `redis://${part}`);
    seeds.push({ host: u.hostname, port: Number(u.port || 6379) });
    // The credentials and TLS are one for the whole cluster: the first seed's.
    if (seeds.length === 1) {
      if (u.username) redisOptions.username = decodeURIComponent(u.username);
      if (u.password) redisOptions.password = decodeURIComponent(u.password);
      if (u.protocol === "rediss:") redisOptions.tls = {};
    }
  }
  if (!seeds.length) throw new Error(`--url: no seed node in '${url}'`);
  return new Cluster(seeds, { redisOptions });
}

// What a failover or a slot migration answers for a while, not a refusal of the command: a
// connection lost or not made yet (any error that is not a server's reply), the old primary now
// a replica (READONLY), a server loading its data or cut from its primary, a cluster without a
// majority or a slot mid-move. MOVED and ASK are followed by the cluster client itself; one
// redirected too often comes back as a plain Error ("Too many Cluster redirections").
const TRANSIENT = /^(READONLY|LOADING|MASTERDOWN|CLUSTERDOWN|TRYAGAIN)\b/;
const SIDE_RETRY_FIRST_MS = 50;
const SIDE_RETRY_MAX_MS = 1000;
const SIDE_RETRY_FOR_MS = 30000;

// The handler's own writes, sent again through a failover for up to 30 s, so that a failover
// does not turn into a job failure (a failure would cost an attempt the test does not expect).
async function retried(send) {
  const giveUpAt = Date.now() + SIDE_RETRY_FOR_MS;
  let pause = SIDE_RETRY_FIRST_MS;
  for (;;) {
    try {
      return await send();
    } catch (e) {
      const transient = e && (e.name !== "ReplyError" || TRANSIENT.test(String(e.message)));
      if (!transient || Date.now() + pause > giveUpAt) throw e;
      await sleep(pause);
      pause = Math.min(SIDE_RETRY_MAX_MS, pause * 2);
    }
  }
}

// The digits an id ends in (job-7: 7), or null.
function trailingNumber(id) {
  const m = /(\d+)$/.exec(id);
  return m ? Number(m[1]) : null;
}

async function work(values, connection, queue) {
  const sleepMs = int(values, "sleep-ms", 0);
  const failFirst = int(values, "fail-first", undefined);
  const overloadEvery = int(values, "overload-every", undefined);
  const retryAfterMs = int(values, "retry-after-ms", 1000);
  const jobs = int(values, "jobs", undefined);
  const deadlineSecs = int(values, "deadline-secs", 0);
  if (jobs !== undefined && !values.done) throw new Error("--jobs needs --done KEY");
  if (overloadEvery === 0) throw new Error("--overload-every: K is an integer >= 1");
  // The handler's own writes. Behind a primary endpoint a failover leaves this connection on
  // the old primary, now a replica: a write it refuses (READONLY, nothing written) is sent
  // again on a new connection, which the endpoint leads to the new primary. A Cluster's
  // duplicate is a second cluster client, which follows the slots itself.
  const side = values.cluster
    ? connection.duplicate()
    : connection.duplicate({ reconnectOnError: (e) => (/^READONLY/.test(e.message) ? 2 : false) });
  // A restart of the server resets every connection; ioredis reconnects
  // them, and without a listener would print each reset as unhandled.
  side.on("error", () => {});
  let runs = 0;
  let running = 0;
  let maxConcurrent = 0;
  const summary = () => write(`summary ${JSON.stringify({ runs, max_concurrent: maxConcurrent })}`);
  const worker = new Worker(queue, async (job) => {
    runs++;
    running++;
    maxConcurrent = Math.max(maxConcurrent, running);
    try {
      if (values["log-takes"]) await write(`took ${job.entryId} ${job.id} ${job.attempt}`);
      if (values.started) await retried(() => side.rpush(values.started, job.id));
      if (values.ran) await retried(() => side.rpush(values.ran, `${job.id} ${job.payload.toString("hex")}`));
      if (values["log-starts"]) {
        const fields = ["job", job.id, "attempt", String(job.attempt), "entry", job.entryId];
        await retried(() => side.xadd(values["log-starts"], "*", ...fields));
      }
      // A job that kills whatever runs it: this process dies as under SIGKILL.
      if (values.crash || (values["crash-on"] !== undefined && job.id === values["crash-on"])) {
        process.kill(process.pid, "SIGKILL");
      }
      if (sleepMs > 0) await sleep(sleepMs);
      if (job.id === values["hold-group-on"] && job.attempt === 1) {
        throw new RetryAfter(retryAfterMs, { group: job.group });
      }
      if (overloadEvery !== undefined && job.attempt % overloadEvery === 0) throw new RetryAfter(retryAfterMs);
      if (failFirst !== undefined) {
        const i = trailingNumber(job.id);
        if (i !== null && job.attempt <= i % (failFirst + 1)) throw new Error("planned failure");
      }
      if (values.fail !== undefined) throw new Error(values.fail);
      if (values.done) await retried(() => side.hincrby(values.done, job.id, 1));
    } finally {
      running--;
    }
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
  const timers = [];
  if (deadlineSecs > 0) {
    const t = setTimeout(() => { summary().then(() => process.exit(2)); }, deadlineSecs * 1000);
    t.unref();
    timers.push(t);
  }
  if (jobs !== undefined) {
    // Done or dead: either way the job has its outcome. A failed poll (a failover) is only
    // tried again at the next one.
    const deads = queue.shardKeys.map((k) => k.dead); // every shard's
    let polling = false;
    const t = setInterval(async () => {
      if (polling) return;
      polling = true;
      try {
        const [done, ...gone] = await Promise.all([side.hlen(values.done), ...deads.map((d) => side.zcard(d))]);
        if (Number(done) + gone.reduce((sum, n) => sum + Number(n), 0) >= jobs) worker.close();
      } catch {
        // next poll
      } finally {
        polling = false;
      }
    }, 50);
    t.unref();
    timers.push(t);
  }
  try {
    await worker.run();
  } finally {
    for (const t of timers) clearTimeout(t);
    await summary();
    side.disconnect();
  }
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
    group: values.group,
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

// A signed integer option (Unix ms may be negative), or undefined.
function signed(values, name) {
  if (values[name] === undefined) return undefined;
  const v = Number(values[name]);
  if (!Number.isSafeInteger(v)) throw new Error(`--${name}: '${values[name]}' is not an integer`);
  return v;
}

// Prints the fire time of the armed occurrence.
async function repeat(values, queue) {
  for (const name of ["id", "spec", "payload"]) if (values[name] === undefined) throw new Error(`repeat needs --${name}`);
  const fire = await queue.repeat(values.id, values.spec, values.payload, {
    jitterMs: int(values, "jitter-ms", 0),
    tz: values.tz,
    fromMs: signed(values, "from-ms"),
    untilMs: signed(values, "until-ms"),
  });
  await write(String(fire));
}

// Prints each definition as a JSON object a line, with the other crossworkers' field names.
async function repeats(queue) {
  for (const r of await queue.repeats()) {
    await write(JSON.stringify({
      id: r.id,
      spec: r.spec,
      jitter_ms: r.jitterMs,
      tz: r.tz,
      from_ms: r.fromMs,
      until_ms: r.untilMs,
      next_ms: r.nextMs,
      fire_at_ms: r.fireAtMs,
    }));
  }
}

// Prints true when the definition existed, else false.
async function unrepeat(values, queue) {
  if (values.id === undefined) throw new Error("unrepeat needs --id ID");
  await write(String(await queue.unrepeat(values.id)));
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
      cluster: { type: "boolean" },
      "fail-first": { type: "string" },
      "overload-every": { type: "string" },
      "retry-after-ms": { type: "string" },
      "crash-on": { type: "string" },
      "hold-group-on": { type: "string" },
      "log-takes": { type: "boolean" },
      "log-starts": { type: "string" },
      jobs: { type: "string" },
      "deadline-secs": { type: "string" },
      count: { type: "string" },
      "id-prefix": { type: "string" },
      "delay-ms": { type: "string" },
      group: { type: "string" },
      id: { type: "string" },
      "older-than-ms": { type: "string" },
      ran: { type: "string" },
      spec: { type: "string" },
      payload: { type: "string" },
      "jitter-ms": { type: "string" },
      tz: { type: "string" },
      "from-ms": { type: "string" },
      "until-ms": { type: "string" },
      shards: { type: "string" },
    },
    strict: true,
  });
  const commands = {
    work: () => work(values, connection, queue),
    add: () => add(values, queue),
    dead: () => dead(queue),
    requeue: () => requeue(values, queue),
    purge: () => purge(values, queue),
    repeat: () => repeat(values, queue),
    repeats: () => repeats(queue),
    unrepeat: () => unrepeat(values, queue),
  };
  if (!Object.hasOwn(commands, command) || !values.url || !values.queue) throw new Error(USAGE);
  const shards = int(values, "shards", 1);
  if (shards < 1) throw new Error("--shards: N is an integer >= 1");
  const connection = values.cluster ? clusterOf(values.url) : new Redis(values.url);
  connection.on("error", () => {}); // reconnected by ioredis (see work)
  const queue = new Queue(connection, values.queue, { shards });
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

// Scenarios 6 (leases, a killed worker) and 7 (SIGTERM), with workers in other processes
// (test/crossworker.mjs), and the crossworker's add and dead commands.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { setTimeout as sleep } from "node:timers/promises";
import { Queue, Worker } from "../index.js";
import { TestServer, queueName, waitFor, crossworker } from "./server.mjs";

let server;
const children = new Set();
before(async () => { server = await TestServer.start(); });
after(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  await server?.stop();
});

// Runs the crossworker with a command; resolves to {code, signal, stdout, stderr} at exit.
function cross(args) {
  const child = spawn(process.execPath, [crossworker, ...args], { stdio: ["ignore", "pipe", "pipe"] });
  children.add(child);
  const out = { stdout: "", stderr: "" };
  child.stdout.on("data", (d) => { out.stdout += d; });
  child.stderr.on("data", (d) => { out.stderr += d; });
  child.exited = new Promise((r) => child.on("exit", (code, signal) => {
    children.delete(child);
    r({ code, signal, ...out });
  }));
  child.out = out;
  return child;
}

// A crossworker `work` process, once it printed `ready`.
async function startWorker(queue, options) {
  const child = cross(["work", "--url", server.url, "--queue", queue.name, ...options]);
  await waitFor(() => child.out.stdout.includes("ready\n") || child.exitCode !== null, "the worker to be ready");
  assert.equal(child.exitCode, null, `the worker exited: ${child.out.stderr}`);
  return child;
}

// The in-test worker doing what a crossworker does with --started and --done.
function localWorker(client, queue, started, done, sleepMs, options) {
  return new Worker(queue, async (job) => {
    await client.rpush(started, job.id);
    if (sleepMs) await sleep(sleepMs);
    await client.hincrby(done, job.id, 1);
  }, options);
}

test("crossworker add and dead", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("cli"));
  const added = await cross(["add", "--url", server.url, "--queue", queue.name, "--count", "3", "--id-prefix", "j-"]).exited;
  assert.equal(added.code, 0, added.stderr);
  assert.deepEqual(added.stdout.trim().split("\n"), ["j-0", "j-1", "j-2"]);
  const generated = await cross(["add", "--url", server.url, "--queue", queue.name, "--count", "2"]).exited;
  assert.equal(generated.code, 0, generated.stderr);
  const ids = generated.stdout.trim().split("\n");
  assert.equal(ids.length, 2);
  for (const id of ids) assert.match(id, /^\d{13}-[0-9a-f]{16}$/);
  assert.deepEqual(await client.hgetBuffer(queue.keys.jobs, "j-2"), Buffer.from("payload-2"));
  assert.deepEqual(await client.hgetBuffer(queue.keys.jobs, ids[1]), Buffer.from("payload-1"));

  const w = await startWorker(queue, ["--fail", "no luck", "--max-attempts", "1"]);
  await waitFor(async () => (await queue.counts()).dead === 5, "five dead jobs");
  w.kill("SIGTERM");
  assert.equal((await w.exited).code, 0);
  const dead = await cross(["dead", "--url", server.url, "--queue", queue.name]).exited;
  assert.equal(dead.code, 0, dead.stderr);
  const records = dead.stdout.trim().split("\n").map((l) => JSON.parse(l));
  assert.equal(records.length, 5);
  assert.deepEqual(records.map((r) => r.id).sort(), ["j-0", "j-1", "j-2", ...ids].sort());
  for (const r of records) {
    assert.deepEqual(Object.keys(r), ["id", "died_at_ms", "attempts", "error", "payload_hex"]);
    assert.equal(r.attempts, 1);
    assert.equal(r.error, "no luck");
    assert.equal(typeof r.died_at_ms, "number");
  }
  assert.equal(Buffer.from(records.find((r) => r.id === "j-1").payload_hex, "hex").toString(), "payload-1");
  for (let i = 1; i < records.length; i++) assert.ok(records[i - 1].died_at_ms <= records[i].died_at_ms);

  // A dead id with no error written and its payload gone: both print as JSON null.
  const other = new Queue(client, queueName("cli-null"));
  await client.zadd(other.keys.dead, 1000, "bare");
  const bare = await cross(["dead", "--url", server.url, "--queue", other.name]).exited;
  assert.equal(bare.code, 0, bare.stderr);
  assert.deepEqual(JSON.parse(bare.stdout.trim()),
    { id: "bare", died_at_ms: 1000, attempts: 0, error: null, payload_hex: null });
});

test("a handler running three leases long, with a second live worker on the queue, runs once", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("lease"));
  const started = `${queue.name}:started`;
  const done = `${queue.name}:done`;
  const other = await startWorker(queue, ["--lease-ms", "300", "--sleep-ms", "1000", "--concurrency", "2",
    "--started", started, "--done", done]);
  const local = localWorker(client, queue, started, done, 1000, { leaseMs: 300, concurrency: 2 });
  const running = local.run();
  try {
    const ids = await queue.addMany(["a", "b", "c", "d"]);
    await waitFor(async () => (await client.hlen(done)) === 4, "four jobs done");
    await sleep(1000); // a run twice would show meanwhile
    const counts = await client.hgetall(done);
    for (const id of ids) assert.equal(counts[id], "1", `job ${id} ran ${counts[id]} times`);
    assert.equal(await client.llen(started), 4);
  } finally {
    other.kill("SIGTERM");
    await local.close();
    await running;
  }
  assert.equal((await other.exited).code, 0);
});

test("the job of a worker killed mid-job runs in another worker within a few leases; none lost", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("killed"));
  const started = `${queue.name}:started`;
  const done = `${queue.name}:done`;
  const leaseMs = 1000;
  const victim = await startWorker(queue, ["--lease-ms", String(leaseMs), "--sleep-ms", "600000",
    "--concurrency", "3", "--started", started, "--done", done]);
  const ids = await queue.addMany(["a", "b", "c", "d", "e"]);
  await waitFor(async () => (await client.llen(started)) === 3, "the victim to start three jobs");
  const taken = await client.lrange(started, 0, -1);
  victim.kill("SIGKILL");
  assert.equal((await victim.exited).signal, "SIGKILL");
  const killedAt = Date.now();
  const local = localWorker(client, queue, started, done, 0, { leaseMs, concurrency: 5 });
  const running = local.run();
  let elapsed;
  try {
    await waitFor(async () => {
      const d = await client.hgetall(done);
      return taken.every((id) => d[id] === "1");
    }, "the killed worker's jobs to run elsewhere", 30000);
    elapsed = Date.now() - killedAt;
    await waitFor(async () => (await client.hlen(done)) === 5, "every job done");
  } finally {
    await local.close();
    await running;
  }
  assert.ok(elapsed < 10 * leaseMs, `the jobs ran ${elapsed} ms after the kill`);
  const d = await client.hgetall(done);
  for (const id of ids) assert.equal(d[id], "1");
  assert.deepEqual(await queue.counts(), { scheduled: 0, due: 0, pending: 0, inFlight: 0, dead: 0 });
});

test("SIGTERM: running handlers finish and are written, nothing new is taken, exit 0", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("term"));
  const started = `${queue.name}:started`;
  const done = `${queue.name}:done`;
  const w = await startWorker(queue, ["--sleep-ms", "1500", "--concurrency", "3",
    "--started", started, "--done", done]);
  const first = await queue.addMany(["a", "b", "c"]);
  await waitFor(async () => (await client.llen(started)) === 3, "three jobs to start");
  const later = await queue.addMany(["d", "e"]);
  w.kill("SIGTERM");
  const exit = await w.exited;
  assert.equal(exit.code, 0, exit.stderr);
  const d = await client.hgetall(done);
  for (const id of first) assert.equal(d[id], "1");
  assert.deepEqual((await client.lrange(started, 0, -1)).sort(), [...first].sort());
  for (const id of later) assert.equal(await client.hexists(queue.keys.jobs, id), 1);
  assert.deepEqual(await queue.counts(), { scheduled: 0, due: 0, pending: 2, inFlight: 0, dead: 0 });
});

test("SIGTERM: a handler outliving shutdownTimeoutMs is left in the group and taken over after the lease", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("outlive"));
  const started = `${queue.name}:started`;
  const done = `${queue.name}:done`;
  const leaseMs = 1000;
  const w = await startWorker(queue, ["--sleep-ms", "600000", "--shutdown-timeout-ms", "300",
    "--lease-ms", String(leaseMs), "--started", started, "--done", done]);
  const id = await queue.add("slow");
  await waitFor(async () => (await client.llen(started)) === 1, "the job to start");
  w.kill("SIGTERM");
  const exit = await w.exited;
  assert.equal(exit.code, 0, exit.stderr);
  const pending = await client.xpending(queue.keys.pending, "workers", "-", "+", 10);
  assert.equal(pending.length, 1, "the entry is still delivered and unacknowledged");
  assert.equal(await client.hexists(done, id), 0);
  const local = localWorker(client, queue, started, done, 0, { leaseMs });
  const running = local.run();
  try {
    await waitFor(async () => (await client.hget(done, id)) === "1", "another worker to take the job over", 30000);
  } finally {
    await local.close();
    await running;
  }
  assert.deepEqual(await client.lrange(started, 0, -1), [id, id]);
  assert.deepEqual(await queue.counts(), { scheduled: 0, due: 0, pending: 0, inFlight: 0, dead: 0 });
});

test("an entry delivered more than maxDeliveries times is failed unrun", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("poison"));
  const k = queue.keys;
  await client.xgroup("CREATE", k.pending, "workers", "0", "MKSTREAM");
  const id = await queue.add("poison");
  // Three deliveries to consumers that never answer (a read, then two claims).
  const [[, [[entry]]]] = await client.xreadgroup("GROUP", "workers", "gone-1", "COUNT", 1, "STREAMS", k.pending, ">");
  await client.xclaim(k.pending, "workers", "gone-2", 0, entry);
  await client.xclaim(k.pending, "workers", "gone-3", 0, entry);
  let runs = 0;
  const worker = new Worker(queue, async () => { runs++; }, { leaseMs: 300, maxDeliveries: 3, maxAttempts: 1 });
  const running = worker.run();
  try {
    await waitFor(async () => (await queue.counts()).dead === 1, "the job to die");
  } finally {
    await worker.close();
    await running;
  }
  assert.equal(runs, 0);
  const [record] = await queue.dead(0, 1);
  assert.equal(record.id, id);
  assert.equal(record.attempts, 1);
  assert.equal(record.error, "delivered 4 times without an outcome");
  assert.deepEqual(await queue.counts(), { scheduled: 0, due: 0, pending: 0, inFlight: 0, dead: 1 });
});

// The options the cross-language cluster tests drive (/work/shared/plan/crossworker-cli.md),
// on one server: --fail-first's planned failures, --log-takes' lines naming the entry each run
// came from, --jobs ending the worker once every job has its outcome, and the summary.
test("crossworker --fail-first, --log-takes, --jobs and the summary", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("plan"));
  const done = `{${queue.name}}:done`;
  const added = await cross(["add", "--url", server.url, "--queue", queue.name, "--count", "4", "--id-prefix", "job-"]).exited;
  assert.equal(added.code, 0, added.stderr);
  const w = await startWorker(queue, ["--done", done, "--jobs", "4", "--fail-first", "2", "--log-takes",
    "--backoff", "fixed:0", "--concurrency", "2"]);
  const end = await w.exited;
  assert.equal(end.code, 0, end.stderr);
  const lines = end.stdout.trim().split("\n");
  const took = lines.filter((l) => l.startsWith("took "));
  // job-i fails its first i % 3 attempts: job-0 runs once, job-1 twice, job-2 three times, job-3 once.
  const attempts = {};
  for (const line of took) {
    const [, entry, id, attempt] = line.split(" ");
    assert.match(entry, /^\d+-\d+$/);
    attempts[id] = [...(attempts[id] || []), Number(attempt)];
  }
  assert.deepEqual(attempts, { "job-0": [1], "job-1": [1, 2], "job-2": [1, 2, 3], "job-3": [1] });
  // Each run came from its own entry: a retry is a new entry of the stream.
  assert.equal(new Set(took.map((l) => l.split(" ")[1])).size, took.length);
  const summary = JSON.parse(lines.at(-1).replace(/^summary /, ""));
  assert.equal(summary.runs, 7);
  assert.ok(summary.max_concurrent >= 1 && summary.max_concurrent <= 2, lines.at(-1));
  assert.deepEqual(await client.hgetall(done), { "job-0": "1", "job-1": "1", "job-2": "1", "job-3": "1" });
  assert.equal((await queue.counts()).inFlight, 0);
});

test("crossworker --deadline-secs exits 2 with its summary; --overload-every holds the queue", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("deadline"));
  await queue.add("x", { id: "only" });
  const w = await startWorker(queue, ["--overload-every", "1", "--retry-after-ms", "60000", "--deadline-secs", "2",
    "--backoff", "fixed:0"]);
  const end = await w.exited;
  assert.equal(end.code, 2, end.stderr);
  assert.match(end.stdout, /\nsummary \{"runs":1,"max_concurrent":1\}\n$/);
  // The RetryAfter of attempt 1 held the schedule: the retry waits there, due but not released.
  const limits = await client.call("ECHO.LIMITS", queue.keys.schedule);
  const heldUntil = Number(limits[limits.indexOf("held-until-ms") + 1]);
  assert.ok(heldUntil > Date.now() + 50000, `held until ${heldUntil}`);
  assert.equal(await client.hget(queue.keys.attempts, "only"), "1");
});

test("crossworker --crash-on kills the process at that job only", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("crashon"));
  const started = `{${queue.name}}:started`;
  await queue.add("a", { id: "fine" });
  const w = await startWorker(queue, ["--crash-on", "boom", "--started", started, "--done", `{${queue.name}}:done`]);
  await waitFor(async () => (await client.hget(`{${queue.name}}:done`, "fine")) === "1", "job fine");
  assert.equal(w.exitCode, null);
  await queue.add("b", { id: "boom" });
  const end = await w.exited;
  assert.equal(end.signal, "SIGKILL");
  assert.doesNotMatch(end.stdout, /summary/);
  assert.deepEqual(await client.lrange(started, 0, -1), ["fine", "boom"]);
});

test("crossworker --shards N: every subcommand over a sharded queue", async () => {
  const client = server.client();
  const name = queueName("cli-shards");
  const queue = new Queue(client, name, { shards: 3 });
  const run = async (args) => {
    const r = await cross([...args, "--url", server.url, "--queue", name, "--shards", "3"]).exited;
    assert.equal(r.code, 0, r.stderr);
    return r.stdout.trim().split("\n");
  };
  const ids = await run(["add", "--count", "12", "--id-prefix", "s-"]);
  assert.equal(ids.length, 12);
  for (const id of ids) assert.equal(await client.hexists(queue.shardKeys[queue.shardOf(id)].jobs, id), 1, id);
  assert.equal(new Set(ids.map((id) => queue.shardOf(id))).size, 3);

  const w = await startWorker(queue, ["--shards", "3", "--fail", "no luck", "--max-attempts", "1"]);
  await waitFor(async () => (await queue.counts()).dead === 12, "every shard's jobs dead");
  w.kill("SIGTERM");
  assert.equal((await w.exited).code, 0);
  const dead = (await run(["dead"])).map((l) => JSON.parse(l));
  assert.deepEqual(dead.map((r) => r.id).sort(), [...ids].sort());
  assert.deepEqual(await run(["requeue", "--id", "s-7"]), ["true"]);
  assert.deepEqual(await run(["purge"]), ["11"]);

  await run(["repeat", "--id", "nightly", "--spec", "every:60000", "--payload", "p"]);
  await run(["repeat", "--id", "hourly", "--spec", "every:3600000", "--payload", "p"]);
  assert.deepEqual((await run(["repeats"])).map((l) => JSON.parse(l).id), ["hourly", "nightly"]);
  assert.deepEqual(await run(["unrepeat", "--id", "nightly"]), ["true"]);
  assert.deepEqual(await run(["unrepeat", "--id", "nightly"]), ["false"]);

  for (const shards of ["0", "1025"]) {
    const refused = await cross(["dead", "--url", server.url, "--queue", name, "--shards", shards]).exited;
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /shards/);
  }
});

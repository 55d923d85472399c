// Recurring jobs (docs/clients.md, Recurring jobs): repeat() declares a definition the server keeps
// and arms, one occurrence `<id>@<nominal_ms>` at a time; a worker runs each occurrence as a job
// with the definition's payload, and no outcome of a run touches the definition; unrepeat() ends
// it. Arguments the server would refuse for their form are refused here, with nothing sent.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { Queue, Worker } from "../index.js";
import { TestServer, queueName, serverTime, waitFor } from "./server.mjs";

let server;
before(async () => { server = await TestServer.start(); });
after(async () => { await server?.stop(); });

const PAYLOAD = Buffer.from("the report's payload \u0000\u00ff", "latin1");

// How many times the server ran `command` (INFO commandstats; a module's command by the name it
// registered, upper case).
async function calls(client, command) {
  const line = (await client.info("commandstats")).split("\r\n").find((l) => l.startsWith(`cmdstat_${command}:`));
  return line ? Number(/calls=(\d+)/.exec(line)[1]) : 0;
}

const queueKeys = async (client, queue) => (await client.keys(`{${queue.name}}:*`)).sort();

function nominal(occurrence, id) {
  const at = occurrence.lastIndexOf("@");
  assert.equal(occurrence.slice(0, at), id, occurrence);
  return Number(occurrence.slice(at + 1));
}

test("repeat, repeats and unrepeat round trip", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("repeat"));
  const k = queue.keys;
  const before = await serverTime(client);
  const fire = await queue.repeat("minutely", "every:60000", PAYLOAD);
  const after = await serverTime(client);
  // every: from the call, the first occurrence one interval later, no jitter: fired at it
  assert.ok(before + 60000 <= fire && fire <= after + 60000, `${before} ${fire} ${after}`);
  const until = before + 30 * 86400000;
  const report = await queue.repeat("report", "cron:0 9 * * MON-FRI", "text payload",
    { jitterMs: 60000, tz: "America/New_York", fromMs: before, untilMs: until });
  const listed = await queue.repeats();
  assert.deepEqual(listed.map((r) => r.id), ["minutely", "report"]);
  const [minutely, daily] = listed;
  assert.deepEqual(minutely, {
    id: "minutely", spec: "every:60000", jitterMs: 0, tz: "UTC", fromMs: null, untilMs: null, nextMs: fire,
    fireAtMs: fire,
  });
  assert.deepEqual({ ...daily, nextMs: 0 }, {
    id: "report", spec: "cron:0 9 * * MON-FRI", jitterMs: 60000, tz: "America/New_York", fromMs: before,
    untilMs: until, nextMs: 0, fireAtMs: report,
  });
  // A weekday's 9:00 in New York (13:00 or 14:00 UTC, by daylight saving time), after now, within
  // the next week; fired within its jitter.
  const at = new Date(daily.nextMs);
  assert.ok([13, 14].includes(at.getUTCHours()) && at.getUTCMinutes() === 0 && daily.nextMs % 60000 === 0, at.toISOString());
  assert.ok(before < daily.nextMs && daily.nextMs <= before + 7 * 86400000);
  assert.ok(daily.nextMs <= report && report <= daily.nextMs + 60000);
  // Each armed occurrence is a job of the queue: in the schedule by its fire time, its payload in
  // the jobs hash as add() stores one.
  const one = `minutely@${fire}`;
  const two = `report@${daily.nextMs}`;
  const schedule = await client.zrange(k.schedule, 0, -1, "WITHSCORES");
  assert.deepEqual(Object.fromEntries(Array.from({ length: schedule.length / 2 }, (_, i) =>
    [schedule[2 * i], Number(schedule[2 * i + 1])])), { [one]: fire, [two]: report });
  assert.deepEqual(await client.hgetallBuffer(k.jobs), { [one]: PAYLOAD, [two]: Buffer.from("text payload") });
  assert.equal(await queue.unrepeat("report"), true);
  assert.equal(await queue.unrepeat("report"), false);
  assert.deepEqual((await queue.repeats()).map((r) => r.id), ["minutely"]);
  assert.deepEqual(await client.zrange(k.schedule, 0, -1), [one]);
  assert.deepEqual(await client.hkeys(k.jobs), [one]);
  assert.equal(await queue.unrepeat("minutely"), true);
  assert.deepEqual(await queue.repeats(), []);
  // Only the stream the workers read is left (made by repeat(), see below).
  assert.deepEqual(await queueKeys(client, queue), [k.pending]);
});

test("the same definition again changes nothing", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("repeat-same"));
  const k = queue.keys;
  const first = await queue.repeat("tick", "every:60000", PAYLOAD, { jitterMs: 30000 });
  // Another instance of the application declaring it at its start: nothing moves.
  assert.equal(await queue.repeat("tick", "every:60000", PAYLOAD, { jitterMs: 30000 }), first);
  assert.equal(await new Queue(client, queue.name).repeat("tick", "every:60000", new Uint8Array(PAYLOAD),
    { jitterMs: 30000, tz: null, fromMs: undefined }), first);
  assert.deepEqual((await queue.repeats()).map((r) => r.fireAtMs), [first]);
  assert.equal(await client.zcard(k.schedule), 1);
  // A payload that starts like a group's envelope is stored as add() stores it (wrapped with no
  // group), the same every time, so it is the same definition too.
  const tricky = Buffer.from("\0echomq-group:4:acmepayload");
  const again = await queue.repeat("tricky", "every:60000", tricky);
  assert.equal(await queue.repeat("tricky", "every:60000", tricky), again);
  assert.deepEqual(await client.hgetBuffer(k.jobs, `tricky@${again}`),
    Buffer.concat([Buffer.from("\0echomq-group:0:"), tricky]));
  // A different definition replaces it: one occurrence still, with the new payload.
  await queue.repeat("tick", "every:60000", "new", { jitterMs: 30000 });
  const tick = (await queue.repeats()).find((r) => r.id === "tick");
  assert.deepEqual((await client.zrange(k.schedule, 0, -1)).sort(), [`tick@${tick.nextMs}`, `tricky@${again}`].sort());
  assert.equal(await client.hget(k.jobs, `tick@${tick.nextMs}`), "new");
  assert.equal(await client.hlen(k.jobs), 2);
});

const BAD = [
  // [id, spec, options, error]
  ["", "every:1000", {}, TypeError],
  ["x".repeat(1025), "every:1000", {}, RangeError],
  ["é".repeat(513), "every:1000", {}, RangeError],
  ["\uD800", "every:1000", {}, TypeError],
  [7, "every:1000", {}, TypeError],
  ["id", "every:999", {}, RangeError],
  ["id", "every:10000000000001", {}, RangeError],
  ["id", "every:01000", {}, RangeError],
  ["id", "every:+1000", {}, RangeError],
  ["id", "every:1e3", {}, RangeError],
  ["id", "every: 1000", {}, RangeError],
  ["id", "every:", {}, RangeError],
  ["id", "hourly", {}, RangeError],
  ["id", "", {}, RangeError],
  ["id", "cron:", {}, RangeError],
  ["id", "cron:   ", {}, RangeError],
  ["id", Buffer.from("every:1000"), {}, TypeError],
  ["id", "every:1000", { jitterMs: -1 }, RangeError],
  ["id", "every:1000", { jitterMs: 1001 }, RangeError],
  ["id", "cron:* * * * *", { jitterMs: 10000000000001 }, RangeError],
  ["id", "every:1000", { jitterMs: 1.5 }, TypeError],
  ["id", "every:1000", { jitterMs: "5" }, TypeError],
  ["id", "every:1000", { jitterMs: null }, TypeError],
  ["id", "every:1000", { tz: "" }, RangeError],
  ["id", "every:1000", { tz: 1 }, TypeError],
  ["id", "every:1000", { fromMs: "5" }, TypeError],
  ["id", "every:1000", { untilMs: 2 ** 63 }, TypeError],
  ["id", "every:1000", { fromMs: NaN }, TypeError],
  ["id", "every:1000", { fromMs: 10, untilMs: 9 }, RangeError],
];

test("bad arguments reject before anything is sent", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("repeat-bad"));
  const sent = await calls(client, "ECHO.REPEAT");
  for (const [id, spec, options, error] of BAD) {
    await assert.rejects(queue.repeat(id, spec, "p", options), error, `${id} ${spec} ${JSON.stringify(options)}`);
  }
  for (const payload of [null, undefined, 5, ["x"]]) {
    await assert.rejects(queue.repeat("id", "every:1000", payload), TypeError);
  }
  await assert.rejects(queue.unrepeat(""), TypeError);
  assert.equal(await calls(client, "ECHO.REPEAT"), sent);
  assert.deepEqual(await queueKeys(client, queue), []);
  // The bounds are the server's: it refuses just past them too, and takes them.
  for (const words of [["x".repeat(1025), "every:1000"], ["id", "every:999"], ["id", "every:1000", "JITTER", "1001"]]) {
    await assert.rejects(client.call("ECHO.REPEAT", queue.keys.schedule, ...words), /^ReplyError: ERR/);
  }
  await queue.repeat("x".repeat(1024), "every:1000", "p", { jitterMs: 1000 });
  assert.equal(await calls(client, "ECHO.REPEAT"), sent + 4, "the count sees what is sent");
  await queue.repeat("é".repeat(512), "every:10000000000000", "p", { jitterMs: 10000000000000 });
  await queue.repeat("cron", "cron:0 0 1 1 *", "p",
    { jitterMs: 60000, tz: "Europe/Berlin", fromMs: -Number.MAX_SAFE_INTEGER, untilMs: Number.MAX_SAFE_INTEGER });
  assert.equal((await queue.repeats()).length, 3);
});

test("what only the server knows is refused with nothing written", async () => {
  const client = server.client();
  for (const [spec, options, wording] of [
    ["cron:61 * * * *", {}, /invalid spec/],
    ["cron:* * * *", {}, /invalid spec/],
    ["cron:0 0 30 2 *", {}, /invalid spec/],
    ["every:60000", { tz: "Mars/Olympus" }, /invalid TZ/],
    ["every:60000", { untilMs: 1 }, /no occurrence still to come/],
  ]) {
    const queue = new Queue(client, queueName("repeat-refused"));
    await assert.rejects(queue.repeat("id", spec, "p", options), wording);
    assert.deepEqual(await queue.repeats(), []);
    assert.equal(await client.exists(queue.keys.schedule, queue.keys.jobs), 0);
  }
});

// every:1000 on the server's timer and one Worker (maxAttempts 2): the first occurrence succeeds,
// the second fails once and is retried, the third fails twice and is dead, the later ones succeed;
// the definition is there after each, every occurrence ran with the payload and its own id, no
// nominal second was skipped, none ran twice; unrepeat() stops it.
test("a worker runs each occurrence once and no outcome ends the definition", async () => {
  const client = server.client();
  const queue = new Queue(client, queueName("repeat-run"));
  const k = queue.keys;
  await client.call("CONFIG", "SET", "echomq.auto-promote", `${k.schedule} ${k.pending}`);
  const runs = [];
  let worker;
  let running;
  let first;
  try {
    first = await queue.repeat("tick", "every:1000", PAYLOAD);
    // The timer releases the first occurrence with no worker started: into the workers' stream,
    // which repeat() made (a release into a missing pending would make it a list).
    await waitFor(async () => (await client.xlen(k.pending)) === 1, "the first release", 10000);
    assert.equal(await client.type(k.pending), "stream");
    const ids = () => runs.map(([id]) => id);
    worker = new Worker(queue, (job) => {
      const n = (nominal(job.id, "tick") - first) / 1000;
      runs.push([job.id, job.payload, job.attempt]);
      if ((n === 1 && job.attempt === 1) || n === 2) throw new Error(`occurrence ${n}, attempt ${job.attempt}`);
    }, { maxAttempts: 2, backoff: "fixed:100" });
    running = worker.run();
    const ran = (n, attempt = 1) => runs.some(([id, , a]) => id === `tick@${first + 1000 * n}` && a === attempt);
    const listed = async () => (await queue.repeats()).map((r) => r.id);
    await waitFor(async () => (await client.hexists(k.jobs, `tick@${first}`)) === 0, "the first success", 15000);
    assert.deepEqual(await listed(), ["tick"]);
    await waitFor(() => ran(1, 2), "the retry", 15000);
    assert.deepEqual(await listed(), ["tick"]);
    await waitFor(async () => (await queue.counts()).dead === 1, "the dead occurrence", 15000);
    assert.deepEqual(await listed(), ["tick"]);
    await waitFor(() => ran(3) && ran(4), "the occurrences after the dead one", 15000);
    assert.equal(await queue.unrepeat("tick"), true);
    const settled = { scheduled: 0, due: 0, pending: 0, inFlight: 0, dead: 1 };
    await waitFor(async () => JSON.stringify(await queue.counts()) === JSON.stringify(settled),
      "the released occurrences to be done", 15000);
    const count = runs.length;
    await sleep(2500); // two intervals: an occurrence still armed would have run
    assert.equal(runs.length, count, ids().join());
  } finally {
    await worker?.close();
    await running;
    await client.call("CONFIG", "SET", "echomq.auto-promote", "");
  }
  assert.deepEqual(await queue.repeats(), []);
  assert.equal(await client.zcard(k.schedule), 0);
  // Every occurrence from the first to the last released, each run once (the failing ones once per
  // attempt), with the definition's payload and its own id.
  const nominals = [...new Set(runs.map(([id]) => nominal(id, "tick")))].sort((a, b) => a - b);
  assert.deepEqual(nominals, Array.from({ length: nominals.length }, (_, i) => first + 1000 * i));
  assert.ok(nominals.length >= 5, nominals.join());
  assert.ok(runs.every(([, payload]) => payload.equals(PAYLOAD)));
  const attempts = new Map();
  for (const [id, , attempt] of runs) attempts.set(id, [...(attempts.get(id) ?? []), attempt]);
  assert.deepEqual(Object.fromEntries([...attempts].filter(([, a]) => a.join() !== "1")), {
    [`tick@${first + 1000}`]: [1, 2],
    [`tick@${first + 2000}`]: [1, 2],
  });
  // The dead occurrence is kept like any dead job, with its payload.
  const [dead] = await queue.dead();
  assert.deepEqual([dead.id, dead.payload, dead.attempts, dead.error],
    [`tick@${first + 2000}`, PAYLOAD, 2, "occurrence 2, attempt 2"]);
});

// The library runs the scripts of the repository's protocol/ folder (their one copy) byte for
// byte and no other: a copy that differs would be cached by the server under another SHA1
// (clients/tests/clients.rs checks all three libraries against a server the same way).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { resolve } from "node:path";
import { Queue, Worker } from "../index.js";
import { SCRIPTS, SCRIPT_FILES, GROUP, MAX_HOLD_MS } from "../src/protocol.js";
import { TestServer, queueName, repoRoot } from "./server.mjs";

const dir = resolve(repoRoot, "protocol");
const files = Object.fromEntries(readdirSync(dir).filter((f) => f.endsWith(".lua"))
  .map((f) => [f, readFileSync(resolve(dir, f))]));
const sha1 = (data) => createHash("sha1").update(data).digest("hex");

let server;
before(async () => { server = await TestServer.start(); });
after(async () => { await server?.stop(); });

test("the scripts are the files of protocol/, byte for byte", () => {
  assert.deepEqual(Object.values(SCRIPT_FILES).sort(), Object.keys(files).sort());
  for (const [key, file] of Object.entries(SCRIPT_FILES)) {
    assert.ok(Buffer.from(SCRIPTS[key], "utf8").equals(files[file]), `${file} differs`);
  }
  const constants = JSON.parse(readFileSync(resolve(dir, "constants.json"), "utf8"));
  assert.equal(GROUP, constants.group);
  assert.equal(MAX_HOLD_MS, constants.max_hold_ms);
});

test("after SCRIPT FLUSH the server caches only the files' SHA1s", async () => {
  const client = server.client();
  await client.script("FLUSH");
  const queue = new Queue(client, queueName("protocol"));
  await queue.add("x", { id: "given" });
  await queue.requeue("given");
  await queue.purgeDead(0);
  // A worker loads its three scripts before it is ready.
  const worker = new Worker(queue, async () => {});
  const ready = new Promise((r) => worker.once("ready", r));
  const running = worker.run();
  await ready;
  await worker.close();
  await running;
  const shas = Object.values(files).map(sha1);
  assert.deepEqual(await client.script("EXISTS", ...shas), shas.map(() => 1));
  const cached = Number((await client.info("memory")).match(/number_of_cached_scripts:(\d+)/)[1]);
  assert.equal(cached, shas.length, "a script text that is not one of protocol/'s was run");
  client.disconnect();
});

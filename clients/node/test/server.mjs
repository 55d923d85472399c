// The test server: a real valkey-server with the echomq module, on a free port, stopped by pid.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { createServer } from "node:net";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import Redis from "iovalkey";

const here = dirname(fileURLToPath(import.meta.url));
export const repoRoot = resolve(here, "..", "..", "..");
export const crossworker = resolve(here, "crossworker.mjs");

function serverBinary() {
  const bin = process.env.ECHOMQ_SERVER || "valkey-server";
  const found = spawnSync(bin, ["--version"], { encoding: "utf8" });
  if (found.error) throw new Error(`${bin} not found: install valkey-server or set ECHOMQ_SERVER`);
  return bin;
}

function modulePath() {
  const path = process.env.ECHOMQ_MODULE || resolve(repoRoot, "target", "release", "libechomq.so");
  if (!existsSync(path)) throw new Error(`the echomq module is missing at ${path}: run make build (or set ECHOMQ_MODULE)`);
  return path;
}

function freePort() {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.on("error", fail);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
  });
}

export class TestServer {
  // `cluster`: a cluster-enabled node with no slots yet (test/cluster.mjs makes a cluster of such).
  static async start({ autoPromote, cluster = false } = {}) {
    const bin = serverBinary();
    const module = modulePath();
    let lastError;
    for (let tries = 0; tries < 5; tries++) {
      const port = await freePort();
      const args = ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
        "--loadmodule", module];
      if (autoPromote) args.push("--echomq.auto-promote", autoPromote);
      let dir = null;
      if (cluster) {
        // A directory of its own: its node id file must not be another attempt's or node's.
        dir = mkdtempSync(join(tmpdir(), "echomq-node-cluster-"));
        args.push("--cluster-enabled", "yes", "--cluster-config-file", join(dir, "nodes.conf"), "--dir", dir,
          "--cluster-node-timeout", "2000", "--repl-diskless-sync-delay", "0");
      }
      const child = spawn(bin, args, { stdio: ["ignore", "pipe", "pipe"] });
      let log = "";
      child.stdout.on("data", (d) => { log += d; });
      child.stderr.on("data", (d) => { log += d; });
      let exited = false;
      const exit = new Promise((r) => child.on("exit", () => { exited = true; r(); }));
      const server = new TestServer(port, child, exit, dir);
      const deadline = Date.now() + 10000;
      while (!exited && Date.now() < deadline) {
        const c = new Redis({ port, host: "127.0.0.1", lazyConnect: true, maxRetriesPerRequest: 0,
          retryStrategy: () => null });
        c.on("error", () => {});
        try {
          await c.connect();
          if ((await c.ping()) === "PONG") {
            c.disconnect();
            return server;
          }
        } catch {
          // not up yet
        }
        c.disconnect();
        await sleep(50);
      }
      lastError = new Error(`valkey-server on port ${port} did not start: ${log}`);
      await server.stop();
    }
    throw lastError;
  }

  constructor(port, child, exit, dir = null) {
    this.port = port;
    this.dir = dir;
    this.url = `redis://127.0.0.1:${port}/`;
    this.child = child;
    this.exit = exit;
    this.clients = [];
  }

  client() {
    const c = new Redis({ port: this.port, host: "127.0.0.1" });
    this.clients.push(c);
    return c;
  }

  async stop() {
    for (const c of this.clients) c.disconnect();
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill("SIGTERM");
    await this.exit;
    if (this.dir) rmSync(this.dir, { recursive: true, force: true });
  }
}

export function queueName(prefix = "t") {
  return `${prefix}-${randomBytes(4).toString("hex")}`;
}

export async function serverTime(client) {
  const [s, us] = await client.time();
  return Number(s) * 1000 + Math.floor(Number(us) / 1000);
}

// Polls fn until it returns a truthy value; fails after timeoutMs.
export async function waitFor(fn, what, timeoutMs = 20000, everyMs = 20) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(everyMs);
  }
}

// Every trace of a job in the queue's keys.
export async function traces(client, queue, id) {
  const k = queue.keys;
  const p = client.pipeline()
    .hexists(k.jobs, id).hexists(k.attempts, id).hexists(k.errors, id)
    .zscore(k.schedule, id).zscore(k.dead, id);
  const r = (await p.exec()).map(([e, v]) => { if (e) throw e; return v; });
  return { jobs: r[0], attempts: r[1], errors: r[2], schedule: r[3], dead: r[4] };
}

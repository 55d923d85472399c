#!/usr/bin/env node
// Fetches the URLs that examples/producer.mjs queued. A server that answers 429 or 503 with
// a Retry-After holds the whole queue that long (RetryAfter); any other failure is retried
// with the worker's backoff, and after the 5th it lands in the dead set.
//
//     node examples/worker.mjs        (stop it with Ctrl-C or SIGTERM: running fetches finish)
import Redis from "iovalkey";
import { Queue, Worker, RetryAfter } from "echomq";

// Retry-After in seconds (or an HTTP date) as ms; null when absent or unreadable.
function retryAfterMs(header) {
  if (header === null) return null;
  const seconds = Number(header);
  if (Number.isFinite(seconds) && seconds >= 0) return Math.round(seconds * 1000);
  const at = Date.parse(header);
  return Number.isNaN(at) ? null : Math.max(0, at - Date.now());
}

async function handler(job) {
  const url = job.payload.toString("utf8");
  const response = await fetch(url, { signal: AbortSignal.timeout(10000) });
  if (response.status === 429 || response.status === 503) {
    const wait = retryAfterMs(response.headers.get("retry-after"));
    if (wait !== null) throw new RetryAfter(wait, `${url}: ${response.status}, retry after ${wait} ms`);
  }
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  const body = await response.arrayBuffer();
  console.log(`${job.id} (attempt ${job.attempt}): ${url} ${body.byteLength} bytes`);
}

const connection = new Redis(process.env.ECHOMQ_URL || "redis://127.0.0.1:6379/");
const worker = new Worker(new Queue(connection, "fetch"), handler, {
  concurrency: 20,
  maxAttempts: 5,
  backoff: "jitter:exponential:1000:60000",
});
worker.on("error", (e) => console.error(`worker: ${e.message}`));
process.on("SIGINT", () => worker.close());
await worker.run(); // SIGTERM closes it too
connection.disconnect();

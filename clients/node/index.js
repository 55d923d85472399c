// echomq: a job queue on a Valkey (or Redis) server with the echomq module.
export { Queue, newJobId } from "./src/queue.js";
export { Worker, RetryAfter } from "./src/worker.js";
export { crc16, keySlot, shardTags, splitLimit } from "./src/keys.js";

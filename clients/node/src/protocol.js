// The protocol's scripts and constants (docs/clients.md): the files of the repository's
// protocol/ folder, the one copy the three libraries share, read once at import. In the
// repository (this file at clients/node/src/) that folder itself; a package packed or installed
// with --install-links holds a copy in its own protocol/ (package.json's prepare script makes it).
import { existsSync, readFileSync } from "node:fs";

const repository = new URL("../../../protocol/", import.meta.url);
const inRepository = import.meta.url.endsWith("/clients/node/src/protocol.js") && existsSync(repository);
export const PROTOCOL_DIR = inRepository ? repository : new URL("../protocol/", import.meta.url);

// As the file holds it, byte for byte: its SHA1 is what the server caches the script by.
const text = (name) => readFileSync(new URL(name, PROTOCOL_DIR), "utf8");

export const SCRIPT_FILES = {
  addWithId: "add_with_id.lua",
  succeed: "succeed.lua",
  fail: "fail.lua",
  handBack: "hand_back.lua",
  requeue: "requeue.lua",
  purgeDead: "purge_dead.lua",
};
export const SCRIPTS = Object.fromEntries(Object.entries(SCRIPT_FILES).map(([k, f]) => [k, text(f)]));

const c = JSON.parse(text("constants.json"));
export const GROUP = c.group; // the stream's consumer group, not a job's group
// A grouped job's payload entry starts with NUL and this (docs/clients.md, Groups).
export const JOB_GROUP_ENVELOPE = Buffer.from(`\0${c.job_group_envelope}`);
export const MAX_JOB_GROUP_BYTES = c.max_job_group_bytes; // what ECHO.ADD ... GROUP takes
export const MAX_DELAY_MS = c.max_delay_ms; // the range ECHO.SCHEDULE takes
export const MAX_HOLD_MS = c.max_hold_ms; // the most ECHO.HOLD takes (a day)
export const MAX_GROUP_RATE = c.max_group_rate; // the largest n of ECHO.GROUPLIMIT's n/s, n/m, n/h
export const MAX_GROUP_BURST = c.max_group_burst; // the largest burst ECHO.GROUPLIMIT takes
export const MAX_GROUPS_COUNT = c.max_groups_count; // the most groups an ECHO.GROUPS page shows
export const MAX_REPEAT_ID_BYTES = c.max_repeat_id_bytes; // the longest id ECHO.REPEAT takes
export const MIN_EVERY_MS = c.min_every_ms; // the shortest every:<ms> ECHO.REPEAT takes
export const MAX_EVERY_MS = c.max_every_ms; // the longest every:<ms>, and the largest jitter
export const MAX_SHARDS = c.max_shards; // the most shards a queue may have
export const MAX_ERROR_BYTES = c.max_error_bytes;
export const ADD_BATCH = c.add_batch; // jobs per transaction of addMany
export const SUCCESS_BATCH = c.success_batch; // (entry, id) pairs per success script call
export const PROMOTE_LIMIT = c.promote_limit;
export const DEFAULTS = Object.freeze({
  backoff: c.default_backoff,
  maxAttempts: c.default_max_attempts,
  leaseMs: c.default_lease_ms,
  maxDeliveries: c.default_max_deliveries,
  shutdownTimeoutMs: c.default_shutdown_timeout_ms,
});

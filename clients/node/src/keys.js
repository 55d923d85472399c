import { createHash } from "node:crypto";
import { Command } from "iovalkey";
import {
  JOB_GROUP_ENVELOPE, MAX_EVERY_MS, MAX_GROUP_BURST, MAX_GROUP_RATE, MAX_JOB_GROUP_BYTES, MAX_REPEAT_ID_BYTES,
  MIN_EVERY_MS,
} from "./protocol.js";

// The six keys of a queue, under one hash tag so a cluster keeps them on one slot.
export function queueKeys(name) {
  if (typeof name !== "string" || name === "") throw new TypeError("a queue name is a non-empty string");
  const key = (suffix) => `{${name}}:${suffix}`;
  return {
    schedule: key("schedule"),
    pending: key("pending"),
    dead: key("dead"),
    jobs: key("jobs"),
    attempts: key("attempts"),
    errors: key("errors"),
  };
}

// Server TIME reply ([seconds, microseconds]) as Unix ms.
export function timeMs(reply) {
  return Number(reply[0]) * 1000 + Math.floor(Number(reply[1]) / 1000);
}

// An iovalkey Cluster (not a Redis connection to one server).
export function isCluster(connection) {
  return Boolean(connection && connection.isCluster);
}

// A command that a Cluster sends to the node owning `key`'s slot, whatever iovalkey's command
// table says of its keys: the ECHO.* commands are not in that table, nor is XGROUP's key (it
// follows a subcommand), so a Cluster would send them to a random node, which answers MOVED (a
// round trip more); and keyless ones (TIME, ECHO.QUEUES, SCRIPT LOAD) must be answered by the
// node that holds the queue: its clock is the one ECHO.LIMITS' held-until-ms is in, its config
// says whether it promotes the queue, its script cache is the one EVALSHA finds.
class OnSlot extends Command {
  constructor(name, args, key) {
    super(name, args, { replyEncoding: "utf8" });
    this.routingKey = key;
  }

  getKeys() {
    return [this.routingKey];
  }
}

// `name args...` on the node of `key`'s slot (on a Redis connection, its one server), the reply
// as call() gives it.
export function onSlot(connection, key, name, ...args) {
  if (!isCluster(connection)) return connection.call(name, ...args);
  return connection.sendCommand(new OnSlot(name, args, key));
}

// `XGROUP CREATE pending <group> 0 MKSTREAM` on the queue's node: the stream and the workers'
// group, a group that exists already (BUSYGROUP) being success; `0` delivers what was added before.
// XGROUP has no key in iovalkey's command table (its key follows a subcommand).
export async function makeStream(connection, pending, group) {
  try {
    await onSlot(connection, pending, "XGROUP", "CREATE", pending, group, "0", "MKSTREAM");
  } catch (e) {
    if (!String(e.message).startsWith("BUSYGROUP")) throw e;
  }
}

const NOSCRIPT = /^NOSCRIPT|^Too many Cluster redirections\. Last error: ReplyError: NOSCRIPT/;

// A script run with EVALSHA, loaded with EVAL when the server does not know it yet.
export class Script {
  constructor(lua, keyCount) {
    this.lua = lua;
    this.keyCount = keyCount;
    this.sha = createHash("sha1").update(lua).digest("hex");
  }

  // Loads the script (before a pipeline of EVALSHAs, so they do not each fall back to EVAL)
  // into the cache of the node that owns `key` (on a Cluster, SCRIPT LOAD has no key).
  async load(connection, key) {
    await onSlot(connection, key, "SCRIPT", "LOAD", this.lua);
  }

  async run(connection, keys, args) {
    try {
      return await connection.evalsha(this.sha, this.keyCount, ...keys, ...args);
    } catch (e) {
      // A Cluster that gave up redirecting wraps the last reply: "Too many Cluster
      // redirections. Last error: ReplyError: NOSCRIPT ..." (the slot's new owner, after a
      // failover or a migration, has not cached the script yet); EVAL is a new command.
      if (!NOSCRIPT.test(String(e && e.message))) throw e;
      return connection.eval(this.lua, this.keyCount, ...keys, ...args);
    }
  }
}

// A job's group (add(..., { group }); not the stream's consumer group) checked as ECHO.ADD
// checks it, before anything is sent: 1..=1024 bytes of UTF-8. undefined or null: no group.
export function checkJobGroup(group) {
  if (group === undefined || group === null) return null;
  if (typeof group !== "string") throw new TypeError("a job group is a string");
  if (LONE_SURROGATE.test(group)) throw new TypeError("a job group is valid UTF-8: this one holds a lone surrogate");
  const bytes = Buffer.byteLength(group);
  if (bytes < 1 || bytes > MAX_JOB_GROUP_BYTES) {
    throw new RangeError(`a job group must be 1..=${MAX_JOB_GROUP_BYTES} bytes, not ${bytes}`);
  }
  return group;
}

// A group's limit checked as ECHO.GROUPLIMIT checks it, before anything is sent: `rate` `<n>/s`,
// `<n>/m` or `<n>/h` with n in 1..=1000000 (no sign, no leading zero, the unit in any case, a fixed
// rate), `burst` an integer in 1..=1000000.
export function checkGroupLimit(rate, burst) {
  if (typeof rate !== "string") throw new TypeError("a group's rate is a string such as \"5/s\"");
  const match = /^([1-9][0-9]*)\/[smhSMH]$/.exec(rate);
  if (!match || Number(match[1]) > MAX_GROUP_RATE) {
    throw new RangeError(
      `a group's rate is <n>/s, <n>/m or <n>/h with n in 1..=${MAX_GROUP_RATE}, not ${JSON.stringify(rate)}`);
  }
  if (!Number.isInteger(burst) || burst < 1 || burst > MAX_GROUP_BURST) {
    throw new RangeError(`a group's burst is an integer in 1..=${MAX_GROUP_BURST}, not ${burst}`);
  }
}

// ECHO.REPEAT's arguments checked as the server checks them, before anything is sent: the id
// (1..=1024 bytes of UTF-8: its occurrences `<id>@<nominal_ms>` are job ids), the spec
// (`every:<ms>` with ms in 1000..=10^13, or `cron:` and its fields, which the server reads), the
// jitter (0..= the interval of `every:`, 0..=10^13 for a cron), the zone (a non-empty name; the
// server knows which exist), `fromMs <= untilMs` (Unix ms, safe integers). Returns the option
// words: JITTER and TZ only when given, so every library sends one definition in the same words
// (a definition declared again changes nothing only when it is the same as written).
export function checkRepeat(id, spec, { jitterMs = 0, tz = null, fromMs = null, untilMs = null } = {}) {
  if (typeof id !== "string" || id === "") throw new TypeError("a recurring job's id is a non-empty string");
  if (LONE_SURROGATE.test(id)) throw new TypeError("a recurring job's id is valid UTF-8: this one holds a lone surrogate");
  const idBytes = Buffer.byteLength(id);
  if (idBytes > MAX_REPEAT_ID_BYTES) {
    throw new RangeError(`a recurring job's id must be 1..=${MAX_REPEAT_ID_BYTES} bytes, not ${idBytes}`);
  }
  if (typeof spec !== "string") throw new TypeError("a spec is a string such as \"every:60000\" or \"cron:0 * * * *\"");
  const every = /^every:(0|[1-9][0-9]*)$/i.exec(spec);
  let jitterBound = MAX_EVERY_MS; // a cron's smallest interval: the server knows it
  if (every) {
    const interval = Number(every[1]);
    if (!(interval >= MIN_EVERY_MS && interval <= MAX_EVERY_MS)) {
      throw new RangeError(`every:<ms> takes ms in ${MIN_EVERY_MS}..=${MAX_EVERY_MS}, not ${every[1]}`);
    }
    jitterBound = interval;
  } else if (!/^cron:[^]*\S/i.test(spec)) {
    throw new RangeError(`a spec is every:<ms> (no sign, no leading zero) or cron:<5 fields>, not ${JSON.stringify(spec)}`);
  }
  const integer = (name, value, low, high) => {
    if (typeof value !== "number" || !Number.isSafeInteger(value)) {
      throw new TypeError(`${name} is a safe integer, not ${typeof value === "number" ? value : typeof value}`);
    }
    if (value < low || value > high) throw new RangeError(`${name} must be in ${low}..=${high}, not ${value}`);
    return value;
  };
  const words = [];
  if (integer("jitterMs", jitterMs, 0, jitterBound) > 0) words.push("JITTER", String(jitterMs));
  if (tz !== undefined && tz !== null) {
    if (typeof tz !== "string") throw new TypeError("tz is a string such as \"Europe/Berlin\"");
    if (tz === "") throw new RangeError("tz must not be empty (null: UTC)");
    if (LONE_SURROGATE.test(tz)) throw new TypeError("tz is valid UTF-8: this one holds a lone surrogate");
    words.push("TZ", tz);
  }
  const given = (v) => v !== undefined && v !== null;
  const limit = Number.MAX_SAFE_INTEGER;
  if (given(fromMs)) words.push("FROM", String(integer("fromMs", fromMs, -limit, limit)));
  if (given(untilMs)) words.push("UNTIL", String(integer("untilMs", untilMs, -limit, limit)));
  if (given(fromMs) && given(untilMs) && untilMs < fromMs) {
    throw new RangeError(`untilMs (${untilMs}) must not be before fromMs (${fromMs})`);
  }
  return words;
}

// A JavaScript string may hold lone surrogates, which have no UTF-8 form.
export const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

// The value stored in {name}:jobs: the payload itself, or for a grouped job the envelope
// `\0echomq-group:<n>:<group>` before it, so that a worker of any language retries the job into
// its group. A payload that starts like an envelope is wrapped with n = 0 (no group), so it is
// never misread; any other payload without a group is stored as it is.
export function wrapPayload(payload, jobGroup) {
  if (jobGroup === null) {
    const head = typeof payload === "string" ? Buffer.from(payload.slice(0, JOB_GROUP_ENVELOPE.length)) : payload;
    if (!startsWithEnvelope(head)) return payload;
    jobGroup = "";
  }
  const group = Buffer.from(jobGroup);
  const body = typeof payload === "string" ? Buffer.from(payload) : payload;
  return Buffer.concat([JOB_GROUP_ENVELOPE, Buffer.from(`${group.length}:`), group, body]);
}

function startsWithEnvelope(value) {
  return value.length >= JOB_GROUP_ENVELOPE.length
    && JOB_GROUP_ENVELOPE.equals(value.subarray(0, JOB_GROUP_ENVELOPE.length));
}

// wrapPayload undone: { payload, jobGroup } (jobGroup the group's bytes as stored, so that a
// retry names exactly that group; null without one). A value that is not a whole envelope is a
// payload as it is.
export function unwrapPayload(value) {
  const whole = { payload: value, jobGroup: null };
  if (!startsWithEnvelope(value)) return whole;
  const start = JOB_GROUP_ENVELOPE.length;
  const colon = value.subarray(start, start + 5).indexOf(0x3a);
  if (colon < 1) return whole;
  const digits = value.toString("latin1", start, start + colon);
  if (!/^[0-9]+$/.test(digits)) return whole;
  const n = Number(digits);
  const from = start + colon + 1;
  if (n > MAX_JOB_GROUP_BYTES || from + n > value.length) return whole;
  return { payload: value.subarray(from + n), jobGroup: n === 0 ? null : value.subarray(from, from + n) };
}

// CRC16-CCITT (XMODEM: polynomial 0x1021, initial 0), the checksum Valkey's keyHashSlot takes
// of a key; `data` a Buffer or a string (its UTF-8 bytes).
const CRC16_TABLE = (() => {
  const table = new Uint16Array(256);
  for (let byte = 0; byte < 256; byte++) {
    let crc = byte << 8;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    table[byte] = crc;
  }
  return table;
})();

export function crc16(data) {
  const bytes = typeof data === "string" ? Buffer.from(data) : data;
  let crc = 0;
  for (const b of bytes) crc = ((crc << 8) & 0xffff) ^ CRC16_TABLE[((crc >> 8) ^ b) & 0xff];
  return crc;
}

export const SLOTS = 16384;

// The slot CLUSTER KEYSLOT answers for `key`: with a hash tag (the bytes between the first `{`
// and the first `}` after it, when not empty) only the tag is hashed, as the server does.
export function keySlot(key) {
  const bytes = typeof key === "string" ? Buffer.from(key) : key;
  const open = bytes.indexOf(0x7b);
  if (open >= 0) {
    const close = bytes.indexOf(0x7d, open + 1);
    if (close > open + 1) return crc16(bytes.subarray(open + 1, close)) % SLOTS;
  }
  return crc16(bytes) % SLOTS;
}

// The tags of a queue's `shards` shards (docs/clients.md, Sharded queues): shard 0 is the queue's
// own tag, so an unsharded queue is shard 0 of any layout; shard i is `name#i`, or `name#i.k` for
// the smallest k whose slot no earlier shard has, so no two shards share a slot (a cluster can
// put each on its own primary) and the first N tags of any layout are those of N shards.
export function shardTags(name, shards) {
  const tags = [name];
  const taken = new Set([crc16(name) % SLOTS]);
  for (let i = 1; i < shards; i++) {
    let tag = `${name}#${i}`;
    for (let k = 1; taken.has(crc16(tag) % SLOTS); k++) tag = `${name}#${i}.${k}`;
    taken.add(crc16(tag) % SLOTS);
    tags.push(tag);
  }
  return tags;
}

// The shard of the job `id` among `shards`: its KEYSLOT mod N, what every library computes.
export function shardOf(id, shards) {
  return keySlot(id) % shards;
}

// The ceiling of a rate (the number of `<n>/<unit>`) and of a burst, as echomq.release-limits
// takes them.
const MAX_LIMIT_RATE = 1000000;
const MAX_LIMIT_BURST = 1000000;
const UNIT_MS = { s: 1000, m: 60000, h: 3600000 };
const RELEASE_RATE = /^(adaptive:)?([1-9][0-9]*)\/([smh])$/i;

// A queue's release limit checked as echomq.release-limits reads it, before anything is sent:
// `<n>/s`, `<n>/m`, `<n>/h` (n in 1..=1000000, no sign nor leading zero, the unit and `adaptive`
// in any case) or `adaptive:` and such a rate; `burst` an integer in 1..=1000000.
export function checkReleaseLimit(rate, burst) {
  if (typeof rate !== "string") throw new TypeError("a rate is a string such as \"500/s\" or \"adaptive:20/m\"");
  const match = RELEASE_RATE.exec(rate);
  if (!match || Number(match[2]) > MAX_LIMIT_RATE) {
    throw new RangeError(`rate '${rate}' is not <n>/s, <n>/m or <n>/h with n in 1..=${MAX_LIMIT_RATE}, or adaptive:<rate>`);
  }
  if (!Number.isInteger(burst) || burst < 1 || burst > MAX_LIMIT_BURST) {
    throw new RangeError(`a burst is an integer in 1..=${MAX_LIMIT_BURST}, not ${burst}`);
  }
  return match;
}

// Each shard's share of the limit `rate burst` over `shards` shards (docs/clients.md): the rate
// divided in its own unit when N divides it, else in the first longer unit where it divides
// while staying <= 1000000, else floored in the longest unit within that bound (at least 1/h);
// the burst's ceiling. One shard keeps the limit as given. Returns [rate, burst].
export function splitLimit(rate, burst, shards) {
  const [, adaptive, digits, unit] = checkReleaseLimit(rate, burst);
  if (shards === 1) return [rate, burst];
  const prefix = adaptive ? "adaptive:" : "";
  const n = Number(digits);
  const units = ["s", "m", "h"].slice(["s", "m", "h"].indexOf(unit.toLowerCase()));
  const perUnit = (u) => (n * UNIT_MS[u]) / UNIT_MS[units[0]]; // n in unit u
  const share = Math.ceil(burst / shards);
  for (const u of units) {
    const total = perUnit(u);
    if (total % shards === 0 && total / shards <= MAX_LIMIT_RATE) return [`${prefix}${total / shards}/${u}`, share];
  }
  for (const u of [...units].reverse()) {
    const floored = Math.floor(perUnit(u) / shards);
    if (floored <= MAX_LIMIT_RATE) return [`${prefix}${Math.max(1, floored)}/${u}`, share];
  }
  throw new Error("unreachable: n/unit over N is within the bound in its own unit");
}

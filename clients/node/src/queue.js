import { randomBytes } from "node:crypto";
import {
  LONE_SURROGATE, Script, checkGroupLimit, checkJobGroup, checkRepeat, makeStream, onSlot, queueKeys, timeMs,
  unwrapPayload, wrapPayload,
} from "./keys.js";
import { ADD_BATCH, GROUP, JOB_GROUP_ENVELOPE, MAX_DELAY_MS, MAX_GROUPS_COUNT, SCRIPTS } from "./protocol.js";

// add() with an id given by the caller: nothing happens while a job with that id exists.
export const ADD_WITH_ID = new Script(SCRIPTS.addWithId, 3);
// dead -> pending, attempts reset; nothing when the id is not dead.
const REQUEUE = new Script(SCRIPTS.requeue, 6);
// Dead jobs that died at or before the server's now - older_than_ms, removed for good.
const PURGE_DEAD = new Script(SCRIPTS.purgeDead, 4);


// A time-ordered unique id: the client's Unix ms as 13 digits, '-', 16 random hex digits.
let pool = Buffer.alloc(0);
let poolAt = 0;
export function newJobId() {
  if (poolAt + 8 > pool.length) {
    pool = randomBytes(8 * 512);
    poolAt = 0;
  }
  const hex = pool.toString("hex", poolAt, poolAt + 8);
  poolAt += 8;
  return `${String(Date.now()).padStart(13, "0")}-${hex}`;
}

function checkPayload(payload) {
  if (typeof payload !== "string" && !Buffer.isBuffer(payload) && !(payload instanceof Uint8Array)) {
    throw new TypeError("a payload is a Buffer, a Uint8Array or a string");
  }
  return payload instanceof Uint8Array && !Buffer.isBuffer(payload)
    ? Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength)
    : payload;
}

// The range ECHO.SCHEDULE takes.
export { MAX_DELAY_MS };

function checkDelay(delayMs) {
  if (!Number.isInteger(delayMs) || delayMs < 0 || delayMs > MAX_DELAY_MS) {
    throw new RangeError(`delayMs is an integer in 0..=${MAX_DELAY_MS}, not ${delayMs}`);
  }
  return delayMs;
}

// A group a limit is set on: a name, never the ungrouped jobs (they have the configured limit).
function namedGroup(group) {
  const name = checkJobGroup(group);
  if (name === null) throw new TypeError("a group limit needs a group: the ungrouped jobs have the configured limit");
  return name;
}

// A field of one ECHO.GROUPS entry, a flat field/value array (RESP2).
function groupField(entry, name) {
  for (let i = 0; i + 1 < entry.length; i += 2) if (String(entry[i]) === name) return entry[i + 1];
  return null;
}

function groupRecord(entry) {
  const number = (name) => {
    const value = groupField(entry, name);
    return value === null || value === undefined ? null : Number(value);
  };
  const name = groupField(entry, "group");
  return {
    group: name ? String(name) : null,
    members: number("members"),
    due: number("due"),
    limitRate: number("limit-rate"),
    limitBurst: number("limit-burst"),
    available: number("available"),
    waitingUntilMs: number("waiting-until-ms") ?? 0,
    heldUntilMs: number("held-until-ms") ?? 0,
  };
}

// One ECHO.REPEATS entry (a flat field/value array, RESP2) as repeats() returns it.
function repeatRecord(entry) {
  const value = (name) => {
    const v = groupField(entry, name);
    return v === undefined ? null : v;
  };
  const number = (name) => {
    const v = value(name);
    return v === null ? null : Number(v);
  };
  const text = (name) => {
    const v = value(name);
    return v === null ? null : String(v);
  };
  return {
    id: text("id"),
    spec: text("spec"),
    jitterMs: number("jitter-ms"),
    tz: text("tz"),
    fromMs: number("from-ms"),
    untilMs: number("until-ms"),
    nextMs: number("next-ms"),
    fireAtMs: number("fire-at-ms"),
  };
}

function checkId(id) {
  if (typeof id !== "string" || id === "") throw new TypeError("a job id is a non-empty string");
  if (LONE_SURROGATE.test(id)) throw new TypeError("a job id is valid UTF-8: this one holds a lone surrogate");
  return id;
}

// The replies of a MULTI/EXEC (or pipeline), failing on the first error.
export async function replies(pipeline) {
  const result = await pipeline.exec();
  if (!result) throw new Error("transaction aborted");
  return result.map(([e, r]) => {
    if (e) throw e;
    return r;
  });
}

// add_with_id.lua's arguments: the stream's consumer group (GROUP), then the job's own group
// when it has one.
function addArgs(id, payload, delayMs, jobGroup) {
  const args = [id, payload, String(delayMs), GROUP];
  return jobGroup === null ? args : [...args, jobGroup];
}

export class Queue {
  constructor(connection, name) {
    // A Redis (one server) or a Cluster: every key of the queue has the hash tag {name}, so
    // every command, transaction, pipeline and script of the queue runs on that one slot.
    if (!connection || typeof connection.multi !== "function" || typeof connection.sendCommand !== "function") {
      throw new TypeError("a Queue needs an iovalkey Redis or Cluster connection");
    }
    this.connection = connection;
    this.name = name;
    this.keys = queueKeys(name);
  }

  // With `group` (1..=1024 bytes) the job is released fairly across groups, under its group's
  // limit, and keeps its group through its retries (docs/clients.md, Groups).
  async add(payload, { id, delayMs = 0, group } = {}) {
    const jobGroup = checkJobGroup(group);
    payload = wrapPayload(checkPayload(payload), jobGroup);
    checkDelay(delayMs);
    const k = this.keys;
    if (id !== undefined && id !== null) {
      checkId(id);
      await ADD_WITH_ID.run(this.connection, [k.jobs, k.pending, k.schedule], addArgs(id, payload, delayMs, jobGroup));
      return id;
    }
    id = newJobId();
    await this.#makeStream();
    const multi = this.connection.multi().hset(k.jobs, id, payload).call(...this.#enqueue(id, delayMs, jobGroup));
    await this.#addedOrTakenBack(multi, [id]);
    return id;
  }

  // One job per payload; with `ids` (one per payload) each add is idempotent as add()'s;
  // `group`, the group of every one, as add()'s.
  async addMany(payloads, { ids, delayMs = 0, group } = {}) {
    const jobGroup = checkJobGroup(group);
    const list = Array.from(payloads, (p) => wrapPayload(checkPayload(p), jobGroup));
    checkDelay(delayMs);
    const k = this.keys;
    if (ids !== undefined && ids !== null) {
      const given = Array.from(ids, checkId);
      if (given.length !== list.length) {
        throw new RangeError(`addMany needs one id per payload: ${given.length} ids, ${list.length} payloads`);
      }
      await ADD_WITH_ID.load(this.connection, k.jobs);
      // Every script is written at once: they travel pipelined.
      await Promise.all(given.map((id, i) =>
        ADD_WITH_ID.run(this.connection, [k.jobs, k.pending, k.schedule], addArgs(id, list[i], delayMs, jobGroup))));
      return given;
    }
    const made = list.map(() => newJobId());
    await this.#makeStream();
    const sent = [];
    // Every chunk's MULTI is written at once: the transactions travel pipelined.
    for (let start = 0; start < list.length; start += ADD_BATCH) {
      const multi = this.connection.multi();
      const end = Math.min(start + ADD_BATCH, list.length);
      for (let i = start; i < end; i++) {
        multi.hset(k.jobs, made[i], list[i]).call(...this.#enqueue(made[i], delayMs, jobGroup));
      }
      sent.push(this.#addedOrTakenBack(multi, made.slice(start, end)));
    }
    // Every chunk settled (its refused payloads taken back) before the first error is raised.
    const settled = await Promise.allSettled(sent);
    const failed = settled.find((s) => s.status === "rejected");
    if (failed) throw failed.reason;
    return made;
  }

  // EXEC of a MULTI of `HSET jobs <id> <payload>`, `ECHO.ADD ... <id>` per id in `ids` (all new),
  // failing on the first error inside its reply. A transaction does not stop at a refused command:
  // when the server refuses an ECHO.ADD (a pending or schedule of another type, a stream out of
  // IDs), the HSET before it stays, so that payload is deleted again (HDEL) before the error is
  // raised. The id is new and the caller never got it: no other job can own that payload.
  async #addedOrTakenBack(multi, ids) {
    const result = await multi.exec();
    if (!result) throw new Error("transaction aborted");
    const error = result.find(([e]) => e)?.[0];
    if (!error) return;
    const refused = ids.filter((_, i) => result[2 * i + 1][0]);
    // The refusal is the error to report, whatever the HDEL meets.
    if (refused.length) await this.connection.hdel(this.keys.jobs, ...refused).catch(() => {});
    throw error;
  }

  // The stream and the workers' group, once per Queue before its first add with a new id:
  // ECHO.ADD would make a missing pending a list. (The add script makes them when missing.)
  #streamMade = false;
  async #makeStream() {
    if (this.#streamMade) return;
    await makeStream(this.connection, this.keys.pending, GROUP);
    this.#streamMade = true;
  }

  // The server decides where a run goes: straight into pending when nothing governs the
  // queue's release, else into the schedule, so its release limit and hold apply to first runs
  // (a grouped job always goes through its group's part of the schedule).
  #enqueue(id, delayMs, jobGroup) {
    const k = this.keys;
    const add = ["ECHO.ADD", k.schedule, k.pending, id, "DELAY", String(delayMs)];
    return jobGroup === null ? add : [...add, "GROUP", jobGroup];
  }

  // scheduled and due count the jobs of every group too (groups() has them per group): its
  // pages follow the counts' pipeline.
  async counts() {
    const k = this.keys;
    // The clock of the node that holds the queue: its own now is what the schedule's due is.
    const now = timeMs(await onSlot(this.connection, k.schedule, "TIME"));
    const p = this.connection.pipeline()
      .zcard(k.schedule)
      .zcount(k.schedule, "-inf", now)
      .xlen(k.pending)
      .xpending(k.pending, GROUP)
      .zcard(k.dead);
    const result = await p.exec();
    const value = (i) => {
      const [e, r] = result[i];
      if (e) {
        // No group yet: nothing has been delivered.
        if (i === 3 && String(e.message).startsWith("NOGROUP")) return null;
        throw e;
      }
      return r;
    };
    const scheduled = Number(value(0));
    const due = Number(value(1));
    const length = Number(value(2));
    const summary = value(3);
    const inFlight = summary ? Number(summary[0]) : 0;
    let [members, grouped] = [scheduled, due];
    // The ungrouped jobs (group null) are the schedule's own, counted above.
    for (const g of await this.groups()) {
      if (g.group !== null) {
        members += g.members;
        grouped += g.due;
      }
    }
    return {
      scheduled: members - grouped,
      due: grouped,
      pending: Math.max(0, length - inFlight),
      inFlight,
      dead: Number(value(4)),
    };
  }

  // Every group with jobs waiting in the schedule, in name order, the ungrouped jobs first (group
  // null): ECHO.GROUPS' pages of `pageSize` (1..=1000) groups, one call each, to the last cursor.
  async groups({ pageSize = MAX_GROUPS_COUNT } = {}) {
    if (!Number.isInteger(pageSize) || pageSize < 1 || pageSize > MAX_GROUPS_COUNT) {
      throw new RangeError(`pageSize is an integer in 1..=${MAX_GROUPS_COUNT}, not ${pageSize}`);
    }
    const k = this.keys;
    const out = [];
    let cursor = "0";
    do {
      const [next, entries] = await onSlot(this.connection, k.schedule, "ECHO.GROUPS", k.schedule, "CURSOR", cursor,
        "COUNT", String(pageSize));
      for (const entry of entries) out.push(groupRecord(entry));
      cursor = String(next);
    } while (cursor !== "0");
    return out;
  }

  // One group limited to `rate` ("5/s", "300/m", "2/h") with bursts of `burst` instead of the
  // configured group limit (ECHO.GROUPLIMIT), until clearGroupLimit(group). Checked before sending.
  async setGroupLimit(group, rate, burst) {
    const name = namedGroup(group);
    checkGroupLimit(rate, burst);
    const k = this.keys;
    await onSlot(this.connection, k.schedule, "ECHO.GROUPLIMIT", k.schedule, name, rate, String(burst));
  }

  // The configured group limit for this group again (none when echomq.group-limits does not
  // list the queue); nothing to remove is no error.
  async clearGroupLimit(group) {
    const name = namedGroup(group);
    const k = this.keys;
    await onSlot(this.connection, k.schedule, "ECHO.GROUPLIMIT", k.schedule, name, "DEFAULT");
  }

  // Creates or replaces the recurring job `id` (ECHO.REPEAT, docs/clients.md, Recurring jobs);
  // resolves to the fire time (server Unix ms) of its armed occurrence. `spec`: "every:<ms>" (ms
  // in 1000..=10^13) or "cron:<5 fields>", in UTC or in `tz` (an IANA zone); each occurrence fires
  // at its nominal time plus a draw in 0..=jitterMs; none before fromMs or after untilMs (Unix ms).
  // The server arms one occurrence at a time, the job `<id>@<nominal_ms>` with `payload` (stored
  // as add() stores one, never grouped), and the next in the step that releases it; no outcome
  // of a run touches the definition. The same definition again changes nothing (the same fire
  // time); a different one replaces it. Arguments the server would refuse for their form reject
  // with nothing sent; a cron field or zone the server does not know is the server's refusal.
  async repeat(id, spec, payload, { jitterMs = 0, tz = null, fromMs = null, untilMs = null } = {}) {
    const words = checkRepeat(id, spec, { jitterMs, tz, fromMs, untilMs });
    const value = wrapPayload(checkPayload(payload), null);
    const k = this.keys;
    // The release that moves an occurrence into a missing pending would make it a list.
    await this.#makeStream();
    const fire = await onSlot(this.connection, k.schedule, "ECHO.REPEAT", k.schedule, id, spec, ...words, "PAYLOAD",
      k.jobs, value);
    return Number(fire);
  }

  // Removes the recurring job `id` and its armed occurrence (ECHO.UNREPEAT); false when there was
  // none. An occurrence already released runs to its end, as any job.
  async unrepeat(id) {
    checkId(id);
    const k = this.keys;
    return Number(await onSlot(this.connection, k.schedule, "ECHO.UNREPEAT", k.schedule, id)) === 1;
  }

  // The queue's recurring jobs by id (ECHO.REPEATS): { id, spec, jitterMs, tz ("UTC" without one),
  // fromMs, untilMs (null when not given), nextMs (the armed occurrence's nominal time), fireAtMs
  // (its fire time; null when its job was removed by hand) }.
  async repeats() {
    const k = this.keys;
    const entries = await onSlot(this.connection, k.schedule, "ECHO.REPEATS", k.schedule);
    return (entries ?? []).map(repeatRecord);
  }

  async dead(offset = 0, count = 100) {
    if (!Number.isInteger(offset) || offset < 0) throw new RangeError("offset is an integer >= 0");
    if (!Number.isInteger(count) || count < 0) throw new RangeError("count is an integer >= 0");
    if (count === 0) return [];
    const k = this.keys;
    const flat = await this.connection.zrange(k.dead, offset, offset + count - 1, "WITHSCORES");
    if (!flat.length) return [];
    const p = this.connection.pipeline();
    const ids = [];
    const scores = [];
    for (let i = 0; i < flat.length; i += 2) {
      ids.push(flat[i]);
      scores.push(Number(flat[i + 1]));
      p.hget(k.attempts, flat[i]).hget(k.errors, flat[i]).hgetBuffer(k.jobs, flat[i]);
    }
    const r = await replies(p);
    return ids.map((id, i) => {
      const value = r[3 * i + 2];
      const { payload, jobGroup } = value === null ? { payload: null, jobGroup: null } : unwrapPayload(value);
      return {
        id,
        diedAtMs: scores[i],
        attempts: r[3 * i] === null ? 0 : Number(r[3 * i]),
        error: r[3 * i + 1],
        payload,
        group: jobGroup === null ? null : jobGroup.toString(),
      };
    });
  }

  async requeue(id) {
    const k = this.keys;
    const keys = [k.dead, k.attempts, k.errors, k.pending, k.schedule, k.jobs];
    return (await REQUEUE.run(this.connection, keys, [id, JOB_GROUP_ENVELOPE, GROUP])) === 1;
  }

  async remove(id) {
    const k = this.keys;
    const r = await replies(this.connection.multi()
      .zrem(k.schedule, id)
      .zrem(k.dead, id)
      .hdel(k.jobs, id)
      .hdel(k.attempts, id)
      .hdel(k.errors, id));
    return r[2] === 1;
  }

  async purgeDead(olderThanMs) {
    if (!Number.isInteger(olderThanMs) || olderThanMs < 0) throw new RangeError("olderThanMs is an integer >= 0");
    const k = this.keys;
    return Number(await PURGE_DEAD.run(this.connection, [k.dead, k.jobs, k.attempts, k.errors], [String(olderThanMs)]));
  }
}

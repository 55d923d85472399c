import { randomBytes } from "node:crypto";
import Redis from "iovalkey";
import {
  LONE_SURROGATE, Script, checkGroupLimit, checkJobGroup, checkRepeat, isCluster, makeStream, onSlot,
  queueKeys, shardOf, shardTags, splitLimit, timeMs, unwrapPayload, wrapPayload,
} from "./keys.js";
import { ADD_BATCH, GROUP, JOB_GROUP_ENVELOPE, MAX_DELAY_MS, MAX_GROUPS_COUNT, MAX_SHARDS, SCRIPTS } from "./protocol.js";

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

function checkShards(shards) {
  if (!Number.isInteger(shards) || shards < 1 || shards > MAX_SHARDS) {
    throw new RangeError(`shards is an integer in 1..=${MAX_SHARDS}, not ${shards}`);
  }
  return shards;
}

// The sum of per-shard counts.
function summed(records, fields) {
  const out = {};
  for (const f of fields) out[f] = records.reduce((sum, r) => sum + r[f], 0);
  return out;
}

// The words of echomq.release-limits' value, `schedule rate burst` triples.
function limitTriples(value) {
  const words = String(value ?? "").split(/\s+/).filter(Boolean);
  const triples = [];
  for (let i = 0; i + 2 < words.length; i += 3) triples.push(words.slice(i, i + 3));
  return triples;
}

// Every node of a cluster, primaries and replicas: the client's own connections, and a
// connection of the cluster's options to each node that a node's CLUSTER NODES lists and the
// client does not know yet (a replica added since the client last read the slots: iovalkey does
// not read them again by itself). `extra`: those new connections, for the caller to close.
async function clusterNodes(cluster) {
  const known = cluster.nodes("all");
  const address = (host, port) => `${host}:${port}`;
  const have = new Set(known.map((n) => address(n.options.host, n.options.port)));
  const views = await Promise.allSettled(known.map((n) => n.call("CLUSTER", "NODES")));
  const options = cluster.options || {};
  const natMap = options.natMap && typeof options.natMap === "object" ? options.natMap : {};
  const extra = [];
  for (const view of views) {
    if (view.status !== "fulfilled") continue;
    for (const line of String(view.value).split("\n")) {
      const [, where, flags] = line.trim().split(" ");
      if (!where || !flags || /fail|handshake|noaddr/.test(flags)) continue;
      const hostPort = where.split("@")[0];
      const colon = hostPort.lastIndexOf(":");
      let [host, port] = [hostPort.slice(0, colon), Number(hostPort.slice(colon + 1))];
      if (!host || !port) continue;
      const mapped = natMap[address(host, port)];
      if (mapped) [host, port] = [mapped.host, mapped.port];
      if (have.has(address(host, port))) continue;
      have.add(address(host, port));
      // One try per command: a node that cannot be reached rejects the call rather than hold it.
      const node = new Redis({ ...(options.redisOptions || {}), host, port, maxRetriesPerRequest: 1 });
      node.on("error", () => {}); // its CONFIG call rejects with the reason
      extra.push(node);
    }
  }
  return { nodes: [...known, ...extra], extra };
}

export class Queue {
  // `shards` (1..=1024, default 1) sub-queues make one logical queue (docs/clients.md, Sharded
  // queues): each job lives in the shard of its id, so a cluster spreads the queue over its
  // primaries. One shard is the queue of one hash tag, its keys and commands unchanged.
  constructor(connection, name, { shards = 1 } = {}) {
    // A Redis (one server) or a Cluster: every key of a shard has the shard's hash tag, so
    // every command, transaction, pipeline and script of a shard runs on that one slot.
    if (!connection || typeof connection.multi !== "function" || typeof connection.sendCommand !== "function") {
      throw new TypeError("a Queue needs an iovalkey Redis or Cluster connection");
    }
    checkShards(shards);
    this.connection = connection;
    this.name = name;
    this.keys = queueKeys(name);
    const tags = shardTags(name, shards);
    // Shard 0 is the queue's own tag: this.keys is its keys.
    Object.defineProperty(this, "shards", { value: Object.freeze(tags), enumerable: true });
    Object.defineProperty(this, "shardKeys", {
      value: Object.freeze(tags.map((tag, i) => (i === 0 ? this.keys : Object.freeze(queueKeys(tag))))),
      enumerable: true,
    });
  }

  // The shard (an index into shards and shardKeys) of the job `id`: its KEYSLOT mod N.
  shardOf(id) {
    return shardOf(checkId(id), this.shards.length);
  }

  #keysOf(id) {
    return this.shardKeys[this.shards.length === 1 ? 0 : shardOf(id, this.shards.length)];
  }

  // The shards in the order an id's call looks at them: its own first, then the others, for a
  // job added under a smaller layout (docs/clients.md, Growing).
  #shardsFor(id) {
    const own = this.#keysOf(id);
    return [own, ...this.shardKeys.filter((k) => k !== own)];
  }

  // With `group` (1..=1024 bytes) the job is released fairly across groups, under its group's
  // limit, and keeps its group through its retries (docs/clients.md, Groups).
  async add(payload, { id, delayMs = 0, group } = {}) {
    const jobGroup = checkJobGroup(group);
    payload = wrapPayload(checkPayload(payload), jobGroup);
    checkDelay(delayMs);
    if (id !== undefined && id !== null) {
      checkId(id);
      const k = this.#keysOf(id);
      await ADD_WITH_ID.run(this.connection, [k.jobs, k.pending, k.schedule], addArgs(id, payload, delayMs, jobGroup));
      return id;
    }
    id = newJobId();
    const k = this.#keysOf(id);
    await this.#makeStream(k);
    const multi = this.connection.multi().hset(k.jobs, id, payload).call(...this.#enqueue(k, id, delayMs, jobGroup));
    await this.#addedOrTakenBack(k, multi, [id]);
    return id;
  }

  // One job per payload; with `ids` (one per payload) each add is idempotent as add()'s;
  // `group`, the group of every one, as add()'s. Over shards, the jobs go by shard: one
  // transaction (or pipeline of scripts) per shard and batch.
  async addMany(payloads, { ids, delayMs = 0, group } = {}) {
    const jobGroup = checkJobGroup(group);
    const list = Array.from(payloads, (p) => wrapPayload(checkPayload(p), jobGroup));
    checkDelay(delayMs);
    if (ids !== undefined && ids !== null) {
      const given = Array.from(ids, checkId);
      if (given.length !== list.length) {
        throw new RangeError(`addMany needs one id per payload: ${given.length} ids, ${list.length} payloads`);
      }
      await Promise.all([...this.#byShard(given)].map(async ([k, indexes]) => {
        await ADD_WITH_ID.load(this.connection, k.jobs);
        // Every script is written at once: they travel pipelined.
        await Promise.all(indexes.map((i) =>
          ADD_WITH_ID.run(this.connection, [k.jobs, k.pending, k.schedule], addArgs(given[i], list[i], delayMs, jobGroup))));
      }));
      return given;
    }
    const made = list.map(() => newJobId());
    const shards = this.#byShard(made);
    await Promise.all([...shards.keys()].map((k) => this.#makeStream(k)));
    const sent = [];
    // Every chunk's MULTI is written at once: the transactions travel pipelined.
    for (const [k, indexes] of shards) {
      for (let start = 0; start < indexes.length; start += ADD_BATCH) {
        const multi = this.connection.multi();
        const chunk = indexes.slice(start, start + ADD_BATCH);
        for (const i of chunk) multi.hset(k.jobs, made[i], list[i]).call(...this.#enqueue(k, made[i], delayMs, jobGroup));
        sent.push(this.#addedOrTakenBack(k, multi, chunk.map((i) => made[i])));
      }
    }
    // Every chunk settled (its refused payloads taken back) before the first error is raised.
    const settled = await Promise.allSettled(sent);
    const failed = settled.find((s) => s.status === "rejected");
    if (failed) throw failed.reason;
    return made;
  }

  // shard keys -> the indexes in `ids` of the jobs of that shard, in their order.
  #byShard(ids) {
    const out = new Map();
    ids.forEach((id, i) => {
      const k = this.#keysOf(id);
      if (!out.has(k)) out.set(k, []);
      out.get(k).push(i);
    });
    return out;
  }

  // EXEC of a MULTI of `HSET jobs <id> <payload>`, `ECHO.ADD ... <id>` per id in `ids` (all new),
  // failing on the first error inside its reply. A transaction does not stop at a refused command:
  // when the server refuses an ECHO.ADD (a pending or schedule of another type, a stream out of
  // IDs), the HSET before it stays, so that payload is deleted again (HDEL) before the error is
  // raised. The id is new and the caller never got it: no other job can own that payload.
  async #addedOrTakenBack(k, multi, ids) {
    const result = await multi.exec();
    if (!result) throw new Error("transaction aborted");
    const error = result.find(([e]) => e)?.[0];
    if (!error) return;
    const refused = ids.filter((_, i) => result[2 * i + 1][0]);
    // The refusal is the error to report, whatever the HDEL meets.
    if (refused.length) await this.connection.hdel(k.jobs, ...refused).catch(() => {});
    throw error;
  }

  // The stream and the workers' group, once per Queue and shard before its first add with a
  // new id: ECHO.ADD would make a missing pending a list. (The add script makes them when missing.)
  #streamMade = new Set();
  async #makeStream(k) {
    if (this.#streamMade.has(k)) return;
    await makeStream(this.connection, k.pending, GROUP);
    this.#streamMade.add(k);
  }

  // The server decides where a run goes: straight into pending when nothing governs the
  // queue's release, else into the schedule, so its release limit and hold apply to first runs
  // (a grouped job always goes through its group's part of the schedule).
  #enqueue(k, id, delayMs, jobGroup) {
    const add = ["ECHO.ADD", k.schedule, k.pending, id, "DELAY", String(delayMs)];
    return jobGroup === null ? add : [...add, "GROUP", jobGroup];
  }

  // scheduled and due count the jobs of every group too (groups() has them per group): its
  // pages follow the counts' pipeline. Over shards, the shards' counts summed; with
  // `{ perShard: true }` each shard's too, in `shards` (its index, tag and counts).
  async counts({ perShard = false } = {}) {
    const each = await Promise.all(this.shardKeys.map((k) => this.#countsOf(k)));
    const total = each.length === 1 ? each[0] : summed(each, ["scheduled", "due", "pending", "inFlight", "dead"]);
    if (!perShard) return total;
    return { ...total, shards: each.map((c, shard) => ({ shard, tag: this.shards[shard], ...c })) };
  }

  async #countsOf(k) {
    // The clock of the node that holds the shard: its own now is what the schedule's due is.
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
    for (const g of await this.#groupsOf(k, MAX_GROUPS_COUNT)) {
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
  // Over shards, one record per group name: its members, due, available and limits summed (a
  // group's limit is split over the shards), the earliest wait and the latest hold.
  async groups({ pageSize = MAX_GROUPS_COUNT } = {}) {
    if (!Number.isInteger(pageSize) || pageSize < 1 || pageSize > MAX_GROUPS_COUNT) {
      throw new RangeError(`pageSize is an integer in 1..=${MAX_GROUPS_COUNT}, not ${pageSize}`);
    }
    const each = await Promise.all(this.shardKeys.map((k) => this.#groupsOf(k, pageSize)));
    if (each.length === 1) return each[0];
    const merged = new Map();
    const add = (a, b) => (a === null && b === null ? null : (a ?? 0) + (b ?? 0));
    for (const record of each.flat()) {
      const seen = merged.get(record.group);
      if (!seen) {
        merged.set(record.group, { ...record });
        continue;
      }
      for (const f of ["members", "due", "limitRate", "limitBurst", "available"]) seen[f] = add(seen[f], record[f]);
      const waits = [seen.waitingUntilMs, record.waitingUntilMs].filter((ms) => ms > 0);
      seen.waitingUntilMs = waits.length ? Math.min(...waits) : 0;
      seen.heldUntilMs = Math.max(seen.heldUntilMs, record.heldUntilMs);
    }
    // The server's order: the ungrouped first, then by name as bytes.
    return [...merged.values()].sort((a, b) => (a.group === null ? -1 : b.group === null ? 1
      : Buffer.compare(Buffer.from(a.group), Buffer.from(b.group))));
  }

  async #groupsOf(k, pageSize) {
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
  // Over shards, each shard's part of the group gets its share (splitLimit).
  async setGroupLimit(group, rate, burst) {
    const name = namedGroup(group);
    checkGroupLimit(rate, burst);
    const [shareRate, shareBurst] = splitLimit(rate, burst, this.shards.length);
    await Promise.all(this.shardKeys.map((k) =>
      onSlot(this.connection, k.schedule, "ECHO.GROUPLIMIT", k.schedule, name, shareRate, String(shareBurst))));
  }

  // The configured group limit for this group again (none when echomq.group-limits does not
  // list the queue); nothing to remove is no error.
  async clearGroupLimit(group) {
    const name = namedGroup(group);
    await Promise.all(this.shardKeys.map((k) =>
      onSlot(this.connection, k.schedule, "ECHO.GROUPLIMIT", k.schedule, name, "DEFAULT")));
  }

  // The queue's release limit (echomq.release-limits): `rate` ("500/s", "300/m", "adaptive:20/h")
  // with bursts of `burst`, each shard's schedule its share (splitLimit). Written into the
  // config of every node the connection reaches (a cluster's primaries and replicas, so a
  // failover keeps it), this queue's entries replaced and the other queues' kept. Checked as
  // the server reads it before anything is sent.
  async setLimit(rate, burst) {
    const [shareRate, shareBurst] = splitLimit(rate, burst, this.shards.length);
    await this.#writeLimits(this.shardKeys.map((k) => [k.schedule, shareRate, String(shareBurst)]));
  }

  // The queue's entries removed from echomq.release-limits of every node: its due jobs leave at
  // full speed. (A hold in force stays: a hold is not a limit.)
  async clearLimit() {
    await this.#writeLimits([]);
  }

  async #writeLimits(entries) {
    const ours = new Set(this.shardKeys.map((k) => k.schedule));
    const { nodes, extra } = isCluster(this.connection) ? await clusterNodes(this.connection)
      : { nodes: [this.connection], extra: [] };
    try {
      // A read-modify-write per node: two queues' calls at once on one node may lose one's change.
      await Promise.all(nodes.map(async (node) => {
        const [, value] = await node.call("CONFIG", "GET", "echomq.release-limits");
        const kept = limitTriples(value).filter(([schedule]) => !ours.has(schedule));
        await node.call("CONFIG", "SET", "echomq.release-limits", [...kept, ...entries].flat().join(" "));
      }));
    } finally {
      for (const node of extra) node.disconnect();
    }
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
  // Over shards, the definition lives in the shard of its id.
  async repeat(id, spec, payload, { jitterMs = 0, tz = null, fromMs = null, untilMs = null } = {}) {
    const words = checkRepeat(id, spec, { jitterMs, tz, fromMs, untilMs });
    const value = wrapPayload(checkPayload(payload), null);
    const k = this.#keysOf(id);
    // The release that moves an occurrence into a missing pending would make it a list.
    await this.#makeStream(k);
    const fire = await onSlot(this.connection, k.schedule, "ECHO.REPEAT", k.schedule, id, spec, ...words, "PAYLOAD",
      k.jobs, value);
    return Number(fire);
  }

  // Removes the recurring job `id` and its armed occurrence (ECHO.UNREPEAT); false when there was
  // none. An occurrence already released runs to its end, as any job.
  async unrepeat(id) {
    checkId(id);
    for (const k of this.#shardsFor(id)) {
      if (Number(await onSlot(this.connection, k.schedule, "ECHO.UNREPEAT", k.schedule, id)) === 1) return true;
    }
    return false;
  }

  // The queue's recurring jobs by id (ECHO.REPEATS): { id, spec, jitterMs, tz ("UTC" without one),
  // fromMs, untilMs (null when not given), nextMs (the armed occurrence's nominal time), fireAtMs
  // (its fire time; null when its job was removed by hand) }.
  async repeats() {
    const each = await Promise.all(this.shardKeys.map(async (k) =>
      ((await onSlot(this.connection, k.schedule, "ECHO.REPEATS", k.schedule)) ?? []).map(repeatRecord)));
    if (each.length === 1) return each[0];
    return each.flat().sort((a, b) => Buffer.compare(Buffer.from(a.id), Buffer.from(b.id)));
  }

  // The dead jobs, oldest death first; over shards, `offset` and `count` count in the merged order.
  async dead(offset = 0, count = 100) {
    if (!Number.isInteger(offset) || offset < 0) throw new RangeError("offset is an integer >= 0");
    if (!Number.isInteger(count) || count < 0) throw new RangeError("count is an integer >= 0");
    if (count === 0) return [];
    let picked;
    if (this.shardKeys.length === 1) {
      const flat = await this.connection.zrange(this.keys.dead, offset, offset + count - 1, "WITHSCORES");
      picked = [];
      for (let i = 0; i < flat.length; i += 2) picked.push({ k: this.keys, id: flat[i], score: Number(flat[i + 1]) });
    } else {
      // The first offset + count of each shard hold the first offset + count of the merge.
      const each = await Promise.all(this.shardKeys.map(async (k) => {
        const flat = await this.connection.zrange(k.dead, 0, offset + count - 1, "WITHSCORES");
        const out = [];
        for (let i = 0; i < flat.length; i += 2) out.push({ k, id: flat[i], score: Number(flat[i + 1]) });
        return out;
      }));
      // A sorted set's own order: by score, then by member as bytes.
      picked = each.flat().sort((a, b) => a.score - b.score || Buffer.compare(Buffer.from(a.id), Buffer.from(b.id)))
        .slice(offset, offset + count);
    }
    if (!picked.length) return [];
    const details = new Map();
    await Promise.all([...new Set(picked.map((d) => d.k))].map(async (k) => {
      const mine = picked.filter((d) => d.k === k);
      const p = this.connection.pipeline();
      for (const d of mine) p.hget(k.attempts, d.id).hget(k.errors, d.id).hgetBuffer(k.jobs, d.id);
      const r = await replies(p);
      mine.forEach((d, i) => details.set(d, r.slice(3 * i, 3 * i + 3)));
    }));
    return picked.map((d) => {
      const [attempts, error, value] = details.get(d);
      const { payload, jobGroup } = value === null ? { payload: null, jobGroup: null } : unwrapPayload(value);
      return {
        id: d.id,
        diedAtMs: d.score,
        attempts: attempts === null ? 0 : Number(attempts),
        error,
        payload,
        group: jobGroup === null ? null : jobGroup.toString(),
      };
    });
  }

  // Over shards: the id's shard, then the others (a job added under a smaller layout).
  async requeue(id) {
    for (const k of this.#shardsFor(id)) {
      const keys = [k.dead, k.attempts, k.errors, k.pending, k.schedule, k.jobs];
      if ((await REQUEUE.run(this.connection, keys, [id, JOB_GROUP_ENVELOPE, GROUP])) === 1) return true;
    }
    return false;
  }

  // Over shards: the id's shard, then the others (a job added under a smaller layout).
  async remove(id) {
    for (const k of this.#shardsFor(id)) {
      const r = await replies(this.connection.multi()
        .zrem(k.schedule, id)
        .zrem(k.dead, id)
        .hdel(k.jobs, id)
        .hdel(k.attempts, id)
        .hdel(k.errors, id));
      if (r[2] === 1) return true;
    }
    return false;
  }

  // The shards' purges summed.
  async purgeDead(olderThanMs) {
    if (!Number.isInteger(olderThanMs) || olderThanMs < 0) throw new RangeError("olderThanMs is an integer >= 0");
    const each = await Promise.all(this.shardKeys.map(async (k) =>
      Number(await PURGE_DEAD.run(this.connection, [k.dead, k.jobs, k.attempts, k.errors], [String(olderThanMs)]))));
    return each.reduce((a, b) => a + b, 0);
  }
}

// Type declarations for echomq (hand-written; the package is plain JavaScript).
import type { EventEmitter } from "node:events";
import type { Cluster, Redis } from "iovalkey";

/** A job's payload as given to add(): bytes, or a string (stored as UTF-8). */
export type Payload = Buffer | Uint8Array | string;

export interface AddOptions {
  /** A caller's id: while a job with this id exists, add() changes nothing. */
  id?: string;
  /** Run no earlier than the server's now + delayMs (0..=10^13). Default 0. */
  delayMs?: number;
  /** The job's group (1..=1024 bytes of UTF-8): released fairly across groups, under its
   * group's limit, through the schedule; kept through its retries. Not the workers' consumer group. */
  group?: string;
}

export interface AddManyOptions {
  /** One caller's id per payload, in order. */
  ids?: Iterable<string>;
  /** Run every job no earlier than the server's now + delayMs. Default 0. */
  delayMs?: number;
  /** The group of every job, as AddOptions.group. */
  group?: string;
}

export interface Counts {
  /** In the schedule, waiting for their time. */
  scheduled: number;
  /** In the schedule and due (held by a limit, or not promoted yet). */
  due: number;
  /** In the stream, not delivered yet. */
  pending: number;
  /** Delivered to a worker, not acknowledged yet. */
  inFlight: number;
  dead: number;
}

/** One shard's counts, in counts({ perShard: true }).shards. */
export interface ShardCounts extends Counts {
  /** The shard's index (queue.shards[shard] is its tag). */
  shard: number;
  tag: string;
}

export interface QueueOptions {
  /** Sub-queues of one logical queue, 1..=1024 (max_shards); default 1, the queue of one hash
   * tag. docs/clients.md, Sharded queues. */
  shards?: number;
}

/** The keys of one queue or shard, all under its hash tag. */
export interface QueueKeys {
  readonly schedule: string;
  readonly pending: string;
  readonly dead: string;
  readonly jobs: string;
  readonly attempts: string;
  readonly errors: string;
}

export interface DeadRecord {
  id: string;
  /** Time of death, server Unix ms. */
  diedAtMs: number;
  attempts: number;
  /** The last failure's message (null when none was written). */
  error: string | null;
  /** null when the payload is gone. */
  payload: Buffer | null;
  /** The job's group, null without one. */
  group: string | null;
}

/** One group with jobs waiting in the schedule, as ECHO.GROUPS reports it (docs/groups.md). */
export interface GroupInfo {
  /** The group's name; null for the jobs added without one (listed first). */
  group: string | null;
  /** Its jobs waiting in the schedule, due or not. */
  members: number;
  /** Those due now (waiting for their group's turn, its limit or a hold). */
  due: number;
  /** Its limit per second; null when nothing limits the group. */
  limitRate: number | null;
  limitBurst: number | null;
  /** How many jobs its limit lets leave now; null when not limited. */
  available: number | null;
  /** The first ms (server clock) it may release while it waits out of the rotation; 0 in it. */
  waitingUntilMs: number;
  /** The end of its own hold (RetryAfter with a group), 0 for none. */
  heldUntilMs: number;
}

export interface RepeatOptions {
  /** Each occurrence fires at its nominal time plus a uniform draw in 0..=jitterMs (at most the
   * spec's smallest interval: for every:<ms>, ms). Default 0. */
  jitterMs?: number;
  /** An IANA time zone ("Europe/Berlin") the spec's calendar is read in; null or undefined: UTC. */
  tz?: string | null;
  /** No occurrence before this (Unix ms); every:<ms> counts its intervals from it. */
  fromMs?: number | null;
  /** No occurrence after this (Unix ms); the definition ends after its last one. */
  untilMs?: number | null;
}

/** One recurring job, as ECHO.REPEATS reports it. */
export interface RepeatInfo {
  id: string;
  /** The spec as given. */
  spec: string;
  jitterMs: number;
  /** The zone's name, "UTC" without one. */
  tz: string;
  /** null when not given. */
  fromMs: number | null;
  untilMs: number | null;
  /** The nominal time of the armed occurrence (its job id is `${id}@${nextMs}`). */
  nextMs: number;
  /** Its fire time (nextMs plus its jitter); null when its job was removed by hand (repeat() with
   * the same definition arms it again). */
  fireAtMs: number | null;
}

/** CRC16 (XMODEM) of `data` (a string's UTF-8 bytes), the checksum of Valkey's key hash slot. */
export function crc16(data: string | Uint8Array): number;
/** The slot CLUSTER KEYSLOT answers for `key`, the hash tag rule included. */
export function keySlot(key: string | Uint8Array): number;
/** The tags of the first `shards` shards of the queue `name`. */
export function shardTags(name: string, shards: number): string[];
/** Each shard's share of the release limit `rate burst` over `shards` shards: [rate, burst]. */
export function splitLimit(rate: string, burst: number, shards: number): [string, number];

/** Generates a time-ordered unique job id: `<13-digit Unix ms>-<16 hex digits>`. */
export function newJobId(): string;

export class Queue {
  /** A Redis connection to one server, or a Cluster: every key of a shard has the shard's hash
   * tag (`{name}` for one shard), so each shard lives on one slot. Refuses a shard count out of
   * 1..=1024 (RangeError). */
  constructor(connection: Redis | Cluster, name: string, options?: QueueOptions);
  readonly connection: Redis | Cluster;
  readonly name: string;
  /** Shard 0's keys: the queue's own, `{name}:...`. */
  readonly keys: QueueKeys;
  /** The shards' tags: `name`, then `name#i` (or `name#i.k`, for a slot of its own). */
  readonly shards: readonly string[];
  /** Each shard's keys, in the order of `shards`. */
  readonly shardKeys: readonly QueueKeys[];
  /** The shard of the job `id`: KEYSLOT(id) mod the number of shards. */
  shardOf(id: string): number;
  /** Adds a job; resolves to its id. */
  add(payload: Payload, options?: AddOptions): Promise<string>;
  /** Adds one job per payload, in transactions of up to 1,000; resolves to their ids in order.
   * With `ids` (one per payload) each add is idempotent as add()'s; `delayMs` applies to every job. */
  addMany(payloads: Iterable<Payload>, options?: AddManyOptions): Promise<string[]>;
  /** Where the jobs are; scheduled and due count every group's jobs too (groups() has them per
   * group). Summed over the shards; with `perShard`, each shard's counts too. */
  counts(): Promise<Counts>;
  counts(options: { perShard: true }): Promise<Counts & { shards: ShardCounts[] }>;
  counts(options?: { perShard?: boolean }): Promise<Counts & { shards?: ShardCounts[] }>;
  /** Every group with jobs waiting in the schedule, in name order, the ungrouped jobs first:
   * ECHO.GROUPS' pages of `pageSize` (1..=1000, default 1000) groups, to the last cursor. Over
   * shards, one record per group: figures and limits summed, the earliest wait, the latest hold. */
  groups(options?: { pageSize?: number }): Promise<GroupInfo[]>;
  /** Limits one group to `rate` ("5/s", "300/m", "2/h"; n in 1..=1000000) with bursts of
   * `burst` (1..=1000000) instead of the configured group limit (ECHO.GROUPLIMIT), until
   * clearGroupLimit. Arguments the server would refuse reject with nothing sent. Over shards,
   * each shard's part of the group gets its share (splitLimit). */
  setGroupLimit(group: string, rate: string, burst: number): Promise<void>;
  /** The configured group limit for this group again (none when the server lists no group limit
   * for the queue). */
  clearGroupLimit(group: string): Promise<void>;
  /** Creates or replaces the recurring job `id` (ECHO.REPEAT; docs/clients.md, Recurring jobs);
   * resolves to the fire time (server Unix ms) of its armed occurrence. `spec` is
   * "every:<ms>" (ms in 1000..=10^13) or "cron:<minute hour day-of-month month day-of-week>".
   * The server arms one occurrence at a time, the job `${id}@${nominalMs}` with `payload` (stored
   * as add() stores one, never grouped), and arms the next in the step that releases it, whatever
   * the number of workers; a run's success, retries or death never touch the definition. The same
   * definition again changes nothing and resolves to the same fire time; a different one replaces
   * it. Arguments the server would refuse for their form reject with nothing sent (TypeError,
   * RangeError); a cron field or zone the server does not know rejects with its error. */
  repeat(id: string, spec: string, payload: Payload, options?: RepeatOptions): Promise<number>;
  /** Removes the recurring job `id` and its armed occurrence; false when there was none. An
   * occurrence already released runs to its end. */
  unrepeat(id: string): Promise<boolean>;
  /** The queue's recurring jobs, by id. */
  repeats(): Promise<RepeatInfo[]>;
  /** The queue's release limit: `rate` ("500/s", "300/m", "adaptive:20/h"; n in 1..=1000000)
   * with bursts of `burst` (1..=1000000), each shard's schedule its share (splitLimit), written
   * into echomq.release-limits of every node the connection reaches (CONFIG GET / CONFIG SET, the
   * other queues' entries kept). A rate or burst the server would refuse rejects (RangeError,
   * TypeError) with nothing sent. */
  setLimit(rate: string, burst: number): Promise<void>;
  /** The queue's entries removed from echomq.release-limits of every node. */
  clearLimit(): Promise<void>;
  /** Dead jobs, oldest death first (over shards, in the merged order). Defaults: offset 0, count 100. */
  dead(offset?: number, count?: number): Promise<DeadRecord[]>;
  /** Dead -> pending with its attempts reset; false when the id is not dead. Refused by the
   * server (pending of another type, a stream out of IDs), it rejects and the job stays dead. */
  requeue(id: string): Promise<boolean>;
  /** Removes a job wherever it waits (a run in flight then writes no outcome); false when no such job exists. */
  remove(id: string): Promise<boolean>;
  /** Removes dead jobs that died at least olderThanMs ago (server clock); resolves to how many
   * (summed over the shards). requeue, remove and unrepeat look in the id's shard first, then in
   * the others (a job added under a smaller layout). */
  purgeDead(olderThanMs: number): Promise<number>;
}

export interface Job {
  readonly id: string;
  readonly payload: Buffer;
  /** 1 on the first run, n + 1 after n failures. */
  readonly attempt: number;
  /** The pending entry that delivered this run, for logs (the stream entry id the worker read
   * or claimed, e.g. "1796129508963-0"). */
  readonly entryId: string;
  /** The job's group (add()'s `group`), null without one. */
  readonly group: string | null;
}

export type Handler = (job: Job) => unknown | Promise<unknown>;

export interface WorkerOptions {
  /** Handlers running at once. Default 10. */
  concurrency?: number;
  /** An echomq backoff policy. Default "jitter:exponential:1000:3600000". */
  backoff?: string;
  /** The failure that sends a job to the dead set. Default 10. */
  maxAttempts?: number;
  /** A job unacknowledged this long by a worker that stopped renewing it is taken over. Default 30000. */
  leaseMs?: number;
  /** A job delivered more often than this without an outcome is failed unrun. Default 3. */
  maxDeliveries?: number;
  /** How long close() waits for running handlers. Default 10000. */
  shutdownTimeoutMs?: number;
}

export class Worker extends EventEmitter {
  constructor(queue: Queue, handler: Handler, options?: WorkerOptions);
  readonly queue: Queue;
  /** This worker's consumer name in the group: `<host>-<pid>-<6 hex>`. */
  readonly consumer: string;
  readonly concurrency: number;
  readonly backoff: string;
  readonly maxAttempts: number;
  readonly leaseMs: number;
  readonly maxDeliveries: number;
  readonly shutdownTimeoutMs: number;
  /** Works until close() (or SIGTERM while running); resolves after the shutdown. */
  run(): Promise<void>;
  /** Takes nothing new, waits for running handlers (up to shutdownTimeoutMs); resolves when run() has. */
  close(): Promise<void>;

  /** "ready": the group exists and the worker starts taking jobs. "error": a server error the worker
   * survived, or a RetryAfter hold the server refused (the failure itself was written). */
  on(event: "ready", listener: () => void): this;
  on(event: "error", listener: (error: Error) => void): this;
  on(event: string | symbol, listener: (...args: any[]) => void): this;
  once(event: "ready", listener: () => void): this;
  once(event: "error", listener: (error: Error) => void): this;
  once(event: string | symbol, listener: (...args: any[]) => void): this;
}

/** Thrown by a handler when the dependency asked to wait (429/503 with Retry-After): the
 * queue's schedule is held for `ms` for every worker (0: no hold), and the job is failed as usual.
 * With `group` only that group is held and the others go on; a group of null or undefined (the
 * `job.group` of a job added without one) holds the whole queue. */
export class RetryAfter extends Error {
  constructor(ms: number, options?: string | { group?: string | null; message?: string });
  readonly ms: number;
  /** The group held, null for the whole queue. */
  readonly group: string | null;
}

//! The worker: takes jobs from a queue's stream, runs a handler on each and
//! writes each outcome as `docs/clients.md` lays it out.

use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::{RedisError, RedisResult, Script, Value};
use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit, Semaphore};

use crate::envelope;
use crate::protocol::{
    DEFAULT_BACKOFF, DEFAULT_LEASE_MS, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_DELIVERIES,
    DEFAULT_SHUTDOWN_TIMEOUT_MS, FAIL, GROUP, HAND_BACK, MAX_ERROR_BYTES, MAX_HOLD_MS,
    PROMOTE_LIMIT, SUCCEED, SUCCESS_BATCH,
};
use crate::queue::{
    client_error, cluster_transient, stale, Queue, QueueConnection, RESPONSE_TIMEOUT,
};

/// One run of a job, as the handler gets it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Job {
    pub id: String,
    pub payload: Vec<u8>,
    /// 1 on the first run, 2 on the first retry, and so on.
    pub attempt: u64,
    /// The pending entry that delivered this run, for logs: the stream
    /// entry id this worker read (`XREADGROUP`) or took over (`XAUTOCLAIM`).
    /// A retry arrives in a new entry, so it differs from run to run.
    pub entry_id: String,
    /// The job's group ([`crate::AddOptions::group`]), `None` without one.
    pub group: Option<String>,
}

/// Why a run failed. Any `std::error::Error` converts into `Failed` with its
/// text, so `?` works in a handler.
///
/// `JobError` itself deliberately does not implement `std::error::Error`:
/// that would conflict with the blanket conversion.
pub enum JobError {
    /// A failure: the server schedules a retry by the worker's backoff
    /// policy, or moves the job to the dead set after its last attempt.
    Failed(String),
    /// The dependency asked to wait (a 429 or 503 with `Retry-After`): a
    /// failure as above, and the queue is held for this many ms (at most a
    /// day), so no worker starts any of its jobs meanwhile. `RetryAfter(0)`
    /// holds nothing (and leaves a hold another worker set in force).
    RetryAfter(u64),
    /// As `RetryAfter`, but only `group` is held (`ECHO.HOLD ... GROUP`):
    /// the other groups' jobs go on, the held group's wait in the schedule
    /// until the hold ends. A group the server would refuse (not 1..=1024
    /// bytes) holds nothing: the failure is written and the refusal logged.
    /// [`JobError::retry_after`] picks between the two.
    RetryAfterGroup { ms: u64, group: String },
}

impl JobError {
    /// A plain failure with this message.
    pub fn msg(message: impl Into<String>) -> JobError {
        JobError::Failed(message.into())
    }

    /// `RetryAfterGroup` for `Some(group)`, `RetryAfter` (the whole queue)
    /// for `None`: `JobError::retry_after(ms, job.group.clone())` holds the
    /// job's own group, and for a job added without one, whose ungrouped
    /// fellows have no name a hold could take, the whole queue.
    pub fn retry_after(ms: u64, group: Option<String>) -> JobError {
        match group {
            Some(group) => JobError::RetryAfterGroup { ms, group },
            None => JobError::RetryAfter(ms),
        }
    }
}

impl<E: std::error::Error> From<E> for JobError {
    fn from(error: E) -> JobError {
        JobError::Failed(error.to_string())
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobError::Failed(message) => f.write_str(message),
            // the same text as the other libraries' RetryAfter, a group or not
            JobError::RetryAfter(ms) | JobError::RetryAfterGroup { ms, .. } => {
                write!(f, "retry after {ms} ms")
            }
        }
    }
}

impl fmt::Debug for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobError::Failed(message) => f.debug_tuple("Failed").field(message).finish(),
            JobError::RetryAfter(ms) => f.debug_tuple("RetryAfter").field(ms).finish(),
            JobError::RetryAfterGroup { ms, group } => f
                .debug_struct("RetryAfterGroup")
                .field("ms", ms)
                .field("group", group)
                .finish(),
        }
    }
}

/// A worker's settings; `WorkerOptions::default()` has the documented
/// defaults.
#[derive(Clone, Debug)]
pub struct WorkerOptions {
    /// Handlers running at once (at least 1).
    pub concurrency: usize,
    /// The backoff policy the server draws retry delays from.
    pub backoff: String,
    /// Failures after which a job is dead (at least 1).
    pub max_attempts: u64,
    /// How long a job may go without a sign of life from its worker before
    /// another worker takes it over (at least 3).
    pub lease_ms: u64,
    /// Deliveries without an outcome after which a job is failed instead of
    /// run again (a job that kills its worker ends in the dead set; at
    /// least 1).
    pub max_deliveries: u64,
    /// How long `run` waits, after `close`, for the running handlers.
    pub shutdown_timeout_ms: u64,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        WorkerOptions {
            concurrency: 10,
            backoff: DEFAULT_BACKOFF.into(),
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            lease_ms: DEFAULT_LEASE_MS,
            max_deliveries: DEFAULT_MAX_DELIVERIES,
            shutdown_timeout_ms: DEFAULT_SHUTDOWN_TIMEOUT_MS,
        }
    }
}

type HandlerFuture = Pin<Box<dyn Future<Output = Result<(), JobError>> + Send>>;
type Handler = Arc<dyn Fn(Job) -> HandlerFuture + Send + Sync>;

/// How often the worker asks whether the server promotes its queue itself.
const QUEUES_EVERY: Duration = Duration::from_secs(10);
/// How often a worker waiting out a hold asks whether it still holds.
const HOLD_CHECK: Duration = Duration::from_secs(1);

/// Closes a running [`Worker`]; cloneable and usable from any task.
#[derive(Clone)]
pub struct WorkerHandle {
    close: Arc<watch::Sender<bool>>,
}

impl WorkerHandle {
    /// Asks the worker to stop: it takes nothing new, waits up to
    /// `shutdown_timeout_ms` for the running handlers, writes their outcomes,
    /// and then [`Worker::run`] returns.
    pub fn close(&self) {
        self.close.send_replace(true);
    }
}

/// Runs a handler on the jobs of one queue. See [`Worker::run`].
///
/// On a sharded queue ([`Queue::with_shards`]) it works every shard with
/// one concurrency: each shard has its own reading connection, leases,
/// takeovers and acknowledgements, and the shards' readers share the slots.
pub struct Worker {
    /// One per shard, shard 0 first.
    shards: Vec<(Arc<Inner>, mpsc::UnboundedReceiver<AckMsg>)>,
}

/// A stream entry this worker holds, with the job it names.
#[derive(Clone, Debug)]
struct Entry {
    entry: String,
    /// `None` for an entry without a `job` field (not written by echomq).
    id: Option<String>,
    /// The delivery count, for entries taken over (0: a fresh delivery).
    deliveries: u64,
}

enum AckMsg {
    Ack(Entry),
    Flush(oneshot::Sender<()>),
}

/// One shard's part of a worker (the whole worker on a queue of one shard).
struct Inner {
    /// The shard, as a queue of one shard.
    queue: Queue,
    /// The queue has more than one shard: the reads of
    /// [`Inner::read_loop_sharded`].
    sharded: bool,
    /// The other shards' schedules, which a `RetryAfter` holds too.
    other_schedules: Vec<String>,
    handler: Handler,
    options: WorkerOptions,
    consumer: String,
    slots: Arc<Semaphore>,
    /// Entries this worker holds and has no outcome for: their lease is
    /// renewed.
    held: Mutex<HashSet<String>>,
    /// The server does not promote this queue by itself.
    self_promote: AtomicBool,
    /// `run` has returned: late outcomes are not written.
    stopped: Arc<AtomicBool>,
    /// The shutdown timeout has passed: outcomes refused by a lost
    /// connection are no longer sent again.
    abandon: Arc<AtomicBool>,
    /// Where the next `XAUTOCLAIM` goes on (step 7).
    cursor: Mutex<String>,
    fail_script: Script,
    success_script: Script,
    hand_back_script: Script,
    close: Arc<watch::Sender<bool>>,
    acks: mpsc::UnboundedSender<AckMsg>,
}

impl Worker {
    /// A worker for `queue` running `handler` (an async function of a
    /// [`Job`]) on at most `options.concurrency` jobs at once.
    pub fn new<F, Fut>(queue: Queue, handler: F, options: WorkerOptions) -> Worker
    where
        F: Fn(Job) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), JobError>> + Send + 'static,
    {
        let handler: Handler = Arc::new(move |job| Box::pin(handler(job)));
        let consumer = consumer_name();
        let slots = Arc::new(Semaphore::new(options.concurrency));
        let close = Arc::new(watch::channel(false).0);
        let (stopped, abandon) = (Arc::default(), Arc::default());
        let shards = queue.each_shard();
        let schedules: Vec<String> = shards.iter().map(|s| s.keys.schedule.clone()).collect();
        let sharded = shards.len() > 1;
        let shards = shards
            .into_iter()
            .map(|shard| {
                let (acks_tx, acks_rx) = mpsc::unbounded_channel();
                let inner = Inner {
                    queue: shard.clone(),
                    sharded,
                    other_schedules: schedules
                        .iter()
                        .filter(|s| **s != shard.keys.schedule)
                        .cloned()
                        .collect(),
                    handler: handler.clone(),
                    consumer: consumer.clone(),
                    slots: slots.clone(),
                    options: options.clone(),
                    held: Mutex::new(HashSet::new()),
                    self_promote: AtomicBool::new(true),
                    stopped: Arc::clone(&stopped),
                    abandon: Arc::clone(&abandon),
                    cursor: Mutex::new("0-0".into()),
                    fail_script: Script::new(FAIL),
                    success_script: Script::new(SUCCEED),
                    hand_back_script: Script::new(HAND_BACK),
                    close: close.clone(),
                    acks: acks_tx,
                };
                (Arc::new(inner), acks_rx)
            })
            .collect();
        Worker { shards }
    }

    /// A handle whose [`WorkerHandle::close`] stops this worker.
    pub fn handle(&self) -> WorkerHandle {
        WorkerHandle {
            close: self.shards[0].0.close.clone(),
        }
    }

    /// This worker's consumer name in the group (`<host>-<pid>-<6 hex>`).
    pub fn consumer(&self) -> &str {
        &self.shards[0].0.consumer
    }

    /// Runs until [`WorkerHandle::close`]: creates the group, then takes,
    /// runs and acknowledges jobs. Returns an error only when starting fails
    /// (invalid options, no server, a bad backoff policy); errors while
    /// running are reported on stderr and retried.
    pub async fn run(self) -> RedisResult<()> {
        let Worker { shards } = self;
        let inner = shards[0].0.clone();
        check_options(&inner.options)?;
        let mut conn = inner.queue.conn.clone();
        for (shard, _) in &shards {
            shard.queue.ensure_group().await?;
        }
        // The policy is checked once here (ECHO.DELAY writes nothing), not
        // in each failure's transaction, where an error would let the rest
        // of the transaction drop the job.
        let _: i64 = redis::cmd("ECHO.DELAY")
            .arg(&inner.options.backoff)
            .arg(1)
            .query_async(&mut conn)
            .await?;
        let mut read_conns = Vec::with_capacity(shards.len());
        for (shard, _) in &shards {
            shard.refresh_queues(&mut conn).await?;
            // The blocking reads' own connection, one per shard: a read
            // blocked on one shard holds no other up.
            read_conns.push(
                QueueConnection::open(
                    &shard.queue.backend,
                    &shard.queue.name,
                    Duration::from_millis(1000) + RESPONSE_TIMEOUT,
                )
                .await?,
            );
        }

        let mut ack_tasks = Vec::with_capacity(shards.len());
        let mut side_tasks = Vec::with_capacity(2 * shards.len());
        let mut read_tasks = Vec::with_capacity(shards.len());
        for ((shard, acks), read_conn) in shards.into_iter().zip(read_conns) {
            ack_tasks.push((shard.clone(), tokio::spawn(shard.clone().ack_loop(acks))));
            side_tasks.push(tokio::spawn(shard.clone().lease_loop()));
            side_tasks.push(tokio::spawn(shard.clone().queues_loop()));
            read_tasks.push(tokio::spawn(shard.read_loop(read_conn)));
        }
        for task in read_tasks {
            let _ = task.await;
        }

        // Wait for the running handlers (they hold the slots, and keep them
        // until their failure is written).
        let deadline =
            tokio::time::Instant::now() + Duration::from_millis(inner.options.shutdown_timeout_ms);
        let all = inner.options.concurrency as u32;
        let _ = tokio::time::timeout_at(deadline, inner.slots.acquire_many(all)).await;
        inner.stopped.store(true, Ordering::SeqCst);
        let mut flushed = Vec::with_capacity(ack_tasks.len());
        for (shard, _) in &ack_tasks {
            let (flushed_tx, flushed_rx) = oneshot::channel();
            if shard.acks.send(AckMsg::Flush(flushed_tx)).is_ok() {
                flushed.push(flushed_rx);
            }
        }
        for mut flushed_rx in flushed {
            if tokio::time::timeout_at(deadline, &mut flushed_rx)
                .await
                .is_err()
            {
                // Successes still refused by a lost connection: the attempt
                // on the wire is the last one.
                inner.abandon.store(true, Ordering::SeqCst);
                let _ = flushed_rx.await;
            }
        }
        inner.abandon.store(true, Ordering::SeqCst);
        for (_, task) in ack_tasks {
            let _ = task.await;
        }
        for task in side_tasks {
            task.abort();
        }
        Ok(())
    }
}

impl Queue {
    /// Creates the workers' consumer group (and the stream) when missing.
    /// On a sharded queue, on every shard.
    pub async fn ensure_group(&self) -> RedisResult<()> {
        for shard in self.each_shard() {
            shard.ensure_group_of_shard().await?;
        }
        Ok(())
    }

    async fn ensure_group_of_shard(&self) -> RedisResult<()> {
        let mut conn = self.conn.clone();
        let created: RedisResult<()> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(&self.keys.pending)
            .arg(GROUP)
            .arg("0")
            .arg("MKSTREAM")
            .query_async(&mut conn)
            .await;
        match created {
            Err(e) if e.code() != Some("BUSYGROUP") => Err(e),
            _ => {
                self.stream_made.store(true, Ordering::Relaxed);
                Ok(())
            }
        }
    }
}

/// The checks of `docs/clients.md`: a zero lease would let every worker take
/// every live entry over, and zero deliveries would fail every job taken over.
fn check_options(options: &WorkerOptions) -> RedisResult<()> {
    let problem = if options.concurrency < 1 {
        format!(
            "concurrency must be at least 1, got {}",
            options.concurrency
        )
    } else if options.lease_ms < 3 {
        format!("lease_ms must be at least 3, got {}", options.lease_ms)
    } else if options.max_deliveries < 1 {
        format!(
            "max_deliveries must be at least 1, got {}",
            options.max_deliveries
        )
    } else if options.max_attempts < 1 {
        format!(
            "max_attempts must be at least 1, got {}",
            options.max_attempts
        )
    } else {
        return Ok(());
    };
    Err(client_error("invalid worker options", problem))
}

/// An error of the connection rather than of the command: sending the same
/// again may succeed (a stale connection, see [`stale`], has been replaced
/// by then; on a cluster, the slot has a primary again, see
/// [`cluster_transient`]).
fn transient(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || stale(e)
        || cluster_transient(e)
}

/// The next wait before sending again: doubled, at most a second.
fn next_backoff(backoff: Duration) -> Duration {
    (backoff * 2).min(Duration::from_secs(1))
}

impl Inner {
    fn closing(&self) -> bool {
        *self.close.borrow()
    }

    /// Resolves once `close` has been called.
    async fn closed(&self) {
        let mut rx = self.close.subscribe();
        let _ = rx.wait_for(|closed| *closed).await;
    }

    async fn refresh_queues(&self, conn: &mut QueueConnection) -> RedisResult<()> {
        let pairs: Vec<(Vec<u8>, Vec<u8>)> = redis::cmd("ECHO.QUEUES").query_async(conn).await?;
        let keys = &self.queue.keys;
        let listed = pairs.iter().any(|(schedule, pending)| {
            schedule == keys.schedule.as_bytes() && pending == keys.pending.as_bytes()
        });
        self.self_promote.store(!listed, Ordering::Relaxed);
        Ok(())
    }

    async fn queues_loop(self: Arc<Self>) {
        let mut conn = self.queue.conn.clone();
        loop {
            tokio::time::sleep(QUEUES_EVERY).await;
            if let Err(e) = self.refresh_queues(&mut conn).await {
                log(&format!("ECHO.QUEUES failed: {e}"));
            }
        }
    }

    /// Step 2: take new entries whenever slots are free; step 7 on the way.
    async fn read_loop(self: Arc<Self>, mut conn: QueueConnection) {
        if self.sharded {
            return self.read_loop_sharded(conn).await;
        }
        let takeover_every = Duration::from_millis((self.options.lease_ms / 2).max(1));
        let mut next_takeover = tokio::time::Instant::now();
        while !self.closing() {
            let mut permit = tokio::select! {
                permit = self.slots.clone().acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => return,
                },
                _ = self.closed() => break,
            };
            let extra = self.slots.available_permits();
            if extra > 0 {
                if let Ok(more) = self.slots.clone().try_acquire_many_owned(extra as u32) {
                    permit.merge(more);
                }
            }
            if tokio::time::Instant::now() >= next_takeover {
                next_takeover = tokio::time::Instant::now() + takeover_every;
                if !self.take_over_then_read(&mut conn, &mut permit).await {
                    continue;
                }
            }
            let count = permit.num_permits();
            let read = self.read(&mut conn, count, true).await;
            let (entries, held_until, now) = match read {
                Ok(read) => read,
                Err(e) => {
                    drop(permit);
                    if !self.read_failed(e).await {
                        break;
                    }
                    continue;
                }
            };
            if entries.is_empty() {
                continue;
            }
            let unused = permit.num_permits() - entries.len();
            drop(permit.split(unused));
            if !self
                .start_when_released(&mut conn, entries, held_until, now, permit)
                .await
            {
                break;
            }
        }
    }

    /// Step 2 for one shard of a sharded queue, beside the other shards'
    /// readers (one task each, sharing the slots). With slots free it takes
    /// them all and reads without blocking, as many entries as slots; when
    /// that finds nothing, or no slot is free, it waits for one entry with
    /// a blocking read that holds no slot, so every shard is waited on at
    /// once and a job added to any starts at once. That entry then waits
    /// for a slot in turn with the other shards' (the semaphore serves its
    /// waiters first come, first served, before a reader can take a freed
    /// slot without waiting): a shard 10,000 deep cannot keep another's
    /// job waiting behind its backlog, and a worker holds at most one entry
    /// per shard beyond its concurrency (leased meanwhile, handed back on
    /// close).
    async fn read_loop_sharded(self: Arc<Self>, mut conn: QueueConnection) {
        let takeover_every = Duration::from_millis((self.options.lease_ms / 2).max(1));
        let mut next_takeover = tokio::time::Instant::now();
        while !self.closing() {
            let free = self.slots.available_permits();
            let mut permit = match free {
                0 => None,
                free => self.slots.clone().try_acquire_many_owned(free as u32).ok(),
            };
            let takeover_due = tokio::time::Instant::now() >= next_takeover;
            if permit.is_none() && takeover_due {
                // A busy worker takes over too: it waits its turn for a slot,
                // as an entry read does.
                permit = tokio::select! {
                    permit = self.slots.clone().acquire_owned() => permit.ok(),
                    _ = self.closed() => break,
                };
            }
            if let Some(mut permit) = permit {
                if takeover_due {
                    next_takeover = tokio::time::Instant::now() + takeover_every;
                    if !self.take_over_then_read(&mut conn, &mut permit).await {
                        continue;
                    }
                }
                let count = permit.num_permits();
                let (entries, held_until, now) = match self.read(&mut conn, count, false).await {
                    Ok(read) => read,
                    Err(e) => {
                        drop(permit);
                        if !self.read_failed(e).await {
                            break;
                        }
                        continue;
                    }
                };
                if !entries.is_empty() {
                    let unused = permit.num_permits() - entries.len();
                    drop(permit.split(unused));
                    if !self
                        .start_when_released(&mut conn, entries, held_until, now, permit)
                        .await
                    {
                        break;
                    }
                    continue;
                }
            }
            let (entries, held_until, now) = match self.read(&mut conn, 1, true).await {
                Ok(read) => read,
                Err(e) => {
                    if !self.read_failed(e).await {
                        break;
                    }
                    continue;
                }
            };
            if entries.is_empty() {
                continue;
            }
            self.hold(&entries);
            if self.closing() || !self.wait_for_release(&mut conn, held_until, now).await {
                self.give_back(entries).await;
                break;
            }
            let permit = tokio::select! {
                permit = self.slots.clone().acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => {
                        self.give_back(entries).await;
                        return;
                    }
                },
                _ = self.closed() => {
                    self.give_back(entries).await;
                    break;
                }
            };
            self.start(&mut conn, entries, permit).await;
        }
    }

    /// The entries of a read, holding a slot each, started once the queue's
    /// (a shard's) hold is over; false when `close` came first (they are
    /// handed back).
    async fn start_when_released(
        self: &Arc<Self>,
        conn: &mut QueueConnection,
        entries: Vec<Entry>,
        held_until: i64,
        now: i64,
        permit: OwnedSemaphorePermit,
    ) -> bool {
        self.hold(&entries);
        if self.closing() || !self.wait_for_release(conn, held_until, now).await {
            self.give_back(entries).await;
            return false;
        }
        self.start(conn, entries, permit).await;
        true
    }

    /// A read refused: reported, then a second's pause (false when `close`
    /// came first), and the stream and its group made again in case they
    /// were deleted (NOGROUP, which a pipeline reports wrapped). A broken
    /// connection replaces itself.
    async fn read_failed(&self, e: RedisError) -> bool {
        log(&format!("reading {} failed: {e}", self.queue.keys.pending));
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = self.closed() => return false,
        }
        let _ = self.queue.ensure_group().await;
        true
    }

    /// Step 7 with the slots of `permit` (a failure is reported): false when
    /// it left no slot for a read, or `close` came meanwhile.
    async fn take_over_then_read(
        self: &Arc<Self>,
        conn: &mut QueueConnection,
        permit: &mut OwnedSemaphorePermit,
    ) -> bool {
        if let Err(e) = self.take_over(conn, permit).await {
            log(&format!("taking over entries failed: {e}"));
        }
        permit.num_permits() > 0 && !self.closing()
    }

    /// One read: `[ECHO.PROMOTE,] XREADGROUP, ECHO.LIMITS, TIME`, pipelined.
    /// Returns the entries, the hold's end and the server's time (ms).
    /// Without `block` the read answers at once, with what the stream has.
    async fn read(
        &self,
        conn: &mut QueueConnection,
        count: usize,
        block: bool,
    ) -> RedisResult<(Vec<Entry>, i64, i64)> {
        let keys = &self.queue.keys;
        let self_promote = self.self_promote.load(Ordering::Relaxed);
        // At most lease_ms / 2, so that takeovers (step 7) come in time.
        let block_ms = if self_promote { 100 } else { 1000 }
            .min(self.options.lease_ms / 2)
            .max(1);
        let mut promote = redis::cmd("ECHO.PROMOTE");
        promote
            .arg(&keys.schedule)
            .arg(&keys.pending)
            .arg("LIMIT")
            .arg(PROMOTE_LIMIT);
        let mut xreadgroup = redis::cmd("XREADGROUP");
        xreadgroup
            .arg("GROUP")
            .arg(GROUP)
            .arg(&self.consumer)
            .arg("COUNT")
            .arg(count);
        if block {
            xreadgroup.arg("BLOCK").arg(block_ms);
        }
        xreadgroup.arg("STREAMS").arg(&keys.pending).arg(">");
        let mut limits = redis::cmd("ECHO.LIMITS");
        limits.arg(&keys.schedule);
        let mut replies: Vec<RedisResult<Value>> = if conn.is_cluster() {
            // The same commands one by one: the cluster client sends a
            // pipeline again whole when one of its replies is a redirection
            // (ASK, TRYAGAIN while the slot migrates), and a second
            // XREADGROUP would leave the entries the first one delivered
            // pending to this worker, unseen, until a takeover after the
            // lease. A command refused so ran nowhere, and is sent again
            // alone.
            let mut replies = Vec::with_capacity(4);
            if self_promote {
                replies.push(promote.query_async(conn).await);
            }
            replies.push(Ok(xreadgroup.query_async(conn).await?));
            let mut after = redis::pipe();
            after.ignore_errors();
            after.add_command(limits).cmd("TIME");
            // Entries are in hand now: a failure here must not drop them
            // (with no hold known, and no clock, they start at once).
            match after.query_async::<Vec<RedisResult<Value>>>(conn).await {
                Ok(after) => replies.extend(after),
                Err(e) => replies.extend([Err(e.clone()), Err(e)]),
            }
            replies
        } else {
            let mut pipe = redis::pipe();
            // Each reply on its own: an error of ECHO.PROMOTE (or
            // ECHO.LIMITS) must not throw away the entries XREADGROUP
            // delivered.
            pipe.ignore_errors();
            if self_promote {
                pipe.add_command(promote);
            }
            pipe.add_command(xreadgroup).add_command(limits).cmd("TIME");
            pipe.query_async(conn).await?
        };
        if replies.len() != if self_promote { 4 } else { 3 } {
            return Err(client_error(
                "unexpected reply",
                format!("{} replies to a read", replies.len()),
            ));
        }
        if self_promote {
            if let Err(e) = replies.remove(0) {
                log(&format!("ECHO.PROMOTE {} failed: {e}", keys.schedule));
            }
        }
        let mut replies = replies.into_iter();
        let read = replies.next().expect("three replies")?;
        let limits = match replies.next().expect("three replies") {
            Ok(limits) => limits,
            Err(e) => {
                log(&format!("ECHO.LIMITS {} failed: {e}", keys.schedule));
                Value::Nil
            }
        };
        let (secs, micros) = server_time(replies.next().expect("three replies"));
        let mut entries = Vec::new();
        if let Value::Array(streams) = read {
            for stream in streams {
                if let Value::Array(mut parts) = stream {
                    if parts.len() == 2 {
                        entries.extend(parse_entries(parts.pop().unwrap()));
                    }
                }
            }
        } else if let Value::Map(streams) = read {
            for (_, list) in streams {
                entries.extend(parse_entries(list));
            }
        }
        Ok((entries, held_until(&limits), secs * 1000 + micros / 1000))
    }

    /// Waits while the queue is held (`ECHO.LIMITS` says until when, by the
    /// server's clock). False when `close` came first.
    async fn wait_for_release(
        &self,
        conn: &mut QueueConnection,
        mut until: i64,
        mut now: i64,
    ) -> bool {
        while until > now {
            // Asked again at least every second: a hold lifted or shortened
            // meanwhile is seen.
            let wait = Duration::from_millis((until - now) as u64).min(HOLD_CHECK);
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.closed() => return false,
            }
            // A longer hold may have come meanwhile: ask again.
            let mut pipe = redis::pipe();
            pipe.cmd("ECHO.LIMITS").arg(&self.queue.keys.schedule);
            pipe.cmd("TIME");
            match pipe.query_async::<(Value, (i64, i64))>(conn).await {
                Ok((limits, (secs, micros))) => {
                    until = held_until(&limits);
                    now = secs * 1000 + micros / 1000;
                }
                Err(e) => {
                    log(&format!("ECHO.LIMITS failed: {e}"));
                    return !self.closing();
                }
            }
        }
        true
    }

    fn hold(&self, entries: &[Entry]) {
        let mut held = self.held.lock().unwrap();
        held.extend(entries.iter().map(|e| e.entry.clone()));
    }

    fn release(&self, entry: &str) {
        self.held.lock().unwrap().remove(entry);
    }

    /// Hands entries taken but not started back to the stream (after
    /// `close`), so another worker gets them at once rather than after the
    /// lease: one hand-back script per entry, pipelined (each adds the job
    /// as a new entry before it acknowledges and deletes the old one). An
    /// entry naming no job is acknowledged and deleted.
    async fn give_back(&self, entries: Vec<Entry>) {
        let keys = &self.queue.keys;
        let mut pipe = redis::pipe();
        // Loaded first, so that EVALSHA finds it.
        pipe.cmd("SCRIPT").arg("LOAD").arg(HAND_BACK).ignore();
        for e in &entries {
            match &e.id {
                Some(id) => {
                    pipe.cmd("EVALSHA")
                        .arg(self.hand_back_script.get_hash())
                        .arg(1)
                        .arg(&keys.pending)
                        .arg(&e.entry)
                        .arg(id);
                }
                None => {
                    pipe.cmd("XACK")
                        .arg(&keys.pending)
                        .arg(GROUP)
                        .arg(&e.entry)
                        .ignore();
                    pipe.cmd("XDEL").arg(&keys.pending).arg(&e.entry);
                }
            }
        }
        let mut conn = self.queue.conn.clone();
        // Each reply on its own: one entry refused does not hide the others.
        pipe.ignore_errors();
        // Sent again for a few seconds while the connection (or the cluster)
        // refuses it: the scripts hand back only entries still pending, so
        // a resend adds no second run. Past that the entries wait for a
        // takeover after the lease.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let mut backoff = Duration::from_millis(100);
        let sent = loop {
            match pipe.query_async::<Vec<RedisResult<Value>>>(&mut conn).await {
                Err(e) if transient(&e) && tokio::time::Instant::now() + backoff < deadline => {
                    tokio::time::sleep(backoff).await;
                    backoff = next_backoff(backoff);
                }
                Ok(replies)
                    if replies.iter().any(|r| r.as_ref().is_err_and(transient))
                        && tokio::time::Instant::now() + backoff < deadline =>
                {
                    tokio::time::sleep(backoff).await;
                    backoff = next_backoff(backoff);
                }
                result => break result,
            }
        };
        match sent {
            Ok(replies) => {
                for reply in replies {
                    if let Err(e) = reply {
                        log(&format!("giving back an entry failed: {e}"));
                    }
                }
            }
            Err(e) => log(&format!(
                "giving back {} entries failed: {e}",
                entries.len()
            )),
        }
        for e in &entries {
            self.release(&e.entry);
        }
    }

    /// Fetches payloads and attempts in one pipeline and starts a handler
    /// per job; `permit` holds one slot per entry.
    async fn start(
        self: &Arc<Self>,
        conn: &mut QueueConnection,
        entries: Vec<Entry>,
        mut permit: OwnedSemaphorePermit,
    ) {
        let keys = &self.queue.keys;
        let mut pipe = redis::pipe();
        for e in &entries {
            let id = e.id.as_deref().unwrap_or("");
            pipe.cmd("HGET").arg(&keys.jobs).arg(id);
            pipe.cmd("HGET").arg(&keys.attempts).arg(id);
        }
        let mut backoff = Duration::from_millis(100);
        let deadline = tokio::time::Instant::now() + RESPONSE_TIMEOUT;
        let fetched = loop {
            // Reads only: sent again while the connection (or the cluster,
            // in a failover or a slot move) refuses them, the entries held
            // and their leases renewed meanwhile, rather than left to a
            // takeover after the lease.
            match pipe.query_async::<Vec<Value>>(conn).await {
                Err(e)
                    if transient(&e)
                        && !self.closing()
                        && tokio::time::Instant::now() + backoff < deadline =>
                {
                    log(&format!("fetching payloads failed, asking again: {e}"));
                    tokio::time::sleep(backoff).await;
                    backoff = next_backoff(backoff);
                }
                result => break result,
            }
        };
        let fields: Vec<(Option<Vec<u8>>, Option<u64>)> = match fetched.and_then(|flat| {
            flat.chunks(2)
                .map(|pair| {
                    redis::from_redis_value(Value::Array(pair.to_vec())).map_err(Into::into)
                })
                .collect()
        }) {
            Ok(fields) => fields,
            Err(e) => {
                // Left in the group: taken over after the lease.
                log(&format!("fetching payloads failed: {e}"));
                for e in &entries {
                    self.release(&e.entry);
                }
                return;
            }
        };
        for (e, (payload, attempts)) in entries.into_iter().zip(fields) {
            let slot = permit.split(1).expect("one slot per entry");
            let (Some(id), Some(payload)) = (e.id.clone(), payload) else {
                // Removed (or not a job): the entry is acknowledged and
                // deleted, without the HDELs of a success, which would
                // delete the payload of a job added again with this id.
                let _ = self.acks.send(AckMsg::Ack(Entry { id: None, ..e }));
                drop(slot);
                continue;
            };
            let attempt = attempts.unwrap_or(0) + 1;
            let (payload, job_group) = envelope::unwrap(payload);
            let inner = self.clone();
            if e.deliveries > self.options.max_deliveries {
                let message = format!("delivered {} times without an outcome", e.deliveries);
                tokio::spawn(async move {
                    let error = JobError::Failed(message);
                    inner
                        .fail(&e.entry, &id, attempt, &error, job_group.as_deref())
                        .await;
                    inner.release(&e.entry);
                    drop(slot);
                });
                continue;
            }
            tokio::spawn(async move {
                let job = Job {
                    id: id.clone(),
                    payload,
                    attempt,
                    entry_id: e.entry.clone(),
                    group: job_group
                        .as_deref()
                        .map(|g| String::from_utf8_lossy(g).into_owned()),
                };
                let outcome = match tokio::spawn((inner.handler)(job)).await {
                    Ok(outcome) => outcome,
                    Err(join) => Err(JobError::Failed(panic_message(join))),
                };
                if inner.stopped.load(Ordering::SeqCst) {
                    // `run` returned: left in the group for another worker.
                    return;
                }
                match outcome {
                    Ok(()) => {
                        // Leased until the acknowledgement is confirmed.
                        let _ = inner.acks.send(AckMsg::Ack(e));
                    }
                    Err(error) => {
                        let group = job_group.as_deref();
                        inner.fail(&e.entry, &id, attempt, &error, group).await;
                        inner.release(&e.entry);
                    }
                }
                drop(slot);
            });
        }
    }

    /// Steps 4 and 5: a failed run, by the failure script. Sent again while
    /// the connection refuses it (the entry stays leased meanwhile), until
    /// the shutdown timeout has passed; a refusal by the server leaves the
    /// entry in the group, taken over after the lease. A grouped job
    /// (`job_group`, from its payload's envelope) is retried into its group.
    async fn fail(
        &self,
        entry: &str,
        id: &str,
        attempt: u64,
        error: &JobError,
        job_group: Option<&[u8]>,
    ) {
        let keys = &self.queue.keys;
        let mut message = error.to_string();
        if message.len() > MAX_ERROR_BYTES {
            let mut cut = MAX_ERROR_BYTES;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
        }
        // RetryAfter(0) holds nothing: `ECHO.HOLD ... 0` would lift the hold
        // of another worker.
        let (hold_ms, hold_group) = match error {
            JobError::RetryAfter(ms) => ((*ms).min(MAX_HOLD_MS), None),
            JobError::RetryAfterGroup { ms, group } => match envelope::check_job_group(group) {
                Ok(()) if *ms > 0 => ((*ms).min(MAX_HOLD_MS), Some(group.as_bytes())),
                Ok(()) => (0, None),
                Err(e) => {
                    log(&format!("the failure of {id} holds nothing: {e}"));
                    (0, None)
                }
            },
            JobError::Failed(_) => (0, None),
        };
        let mut invocation = self.fail_script.prepare_invoke();
        invocation
            .key(&keys.schedule)
            .key(&keys.pending)
            .key(&keys.dead)
            .key(&keys.attempts)
            .key(&keys.errors)
            .key(&keys.jobs)
            .arg(id)
            .arg(entry)
            .arg(&self.options.backoff)
            .arg(attempt)
            .arg(self.options.max_attempts)
            .arg(message)
            .arg(hold_ms);
        if job_group.is_some() || hold_group.is_some() {
            // '': no group of its own, before the group to hold
            invocation.arg(job_group.unwrap_or_default());
        }
        if let Some(group) = hold_group {
            invocation.arg(group);
        }
        let mut conn = self.queue.conn.clone();
        let mut backoff = Duration::from_millis(100);
        loop {
            match invocation.invoke_async::<Value>(&mut conn).await {
                Ok(reply) => {
                    report_failure_reply(id, &reply);
                    if hold_ms > 0 {
                        self.hold_other_shards(hold_ms, hold_group).await;
                    }
                    return;
                }
                Err(e) if transient(&e) && !self.abandon.load(Ordering::SeqCst) => {
                    log(&format!(
                        "writing the failure of {id} failed, sending it again: {e}"
                    ));
                    tokio::time::sleep(backoff).await;
                    backoff = next_backoff(backoff);
                }
                Err(e) => {
                    log(&format!("writing the failure of {id} failed: {e}"));
                    return;
                }
            }
        }
    }

    /// A `RetryAfter` on a sharded queue holds every shard: the job's own
    /// was held by its failure's script, the others follow
    /// (`ECHO.HOLD <schedule> <ms> [GROUP <group>]` each). A refusal is
    /// logged: the failure is written, and the job's own shard is held.
    async fn hold_other_shards(&self, hold_ms: u64, group: Option<&[u8]>) {
        let mut conn = self.queue.conn.clone();
        for schedule in &self.other_schedules {
            let mut hold = redis::cmd("ECHO.HOLD");
            hold.arg(schedule).arg(hold_ms);
            if let Some(group) = group {
                hold.arg("GROUP").arg(group);
            }
            if let Err(e) = hold.query_async::<Value>(&mut conn).await {
                log(&format!("holding {schedule} failed: {e}"));
            }
        }
    }

    /// Step 3: successes acknowledged in batches; whatever finished while
    /// one acknowledgement was on the wire goes in the next.
    async fn ack_loop(self: Arc<Self>, mut rx: mpsc::UnboundedReceiver<AckMsg>) {
        let mut conn = self.queue.conn.clone();
        while let Some(first) = rx.recv().await {
            let mut batch = Vec::new();
            let mut flushes = Vec::new();
            let mut next = Some(first);
            while let Some(msg) = next.take() {
                match msg {
                    AckMsg::Ack(e) => batch.push(e),
                    AckMsg::Flush(tx) => flushes.push(tx),
                }
                if batch.len() < SUCCESS_BATCH {
                    next = rx.try_recv().ok();
                }
            }
            if !batch.is_empty() {
                for chunk in batch.chunks(SUCCESS_BATCH) {
                    self.settle(&mut conn, chunk).await;
                }
                for e in &batch {
                    self.release(&e.entry);
                }
            }
            if !flushes.is_empty() {
                for tx in flushes {
                    let _ = tx.send(());
                }
                return;
            }
        }
    }

    /// Step 3 for at most [`SUCCESS_BATCH`] entries: one success script.
    /// Sent again while the connection refuses it: until it is confirmed the
    /// entries stay leased (no other worker runs them again), until the
    /// shutdown timeout has passed. A resend whose first try reached the
    /// server finds its entries acknowledged and deletes nothing.
    async fn settle(&self, conn: &mut QueueConnection, batch: &[Entry]) {
        let keys = &self.queue.keys;
        let mut invocation = self.success_script.prepare_invoke();
        invocation
            .key(&keys.pending)
            .key(&keys.jobs)
            .key(&keys.attempts)
            .key(&keys.errors);
        for e in batch {
            // An entry naming no job (not echomq's, or its job removed) is
            // acknowledged and deleted without the HDELs: "" is no job's id
            // (`add` refuses an empty one), so a job added again with the id
            // of a removed one keeps its payload.
            invocation.arg(&e.entry).arg(e.id.as_deref().unwrap_or(""));
        }
        let mut backoff = Duration::from_millis(100);
        loop {
            match invocation.invoke_async::<i64>(conn).await {
                Ok(_) => return,
                Err(e) if transient(&e) && !self.abandon.load(Ordering::SeqCst) => {
                    log(&format!(
                        "acknowledging {} jobs failed, sending again: {e}",
                        batch.len()
                    ));
                    tokio::time::sleep(backoff).await;
                    backoff = next_backoff(backoff);
                }
                Err(e) => {
                    log(&format!("acknowledging {} jobs failed: {e}", batch.len()));
                    return;
                }
            }
        }
    }

    /// Step 6: renews the lease of every entry held, every `lease_ms / 3`.
    async fn lease_loop(self: Arc<Self>) {
        let mut conn = self.queue.conn.clone();
        let every = Duration::from_millis((self.options.lease_ms / 3).max(1));
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let entries: Vec<String> = self.held.lock().unwrap().iter().cloned().collect();
            if entries.is_empty() {
                continue;
            }
            let mut cmd = redis::cmd("XCLAIM");
            cmd.arg(&self.queue.keys.pending)
                .arg(GROUP)
                .arg(&self.consumer)
                .arg(0);
            for entry in &entries {
                cmd.arg(entry);
            }
            cmd.arg("JUSTID");
            if let Err(e) = cmd.query_async::<Value>(&mut conn).await {
                log(&format!("renewing leases failed: {e}"));
            }
        }
    }

    /// Step 7 (from the read loop, every `lease_ms / 2`, with the slots it
    /// holds): the entries of dead or stuck workers, as many as `slots` has
    /// slots; those taken move out of `slots`.
    async fn take_over(
        self: &Arc<Self>,
        conn: &mut QueueConnection,
        slots: &mut OwnedSemaphorePermit,
    ) -> RedisResult<()> {
        let free = slots.num_permits();
        let keys = &self.queue.keys;
        // Goes on from where the previous call stopped: one call looks at no
        // more than 10 x COUNT entries, so from 0-0 each time an orphan
        // behind many live entries would never be reached.
        let cursor = self.cursor.lock().unwrap().clone();
        let reply: Value = redis::cmd("XAUTOCLAIM")
            .arg(&keys.pending)
            .arg(GROUP)
            .arg(&self.consumer)
            .arg(self.options.lease_ms)
            .arg(&cursor)
            .arg("COUNT")
            .arg(free)
            .query_async(conn)
            .await?;
        let mut entries = match reply {
            Value::Array(mut parts) if parts.len() >= 2 => {
                let next = text(&parts[0]).unwrap_or_else(|| "0-0".into());
                *self.cursor.lock().unwrap() = next;
                parse_entries(parts.swap_remove(1))
            }
            _ => Vec::new(),
        };
        if entries.is_empty() {
            return Ok(());
        }
        entries.truncate(free);
        let permit = slots.split(entries.len()).expect("a slot per entry");
        self.hold(&entries);
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for e in &entries {
            pipe.cmd("XPENDING")
                .arg(&keys.pending)
                .arg(GROUP)
                .arg(&e.entry)
                .arg(&e.entry)
                .arg(1);
        }
        pipe.cmd("ECHO.LIMITS").arg(&keys.schedule);
        pipe.cmd("TIME");
        let mut replies: Vec<RedisResult<Value>> = match pipe.query_async(conn).await {
            Ok(replies) => replies,
            Err(e) => {
                for e in &entries {
                    self.release(&e.entry);
                }
                return Err(e);
            }
        };
        let time = server_time(replies.pop().unwrap_or(Ok(Value::Nil)));
        let limits = match replies.pop() {
            Some(Ok(limits)) => limits,
            Some(Err(e)) => {
                log(&format!("ECHO.LIMITS {} failed: {e}", keys.schedule));
                Value::Nil
            }
            None => Value::Nil,
        };
        for (e, pending) in entries.iter_mut().zip(replies) {
            // [[entry, consumer, idle, deliveries]]
            e.deliveries = match pending {
                Ok(Value::Array(rows)) => match rows.first() {
                    Some(Value::Array(row)) => match row.get(3) {
                        Some(Value::Int(n)) => (*n).max(0) as u64,
                        _ => 0,
                    },
                    _ => 0,
                },
                _ => 0,
            };
        }
        let now = time.0 * 1000 + time.1 / 1000;
        if !self.wait_for_release(conn, held_until(&limits), now).await {
            self.give_back(entries).await;
            return Ok(());
        }
        self.start(conn, entries, permit).await;
        Ok(())
    }
}

/// The failure script's reply `[fired, held]`: a refused hold (`held` a
/// string, the hold's error) is reported, the failure itself was written.
/// -3 (written before: a resend) and -4 (the job was removed while it ran:
/// no trace written) need nothing more.
fn report_failure_reply(id: &str, reply: &Value) {
    let Value::Array(parts) = reply else {
        log(&format!(
            "unexpected reply to the failure of {id}: {reply:?}"
        ));
        return;
    };
    match parts.get(1) {
        Some(Value::Int(_)) => {}
        Some(held) => match text(held) {
            Some(refusal) => log(&format!(
                "the failure of {id} was written, but its hold was refused: {refusal}"
            )),
            None => log(&format!("unexpected hold in the failure of {id}: {held:?}")),
        },
        None => log(&format!(
            "unexpected reply to the failure of {id}: {reply:?}"
        )),
    }
}

/// Entries of an `XREADGROUP` or `XAUTOCLAIM` reply: `[[entry, [field,
/// value, ...]], ...]`.
fn parse_entries(list: Value) -> Vec<Entry> {
    let Value::Array(items) = list else {
        return Vec::new();
    };
    let mut entries = Vec::with_capacity(items.len());
    for item in items {
        let Value::Array(mut parts) = item else {
            continue; // an entry deleted meanwhile (nil on older servers)
        };
        if parts.is_empty() {
            continue;
        }
        let fields = if parts.len() > 1 {
            parts.pop().unwrap()
        } else {
            Value::Nil
        };
        let Some(entry) = text(&parts[0]) else {
            continue;
        };
        let mut id = None;
        let pairs: Vec<Value> = match fields {
            Value::Array(fields) => fields,
            Value::Map(map) => map.into_iter().flat_map(|(k, v)| [k, v]).collect(),
            _ => Vec::new(),
        };
        for pair in pairs.chunks(2) {
            if pair.len() == 2 && text(&pair[0]).as_deref() == Some("job") {
                id = text(&pair[1]);
            }
        }
        entries.push(Entry {
            entry,
            id,
            deliveries: 0,
        });
    }
    entries
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

/// `TIME`'s reply as (seconds, microseconds); (0, 0) when it failed (then
/// any hold looks over and the entries start rather than wait).
fn server_time(reply: RedisResult<Value>) -> (i64, i64) {
    match reply.and_then(|v| redis::from_redis_value(v).map_err(Into::into)) {
        Ok(time) => time,
        Err(e) => {
            log(&format!("TIME failed: {e}"));
            (0, 0)
        }
    }
}

/// `held-until-ms` of an `ECHO.LIMITS` reply (a flat array in RESP2, a map
/// in RESP3); 0 (not held) when missing or nil.
fn held_until(limits: &Value) -> i64 {
    let pairs: Vec<(&Value, &Value)> = match limits {
        Value::Array(items) => items
            .chunks(2)
            .filter(|p| p.len() == 2)
            .map(|p| (&p[0], &p[1]))
            .collect(),
        Value::Map(map) => map.iter().map(|(k, v)| (k, v)).collect(),
        _ => return 0,
    };
    for (key, value) in pairs {
        if text(key).as_deref() == Some("held-until-ms") {
            return match value {
                Value::Int(n) => *n,
                other => text(other).and_then(|t| t.parse().ok()).unwrap_or(0),
            };
        }
    }
    0
}

fn panic_message(join: tokio::task::JoinError) -> String {
    if join.is_cancelled() {
        return "the handler was cancelled".into();
    }
    let panic = join.into_panic();
    let detail = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into());
    format!("the handler panicked: {detail}")
}

/// `<host>-<pid>-<6 random hex>`.
fn consumer_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .unwrap_or_else(|| "host".into());
    format!(
        "{host}-{}-{:06x}",
        std::process::id(),
        rand::random::<u32>() & 0xff_ffff
    )
}

fn log(message: &str) {
    eprintln!("echomq-client: {message}");
}

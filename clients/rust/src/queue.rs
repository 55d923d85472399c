//! The producer's and the operator's side of a queue: adding jobs, counting,
//! reading and repairing the dead set.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{
    AsyncConnectionConfig, Client, Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult,
    Script, ServerErrorKind, Value,
};

use crate::envelope;
use crate::protocol::{
    ADD_BATCH, ADD_WITH_ID, GROUP, MAX_DELAY_MS, MAX_GROUPS_COUNT, MAX_GROUP_BURST, MAX_GROUP_RATE,
    PURGE_DEAD, REQUEUE,
};

/// A time-ordered unique id: the client's Unix time in ms as 13 digits, `-`,
/// then 16 lower-case hex digits from a random source.
pub fn new_job_id() -> String {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    format!("{ms:013}-{:016x}", rand::random::<u64>())
}

/// How long a command on the shared connection may wait for its reply. The
/// redis crate's default (500 ms) is short for a 1,000-job transaction of
/// large payloads on a busy server.
pub(crate) const RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);

/// How [`Queue::add`] adds a job.
#[derive(Clone, Debug, Default)]
pub struct AddOptions {
    /// The job's id. Given, `add` is idempotent while a job with this id
    /// exists; `None` makes a time-ordered unique one.
    pub id: Option<String>,
    /// Run no earlier than this many ms after the add, by the server's clock.
    pub delay_ms: u64,
    /// The job's group (1..=1024 bytes; not the workers' consumer group):
    /// released fairly across groups, under its group's limit, always
    /// through the schedule, and retried into it (docs/clients.md, Groups).
    pub group: Option<String>,
}

/// How many jobs are where (see [`Queue::counts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Waiting for their time (a delayed first run, a retry).
    pub scheduled: u64,
    /// In the schedule and due, not yet released (held, or not promoted yet).
    pub due: u64,
    /// In the stream, not yet delivered to a worker.
    pub pending: u64,
    /// Delivered to a worker, not yet acknowledged.
    pub in_flight: u64,
    /// Failed for the last time.
    pub dead: u64,
}

/// A job in the dead set (see [`Queue::dead`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadJob {
    pub id: String,
    /// The time of death, Unix ms, by the server's clock.
    pub died_at_ms: i64,
    /// How many times it failed.
    pub attempts: u64,
    /// The message of its last failure (`None` when none is stored).
    pub error: Option<String>,
    /// The payload (`None` when it is gone, e.g. removed meanwhile).
    pub payload: Option<Vec<u8>>,
    /// The job's group ([`AddOptions::group`]), `None` without one.
    pub group: Option<String>,
}

/// One group with jobs waiting in the schedule, as `ECHO.GROUPS` reports it
/// (see [`Queue::groups`] and docs/groups.md). `members` and `due` are the
/// group's share of the schedule's jobs: a job released into pending
/// belongs to no group's count any more.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupInfo {
    /// The group's name; `None` for the jobs added without one (listed
    /// first).
    pub group: Option<String>,
    /// Its jobs waiting in the schedule, due or not.
    pub members: u64,
    /// Those due now (waiting for their group's turn, its limit or a hold).
    pub due: u64,
    /// Its limit per second; `None` when nothing limits the group.
    pub limit_rate: Option<f64>,
    pub limit_burst: Option<u64>,
    /// How many jobs its limit lets leave now; `None` when not limited.
    pub available: Option<u64>,
    /// The first ms (server clock) it may release while it waits out of
    /// the rotation, for its earliest job, its limit or its hold; 0 in it.
    pub waiting_until_ms: i64,
    /// The end of its own hold ([`crate::JobError::RetryAfterGroup`],
    /// `ECHO.HOLD ... GROUP`), 0 for none.
    pub held_until_ms: i64,
}

impl GroupInfo {
    /// One entry of an `ECHO.GROUPS` page: a map (RESP3) or a flat
    /// field/value array (RESP2).
    fn from_entry(entry: Value) -> RedisResult<GroupInfo> {
        let pairs = entry_pairs(entry, "unexpected ECHO.GROUPS reply")?;
        let mut info = GroupInfo {
            group: None,
            members: 0,
            due: 0,
            limit_rate: None,
            limit_burst: None,
            available: None,
            waiting_until_ms: 0,
            held_until_ms: 0,
        };
        for (field, value) in pairs {
            let field: String = redis::from_redis_value(field)?;
            match field.as_str() {
                "group" => {
                    let name: Vec<u8> = redis::from_redis_value(value)?;
                    info.group =
                        (!name.is_empty()).then(|| String::from_utf8_lossy(&name).into_owned());
                }
                "members" => info.members = redis::from_redis_value(value)?,
                "due" => info.due = redis::from_redis_value(value)?,
                "limit-rate" => info.limit_rate = redis::from_redis_value(value)?,
                "limit-burst" => info.limit_burst = redis::from_redis_value(value)?,
                "available" => info.available = redis::from_redis_value(value)?,
                "waiting-until-ms" => info.waiting_until_ms = redis::from_redis_value(value)?,
                "held-until-ms" => info.held_until_ms = redis::from_redis_value(value)?,
                _ => {}
            }
        }
        Ok(info)
    }
}

/// A queue: six keys under the hash tag `{name}`; or, sharded
/// ([`Queue::with_shards`]), one logical queue over N such sub-queues.
#[derive(Clone)]
pub struct Queue {
    pub(crate) backend: Backend,
    pub(crate) conn: QueueConnection,
    pub(crate) name: String,
    pub(crate) keys: Keys,
    /// Set once this `Queue` (or a clone) has made the stream and the
    /// workers' group: see [`Queue::ensure_group`] and [`Queue::add`].
    pub(crate) stream_made: Arc<AtomicBool>,
    /// The shards' tags (`[name]` for a queue of one shard).
    pub(crate) tags: Arc<Vec<String>>,
    /// Each shard as a queue of one shard (whose `name` is its tag); empty
    /// for a queue of one shard, which is its own shard 0.
    pub(crate) views: Arc<Vec<Queue>>,
}

#[derive(Clone, Debug)]
pub(crate) struct Keys {
    pub(crate) schedule: String,
    pub(crate) pending: String,
    pub(crate) dead: String,
    pub(crate) jobs: String,
    pub(crate) attempts: String,
    pub(crate) errors: String,
}

impl Keys {
    fn new(name: &str) -> Keys {
        let key = |suffix: &str| format!("{{{name}}}:{suffix}");
        Keys {
            schedule: key("schedule"),
            pending: key("pending"),
            dead: key("dead"),
            jobs: key("jobs"),
            attempts: key("attempts"),
            errors: key("errors"),
        }
    }
}

/// A refusal that says where the connection leads, not what was sent: the
/// server is a replica now (`READONLY` for a write, `UNBLOCKED` for a read
/// blocked when it turned), a replica cut from its primary (`MASTERDOWN`),
/// or loading its data (`LOADING`). Behind a primary endpoint (a DNS name
/// that moves at a failover) a connection opened before the failover keeps
/// reaching the old primary: the connection is replaced, so the next
/// command goes through the endpoint again, and the command is sent again.
/// A refused write wrote nothing (the server refuses it before it runs: a
/// script at its first write, which comes after its checks, a transaction
/// with `EXECABORT`), and every write of the protocol is safe to resend.
pub(crate) fn stale(e: &RedisError) -> bool {
    e.code().is_some_and(stale_code)
}

fn stale_code(code: &str) -> bool {
    matches!(code, "READONLY" | "UNBLOCKED" | "MASTERDOWN" | "LOADING")
}

/// What a cluster answers while a slot changes hands or its primary is
/// replaced, when the cluster client has given up following it (it follows
/// `MOVED` and `ASK` and waits out `TRYAGAIN` and `CLUSTERDOWN` a number of
/// times itself): a slot being migrated (`ASK`, `TRYAGAIN` for a command
/// whose keys are split between the two nodes), a map of the slots out of
/// date (`MOVED`), no primary for the slot yet (`CLUSTERDOWN`), no
/// connection to the node that serves it (the client's
/// `ClusterConnectionNotFound`), or a script not loaded on the node that now
/// serves the slot (`NOSCRIPT`: a resent script is loaded there first). The
/// server refused the command before it ran, so it wrote nothing. A
/// transaction refused so (a `MULTI` whose queued commands were redirected)
/// aborts whole, and counts the same.
pub(crate) fn cluster_transient(e: &RedisError) -> bool {
    if e.kind() == ErrorKind::ClusterConnectionNotFound || e.code().is_some_and(cluster_code) {
        return true;
    }
    if e.kind() == ErrorKind::Server(ServerErrorKind::ExecAbort) {
        if let Some(errors) = e.clone().into_server_errors() {
            return !errors.is_empty()
                && errors
                    .iter()
                    .all(|(_, e)| cluster_code(e.code()) || stale_code(e.code()));
        }
    }
    false
}

fn cluster_code(code: &str) -> bool {
    matches!(
        code,
        "MOVED" | "ASK" | "TRYAGAIN" | "CLUSTERDOWN" | "NOSCRIPT"
    )
}

pub(crate) fn client_error(desc: &'static str, detail: String) -> RedisError {
    RedisError::from((ErrorKind::Client, desc, detail))
}

/// A record of `ECHO.GROUPS` or `ECHO.REPEATS` as (field, value) pairs: a
/// map under RESP3, a flat array of fields and values under RESP2. `refused`
/// names the reply for the error when it is neither.
pub(crate) fn entry_pairs(entry: Value, refused: &'static str) -> RedisResult<Vec<(Value, Value)>> {
    match entry {
        Value::Map(pairs) => Ok(pairs),
        Value::Array(flat) => {
            let mut flat = flat.into_iter();
            let mut pairs = Vec::new();
            while let (Some(k), Some(v)) = (flat.next(), flat.next()) {
                pairs.push((k, v));
            }
            Ok(pairs)
        }
        other => Err(client_error(refused, format!("{other:?}"))),
    }
}

/// Where a queue's connections lead: one server (or a primary endpoint), or
/// a Valkey Cluster. Kept by the queue to open the workers' reading
/// connections and to reconnect.
#[derive(Clone)]
pub(crate) enum Backend {
    // Both boxed: either client is a few hundred bytes (how many depends on
    // the redis features the workspace turns on), and a Backend is kept
    // (and cloned) by every queue and connection.
    Single(Box<Client>),
    Cluster(Box<ClusterClient>),
}

/// One open connection of either kind.
#[derive(Clone)]
enum Conn {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

/// The queue's connection, for commands of your own
/// (`redis::AsyncCommands` works on it). Clones share one connection.
///
/// On one server: a multiplexed connection that replaces itself when it
/// breaks (the server restarted, the network dropped), or when the server
/// it leads to says it is not the primary any more (see [`stale`]). The
/// command that met the broken connection fails; the next ones go to a new
/// connection.
///
/// On a cluster ([`Queue::on_cluster`]): the redis crate's async cluster
/// connection, which routes each command by its key, follows `MOVED` and
/// `ASK` and reconnects to the nodes itself. The commands the library sends
/// without a key (`TIME`, `ECHO.QUEUES`, `ECHO.DELAY`, `SCRIPT LOAD`) go to
/// the primary serving the queue's slot (the slot of `{name}`) instead of a
/// random node (or, for `SCRIPT LOAD`, every node): so a script is loaded
/// where it is about to run, and the server's clock is the one the queue's
/// scores are written by. Yours go the same way.
#[derive(Clone)]
pub struct QueueConnection {
    shared: Arc<Shared>,
}

struct Shared {
    backend: Backend,
    response_timeout: Duration,
    current: Mutex<Conn>,
    /// When the last reconnection began: at most one a second.
    last_reconnect: tokio::sync::Mutex<Option<Instant>>,
    /// The queue's slot, where keyless commands go on a cluster.
    route: Route,
}

impl QueueConnection {
    /// Opens a connection whose replies may take up to `response_timeout`,
    /// for the queue named `name`.
    pub(crate) async fn open(
        backend: &Backend,
        name: &str,
        response_timeout: Duration,
    ) -> RedisResult<QueueConnection> {
        let conn = connect(backend, response_timeout).await?;
        Ok(QueueConnection::wrap(
            backend.clone(),
            conn,
            name,
            response_timeout,
        ))
    }

    fn wrap(
        backend: Backend,
        conn: Conn,
        name: &str,
        response_timeout: Duration,
    ) -> QueueConnection {
        QueueConnection {
            shared: Arc::new(Shared {
                backend,
                response_timeout,
                current: Mutex::new(conn),
                last_reconnect: tokio::sync::Mutex::new(None),
                route: Route::with_key(Keys::new(name).jobs, SlotAddr::Master),
            }),
        }
    }

    /// The same connection for the queue (or shard) `name`: on a cluster
    /// its keyless commands go to `name`'s slot (a script is loaded where
    /// the shard's keys are); on one server it is this connection.
    pub(crate) fn for_queue(&self, name: &str) -> QueueConnection {
        if !self.is_cluster() {
            return self.clone();
        }
        QueueConnection::wrap(
            self.shared.backend.clone(),
            self.current(),
            name,
            self.shared.response_timeout,
        )
    }

    /// Where this connection's keyless commands go on a cluster.
    pub(crate) fn route(&self) -> Route {
        self.shared.route
    }

    fn current(&self) -> Conn {
        self.shared.current.lock().unwrap().clone()
    }

    /// Whether this connection leads to a cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.shared.backend, Backend::Cluster(_))
    }

    /// `cmd` along `route` on a cluster (the one server: as any command).
    pub(crate) async fn route_on_cluster(
        &self,
        cmd: &Cmd,
        route: RoutingInfo,
    ) -> RedisResult<Value> {
        match self.current() {
            Conn::Cluster(mut conn) => conn.route_command(cmd.clone(), route).await,
            Conn::Single(mut conn) => cmd.query_async(&mut conn).await,
        }
    }

    async fn check(&self, result: Result<&[Value], &RedisError>) {
        // A cluster connection reconnects to each node, and refreshes its
        // map of the slots after MOVED or READONLY, by itself.
        if self.is_cluster() {
            return;
        }
        let broken = match result {
            Err(e) => e.is_io_error() || e.is_connection_dropped() || stale(e),
            // A pipeline that keeps each reply (`ignore_errors`) hands the
            // refusals back as values.
            Ok(values) => values.iter().any(|v| match v {
                Value::ServerError(e) => stale_code(e.code()),
                _ => false,
            }),
        };
        if !broken {
            return;
        }
        let mut last = self.shared.last_reconnect.lock().await;
        if last.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
            return;
        }
        *last = Some(Instant::now());
        match connect(&self.shared.backend, self.shared.response_timeout).await {
            Ok(fresh) => *self.shared.current.lock().unwrap() = fresh,
            Err(e) => eprintln!("echomq-client: reconnecting failed: {e}"),
        }
    }
}

/// The commands the library sends that name no key: on a cluster they go
/// to the queue's primary (see [`QueueConnection`]).
fn keyless(cmd: &Cmd) -> bool {
    let mut args = cmd.args_iter().filter_map(|arg| match arg {
        redis::Arg::Simple(bytes) => Some(bytes),
        _ => None,
    });
    let Some(name) = args.next() else {
        return false;
    };
    let is = |word: &str| name.eq_ignore_ascii_case(word.as_bytes());
    if is("SCRIPT") {
        return args
            .next()
            .is_some_and(|sub| sub.eq_ignore_ascii_case(b"LOAD"));
    }
    is("TIME") || is("ECHO.QUEUES") || is("ECHO.DELAY")
}

impl ConnectionLike for QueueConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let conn = self.current();
        Box::pin(async move {
            let result = match conn {
                Conn::Single(mut conn) => conn.req_packed_command(cmd).await,
                Conn::Cluster(mut conn) if keyless(cmd) => {
                    let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                        self.shared.route,
                    ));
                    conn.route_command(cmd.clone(), route).await
                }
                Conn::Cluster(mut conn) => conn.req_packed_command(cmd).await,
            };
            self.check(result.as_ref().map(std::slice::from_ref)).await;
            result
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let conn = self.current();
        Box::pin(async move {
            // On a cluster a pipeline goes whole to the node of its first
            // command with a key: every pipeline of the library names a key
            // of the queue, so its keyless commands (TIME) ride along.
            let result = match conn {
                Conn::Single(mut conn) => conn.req_packed_commands(pipeline, offset, count).await,
                Conn::Cluster(mut conn) => conn.req_packed_commands(pipeline, offset, count).await,
            };
            self.check(result.as_ref().map(Vec::as_slice)).await;
            result
        })
    }

    fn get_db(&self) -> i64 {
        match self.current() {
            Conn::Single(conn) => conn.get_db(),
            Conn::Cluster(_) => 0,
        }
    }
}

async fn connect(backend: &Backend, response_timeout: Duration) -> RedisResult<Conn> {
    match backend {
        Backend::Single(client) => {
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(Duration::from_secs(10)))
                .set_response_timeout(Some(response_timeout));
            let conn = client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            Ok(Conn::Single(conn))
        }
        Backend::Cluster(client) => {
            // The per-node timeout only: the client's overall timeout (none
            // unless its builder set one) is its owner's choice.
            let config = ClusterConfig::new()
                .set_connection_timeout(Duration::from_secs(10))
                .set_response_timeout(response_timeout);
            let conn = client.get_async_connection_with_config(config).await?;
            Ok(Conn::Cluster(conn))
        }
    }
}

impl Queue {
    /// Connects to the server `client` names; `name` is the queue's name
    /// (its keys are `{name}:schedule`, `{name}:pending` and so on).
    /// Commands share one multiplexed connection; each worker opens one
    /// more for its blocking reads.
    pub async fn new(client: Client, name: impl Into<String>) -> RedisResult<Queue> {
        Queue::open(Backend::Single(Box::new(client)), name).await
    }

    /// As [`Queue::new`] on a Valkey Cluster: `client` is seeded with one or
    /// more of its nodes. Every key of the queue has the hash tag `{name}`,
    /// so all of them live in one slot and every command, transaction and
    /// script of the queue runs on the primary serving it (found again after
    /// a failover or a slot migration). Commands share one cluster
    /// connection; each worker opens one more for its blocking reads. Leave
    /// the client's response timeout unset, or above the worker's longest
    /// blocking read (1 s): the reads' connection sets its own per-node
    /// timeout, but an overall timeout set on the builder applies to it too.
    pub async fn on_cluster(client: ClusterClient, name: impl Into<String>) -> RedisResult<Queue> {
        Queue::open(Backend::Cluster(Box::new(client)), name).await
    }

    async fn open(backend: Backend, name: impl Into<String>) -> RedisResult<Queue> {
        let name = name.into();
        let conn = QueueConnection::open(&backend, &name, RESPONSE_TIMEOUT).await?;
        Ok(Queue::from_conn(backend, conn, name))
    }

    /// As [`Queue::new`] with a connection the caller opened (from
    /// `client`, which also serves to reconnect and for workers' reads).
    pub fn with_connection(
        client: Client,
        conn: MultiplexedConnection,
        name: impl Into<String>,
    ) -> Queue {
        let name = name.into();
        let backend = Backend::Single(Box::new(client));
        let conn =
            QueueConnection::wrap(backend.clone(), Conn::Single(conn), &name, RESPONSE_TIMEOUT);
        Queue::from_conn(backend, conn, name)
    }

    fn from_conn(backend: Backend, conn: QueueConnection, name: String) -> Queue {
        Queue {
            keys: Keys::new(&name),
            backend,
            conn,
            tags: Arc::new(vec![name.clone()]),
            name,
            stream_made: Arc::default(),
            views: Arc::default(),
        }
    }

    /// The queue over the shards of `tags` (shard 0 is the queue's own
    /// tag, so its keys stay `self.keys`).
    pub(crate) fn set_layout(&mut self, tags: Vec<String>) {
        self.views = if tags.len() == 1 {
            Arc::default()
        } else {
            let views = tags
                .iter()
                .enumerate()
                .map(|(i, tag)| Queue {
                    backend: self.backend.clone(),
                    conn: self.conn.for_queue(tag),
                    name: tag.clone(),
                    keys: Keys::new(tag),
                    stream_made: if i == 0 {
                        self.stream_made.clone()
                    } else {
                        Arc::default()
                    },
                    tags: Arc::new(vec![tag.clone()]),
                    views: Arc::default(),
                })
                .collect();
            Arc::new(views)
        };
        self.tags = Arc::new(tags);
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The queue's shared connection, for commands of your own.
    pub fn connection(&self) -> QueueConnection {
        self.conn.clone()
    }

    /// Adds one job and returns its id. With `options.id` set and a job of
    /// that id existing, nothing changes and the id is returned.
    /// On a sharded queue the job goes to its shard ([`Queue::shard_of`]
    /// its id, the one given or the one made).
    pub async fn add(&self, payload: impl AsRef<[u8]>, options: AddOptions) -> RedisResult<String> {
        check_options(&options)?;
        let new_id = new_job_id();
        let shard = self.shard_of(options.id.as_deref().unwrap_or(&new_id));
        self.shard(shard)
            .add_one(payload.as_ref(), options, new_id)
            .await
    }

    /// [`Queue::add`] on one shard; `new_id` is the id when none is given.
    async fn add_one(
        &self,
        payload: &[u8],
        options: AddOptions,
        new_id: String,
    ) -> RedisResult<String> {
        let mut conn = self.conn.clone();
        if options.id.is_some() || conn.is_cluster() {
            // On a cluster a job with a new id is added by the script too:
            // the cluster client sends a command again by itself after a
            // broken connection, and the script finds the first try's
            // payload and adds nothing, where a transaction would add the
            // job's entry twice (and so run it twice).
            let id = options.id.clone().unwrap_or(new_id);
            let value = envelope::wrap(payload, options.group.as_deref());
            let _: i64 = self
                .resent_on_cluster(|| async {
                    let script = Script::new(ADD_WITH_ID);
                    let mut invocation = script.prepare_invoke();
                    invocation
                        .key(&self.keys.jobs)
                        .key(&self.keys.pending)
                        .key(&self.keys.schedule)
                        .arg(&id)
                        .arg(value.as_ref())
                        .arg(options.delay_ms)
                        .arg(GROUP);
                    if let Some(group) = &options.group {
                        invocation.arg(group);
                    }
                    invocation.invoke_async(&mut self.conn.clone()).await
                })
                .await?;
            return Ok(id);
        }
        self.make_stream_once().await?;
        let id = new_id;
        let mut pipe = redis::pipe();
        // The errors inside EXEC's reply as values: which command was
        // refused says which payload to take back.
        pipe.atomic().ignore_errors();
        self.push_add(&mut pipe, &id, payload, &options);
        let replies: Value = pipe.query_async(&mut conn).await?;
        self.take_back_refused(refused_new_ids(&replies, [Some(id.as_str())]))
            .await;
        exec_error(replies)?;
        Ok(id)
    }

    /// Deletes again (`HDEL`) the payloads of jobs with new ids whose
    /// `ECHO.ADD` the server refused inside `EXEC` (a `pending` or
    /// `schedule` of another type, a stream out of IDs): a transaction does
    /// not stop at a refused command, so the `HSET` before it was applied.
    /// The ids are new and the caller never got them, so no other job owns
    /// those payloads. What the `HDEL` meets is not reported: the refusal
    /// is the error the caller gets.
    async fn take_back_refused(&self, refused: Vec<&str>) {
        if refused.is_empty() {
            return;
        }
        let _: RedisResult<i64> = redis::cmd("HDEL")
            .arg(&self.keys.jobs)
            .arg(refused)
            .query_async(&mut self.conn.clone())
            .await;
    }

    /// `op`, and on a cluster `op` again while the cluster answers that the
    /// queue's slot is moving or has no primary yet, or the connection broke
    /// ([`cluster_transient`]), for up to 30 s, pausing 50 ms doubling to a
    /// second. Only for what is safe to send twice (the scripts, which check
    /// before they write). On one server `op` runs once: what it returns is
    /// the caller's to judge, as ever.
    pub(crate) async fn resent_on_cluster<T, F, Fut>(&self, mut op: F) -> RedisResult<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = RedisResult<T>>,
    {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut pause = Duration::from_millis(50);
        loop {
            match op().await {
                Err(e)
                    if self.conn.is_cluster()
                        && (cluster_transient(&e)
                            || e.is_io_error()
                            || e.is_connection_dropped()
                            || e.is_timeout())
                        && Instant::now() + pause < deadline =>
                {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                result => return result,
            }
        }
    }

    /// [`Queue::ensure_group`] once per `Queue` (and its clones), before
    /// the first add with a new id: that add's `ECHO.ADD` would make a
    /// missing pending a list. (The add script makes the stream itself.)
    pub(crate) async fn make_stream_once(&self) -> RedisResult<()> {
        if !self.stream_made.load(Ordering::Relaxed) {
            self.ensure_group().await?;
        }
        Ok(())
    }

    /// `HSET` and `ECHO.ADD` of a job with a new id: the server decides
    /// whether its run goes straight into pending or into the schedule, so
    /// the queue's release limit and hold govern first runs too (a grouped
    /// job always goes through its group's part of the schedule).
    fn push_add(&self, pipe: &mut redis::Pipeline, id: &str, payload: &[u8], options: &AddOptions) {
        let value = envelope::wrap(payload, options.group.as_deref());
        pipe.cmd("HSET")
            .arg(&self.keys.jobs)
            .arg(id)
            .arg(value.as_ref());
        let add = pipe
            .cmd("ECHO.ADD")
            .arg(&self.keys.schedule)
            .arg(&self.keys.pending)
            .arg(id)
            .arg("DELAY")
            .arg(options.delay_ms);
        if let Some(group) = &options.group {
            add.arg("GROUP").arg(group);
        }
    }

    /// `EVALSHA` of the add script (loaded before it in the same pipeline or
    /// transaction) for one job, its reply ignored: the script adds nothing
    /// for an id the queue has, so a resent pipeline adds no job twice.
    fn push_add_with_id(
        &self,
        pipe: &mut redis::Pipeline,
        script: &Script,
        id: &str,
        payload: &[u8],
        options: &AddOptions,
    ) {
        let value = envelope::wrap(payload, options.group.as_deref());
        let call = pipe
            .cmd("EVALSHA")
            .arg(script.get_hash())
            .arg(3)
            .arg(&self.keys.jobs)
            .arg(&self.keys.pending)
            .arg(&self.keys.schedule)
            .arg(id)
            .arg(value.as_ref())
            .arg(options.delay_ms)
            .arg(GROUP);
        if let Some(group) = &options.group {
            call.arg(group);
        }
        call.ignore();
    }

    /// Adds jobs with generated ids, run as soon as possible; returns the ids
    /// in order. Pipelined, in transactions of up to 1,000 jobs.
    pub async fn add_many<P: AsRef<[u8]>>(
        &self,
        payloads: impl IntoIterator<Item = P>,
    ) -> RedisResult<Vec<String>> {
        self.add_many_with(payloads.into_iter().map(|p| (p, AddOptions::default())))
            .await
    }

    /// As [`Queue::add_many`], each job with its own [`AddOptions`] (a given
    /// id makes that job's add idempotent, as in [`Queue::add`]). On a
    /// sharded queue each job goes to its shard: the jobs are grouped by
    /// shard, in transactions of up to 1,000 jobs of one shard.
    pub async fn add_many_with<P: AsRef<[u8]>>(
        &self,
        jobs: impl IntoIterator<Item = (P, AddOptions)>,
    ) -> RedisResult<Vec<String>> {
        let jobs: Vec<(P, AddOptions)> = jobs.into_iter().collect();
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        // Checked before anything is sent: a bad job sends none of them.
        for (_, options) in &jobs {
            check_options(options)?;
        }
        let ids: Vec<String> = jobs
            .iter()
            .map(|(_, o)| o.id.clone().unwrap_or_else(new_job_id))
            .collect();
        let mut by_shard: Vec<Vec<usize>> = vec![Vec::new(); self.tags.len()];
        for (i, id) in ids.iter().enumerate() {
            by_shard[self.shard_of(id)].push(i);
        }
        for (shard, indices) in by_shard.into_iter().enumerate() {
            if indices.is_empty() {
                continue;
            }
            let part: Vec<(&[u8], &AddOptions)> = indices
                .iter()
                .map(|&i| (jobs[i].0.as_ref(), &jobs[i].1))
                .collect();
            let part_ids: Vec<String> = indices.iter().map(|&i| ids[i].clone()).collect();
            self.shard(shard)
                .add_many_of_shard(&part, &part_ids)
                .await?;
        }
        Ok(ids)
    }

    /// [`Queue::add_many_with`] on one shard, the ids chosen (a job with
    /// `id: None` has a new one).
    async fn add_many_of_shard(
        &self,
        jobs: &[(&[u8], &AddOptions)],
        ids: &[String],
    ) -> RedisResult<()> {
        let script = Script::new(ADD_WITH_ID);
        if self.conn.is_cluster() {
            return self.add_many_on_cluster(&script, jobs, ids).await;
        }
        if jobs.iter().any(|(_, o)| o.id.is_none()) {
            self.make_stream_once().await?;
        }
        let mut pipe = redis::pipe();
        // The errors inside each EXEC's reply as values, as in add.
        pipe.ignore_errors();
        if jobs.iter().any(|(_, o)| o.id.is_some()) {
            // Loaded before the transactions, so EVALSHA inside them finds it.
            pipe.cmd("SCRIPT").arg("LOAD").arg(ADD_WITH_ID).ignore();
        }
        for (chunk, chunk_ids) in jobs.chunks(ADD_BATCH).zip(ids.chunks(ADD_BATCH)) {
            pipe.cmd("MULTI").ignore();
            for ((payload, options), id) in chunk.iter().zip(chunk_ids) {
                if options.id.is_some() {
                    self.push_add_with_id(&mut pipe, &script, id, payload, options);
                } else {
                    self.push_add(&mut pipe, id, payload, options);
                }
            }
            pipe.cmd("EXEC");
        }
        // Replies, per transaction: QUEUED (or the refusal) for each HSET
        // and ECHO.ADD (the EVALSHAs' are ignored), then EXEC's array.
        let mut conn = self.conn.clone();
        let replies: Vec<Value> = pipe.query_async(&mut conn).await?;
        let mut refused = Vec::new();
        let mut at = 0;
        for (chunk, chunk_ids) in jobs.chunks(ADD_BATCH).zip(ids.chunks(ADD_BATCH)) {
            let layout: Vec<Option<&str>> = chunk
                .iter()
                .zip(chunk_ids)
                .map(|((_, options), id)| options.id.is_none().then_some(id.as_str()))
                .collect();
            at += 2 * layout.iter().flatten().count();
            if let Some(exec) = replies.get(at) {
                refused.extend(refused_new_ids(exec, layout));
            }
            at += 1;
        }
        self.take_back_refused(refused).await;
        for reply in replies {
            exec_error(reply)?;
        }
        Ok(())
    }

    /// [`Queue::add_many_with`] on a cluster: a pipeline per 1,000 jobs,
    /// each one transaction of the add script per job (a new id too, as in
    /// [`Queue::add`]), with the script loaded inside it. The cluster client
    /// sends a pipeline again whole when a reply in it redirects: with one
    /// transaction per pipeline that resends only what did not run (a
    /// transaction redirected is aborted whole), and the scripts make a
    /// resend after a lost reply add nothing twice. The `SCRIPT LOAD` inside
    /// the `MULTI` goes wherever the transaction goes, so `EVALSHA` finds it
    /// on a primary that has just taken over, and the `MULTI` keeps an
    /// `ASKING` in force for the whole transaction while the slot migrates.
    async fn add_many_on_cluster(
        &self,
        script: &Script,
        jobs: &[(&[u8], &AddOptions)],
        ids: &[String],
    ) -> RedisResult<()> {
        for (chunk, chunk_ids) in jobs.chunks(ADD_BATCH).zip(ids.chunks(ADD_BATCH)) {
            let mut pipe = redis::pipe();
            pipe.cmd("MULTI").ignore();
            pipe.cmd("SCRIPT").arg("LOAD").arg(ADD_WITH_ID).ignore();
            for ((payload, options), id) in chunk.iter().zip(chunk_ids) {
                self.push_add_with_id(&mut pipe, script, id, payload, options);
            }
            pipe.cmd("EXEC");
            let replies: Vec<Value> = self
                .resent_on_cluster(|| async { pipe.query_async(&mut self.conn.clone()).await })
                .await?;
            for reply in replies {
                exec_error(reply)?;
            }
        }
        Ok(())
    }

    /// How many jobs are scheduled, due, pending, in flight and dead;
    /// scheduled and due count every group's jobs too ([`Queue::groups`]
    /// has them per group), read after the counts' pipeline.
    /// On a sharded queue, every shard's figures summed
    /// ([`Queue::counts_per_shard`] has each shard's).
    pub async fn counts(&self) -> RedisResult<Counts> {
        if self.sharded() {
            return self.counts_sharded().await;
        }
        self.counts_one().await
    }

    pub(crate) async fn counts_one(&self) -> RedisResult<Counts> {
        let mut conn = self.conn.clone();
        let now = server_time_ms(&mut conn).await?;
        let k = &self.keys;
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        pipe.cmd("ZCARD").arg(&k.schedule);
        pipe.cmd("ZCOUNT").arg(&k.schedule).arg("-inf").arg(now);
        pipe.cmd("XLEN").arg(&k.pending);
        pipe.cmd("XPENDING").arg(&k.pending).arg(GROUP);
        pipe.cmd("ZCARD").arg(&k.dead);
        let replies: Vec<RedisResult<Value>> = pipe.query_async(&mut conn).await?;
        let mut nums = [0u64; 5];
        for (i, reply) in replies.into_iter().enumerate().take(5) {
            nums[i] = match reply {
                Ok(Value::Int(n)) => n.max(0) as u64,
                // The summary form of XPENDING: [count, first, last, consumers].
                Ok(Value::Array(items)) => match items.first() {
                    Some(Value::Int(n)) => (*n).max(0) as u64,
                    _ => 0,
                },
                Ok(_) => 0,
                // XPENDING before any worker made the group: nothing in flight.
                Err(e) if e.code() == Some("NOGROUP") => 0,
                Err(e) => return Err(e),
            };
        }
        let [mut total, mut due, len, in_flight, dead] = nums;
        // The ungrouped jobs (group None) are the schedule's own, counted above.
        for group in self.groups_one(MAX_GROUPS_COUNT).await? {
            if group.group.is_some() {
                total += group.members;
                due += group.due;
            }
        }
        Ok(Counts {
            scheduled: total.saturating_sub(due),
            due,
            pending: len.saturating_sub(in_flight),
            in_flight,
            dead,
        })
    }

    /// Every group with jobs waiting in the schedule, in name order, the
    /// ungrouped jobs first (`group: None`): `ECHO.GROUPS`' pages of 1,000
    /// groups, one call each, from the first cursor to the end. A group that
    /// has jobs from the first page to the last is listed exactly once; one
    /// added or emptied meanwhile at most once.
    pub async fn groups(&self) -> RedisResult<Vec<GroupInfo>> {
        self.groups_in_pages_of(MAX_GROUPS_COUNT).await
    }

    /// [`Queue::groups`] with pages of `page_size` (1..=1000) groups.
    pub async fn groups_in_pages_of(&self, page_size: u64) -> RedisResult<Vec<GroupInfo>> {
        if !(1..=MAX_GROUPS_COUNT).contains(&page_size) {
            return Err(client_error(
                "invalid page size",
                format!("page_size must be in 1..={MAX_GROUPS_COUNT}, got {page_size}"),
            ));
        }
        if self.sharded() {
            return self.groups_sharded(page_size).await;
        }
        self.groups_one(page_size).await
    }

    pub(crate) async fn groups_one(&self, page_size: u64) -> RedisResult<Vec<GroupInfo>> {
        let mut out = Vec::new();
        let mut cursor = String::from("0");
        loop {
            let mut page = redis::cmd("ECHO.GROUPS");
            page.arg(&self.keys.schedule)
                .arg("CURSOR")
                .arg(&cursor)
                .arg("COUNT")
                .arg(page_size);
            let (next, entries): (String, Vec<Value>) = self
                .resent_on_cluster(|| async { page.query_async(&mut self.conn.clone()).await })
                .await?;
            for entry in entries {
                out.push(GroupInfo::from_entry(entry)?);
            }
            if next == "0" {
                return Ok(out);
            }
            cursor = next;
        }
    }

    /// Limits one group to `rate` (`"5/s"`, `"300/m"`, `"2/h"`; n in
    /// 1..=1000000) with bursts of `burst` (1..=1000000), instead of the
    /// limit every group gets from the server's `echomq.group-limits`
    /// (`ECHO.GROUPLIMIT`). It binds from the group's next release, keeps the
    /// group's bucket at its level (no fresh burst), and stays, as
    /// configuration, when the group empties, until
    /// [`Queue::clear_group_limit`]. The queue's own limit still caps the
    /// sum. Arguments the server would refuse are refused here with nothing
    /// sent; the server's own refusal is its error.
    pub async fn set_group_limit(&self, group: &str, rate: &str, burst: u64) -> RedisResult<()> {
        envelope::check_job_group(group)?;
        check_group_limit(rate, burst)?;
        if self.sharded() {
            return self.group_limit_sharded(group, rate, burst).await;
        }
        self.group_limit(group, &[rate, &burst.to_string()]).await
    }

    /// Removes [`Queue::set_group_limit`]'s limit of one group: the
    /// configured one applies again (none when `echomq.group-limits` does
    /// not list the queue). Nothing to remove is no error.
    pub async fn clear_group_limit(&self, group: &str) -> RedisResult<()> {
        envelope::check_job_group(group)?;
        for shard in self.each_shard() {
            shard.group_limit(group, &["DEFAULT"]).await?;
        }
        Ok(())
    }

    /// `ECHO.GROUPLIMIT schedule group words...`: sending it twice sets the
    /// same, so it is sent again on a cluster as the scripts are.
    pub(crate) async fn group_limit(&self, group: &str, words: &[&str]) -> RedisResult<()> {
        let mut command = redis::cmd("ECHO.GROUPLIMIT");
        command.arg(&self.keys.schedule).arg(group).arg(words);
        self.resent_on_cluster(|| async { command.query_async(&mut self.conn.clone()).await })
            .await
    }

    /// Dead jobs, oldest death first, from position `offset`, at most `count`.
    /// On a sharded queue, the shards' dead jobs in one order.
    pub async fn dead(&self, offset: u64, count: u64) -> RedisResult<Vec<DeadJob>> {
        if count == 0 {
            return Ok(Vec::new());
        }
        if self.sharded() {
            return self.dead_sharded(offset, count).await;
        }
        self.dead_one(offset, count).await
    }

    pub(crate) async fn dead_one(&self, offset: u64, count: u64) -> RedisResult<Vec<DeadJob>> {
        if count == 0 {
            return Ok(Vec::new());
        }
        let mut conn = self.conn.clone();
        let k = &self.keys;
        let ranked: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg(&k.dead)
            .arg(offset)
            .arg(offset + count - 1)
            .arg("WITHSCORES")
            .query_async(&mut conn)
            .await?;
        if ranked.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for (id, _) in &ranked {
            pipe.cmd("HGET").arg(&k.attempts).arg(id);
            pipe.cmd("HGET").arg(&k.errors).arg(id);
            pipe.cmd("HGET").arg(&k.jobs).arg(id);
        }
        type Fields = (Option<u64>, Option<Vec<u8>>, Option<Vec<u8>>);
        let flat: Vec<Value> = pipe.query_async(&mut conn).await?;
        let mut out = Vec::with_capacity(ranked.len());
        for ((id, score), fields) in ranked.into_iter().zip(flat.chunks(3)) {
            let (attempts, error, value): Fields =
                redis::from_redis_value(Value::Array(fields.to_vec()))?;
            let (payload, group) = match value.map(envelope::unwrap) {
                Some((payload, group)) => (Some(payload), group),
                None => (None, None),
            };
            out.push(DeadJob {
                id,
                died_at_ms: score as i64,
                attempts: attempts.unwrap_or(0),
                error: error.map(|e| String::from_utf8_lossy(&e).into_owned()),
                payload,
                group: group.map(|g| String::from_utf8_lossy(&g).into_owned()),
            });
        }
        Ok(out)
    }

    /// Moves a dead job back with its attempts reset, through the release as
    /// an add goes (into its group for a grouped job). Returns whether it
    /// was dead. A refused requeue (a `pending` key of another
    /// type, a stream out of IDs) is an error, and the job stays dead with
    /// its attempts and error.
    ///
    /// On a sharded queue the job is looked for in its shard, then in the
    /// others (where a smaller layout put it).
    pub async fn requeue(&self, id: &str) -> RedisResult<bool> {
        for shard in self.shards_for(id) {
            if shard.requeue_one(id).await? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    async fn requeue_one(&self, id: &str) -> RedisResult<bool> {
        let mut conn = self.conn.clone();
        let k = &self.keys;
        let moved: i64 = Script::new(REQUEUE)
            .key(&k.dead)
            .key(&k.attempts)
            .key(&k.errors)
            .key(&k.pending)
            .key(&k.schedule)
            .key(&k.jobs)
            .arg(id)
            .arg(envelope::head())
            .arg(GROUP)
            .invoke_async(&mut conn)
            .await?;
        Ok(moved == 1)
    }

    /// Deletes a job wherever it waits (schedule, dead) with its payload.
    /// Returns whether it existed. An entry already in the stream stays: the
    /// worker that takes it finds no payload and drops it. A run in flight
    /// writes no trace of it: its failure drops the entry without an
    /// attempt, an error or a retry.
    ///
    /// On a sharded queue the job is looked for in its shard, then in the
    /// others.
    pub async fn remove(&self, id: &str) -> RedisResult<bool> {
        for shard in self.shards_for(id) {
            if shard.remove_one(id).await? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    async fn remove_one(&self, id: &str) -> RedisResult<bool> {
        let mut conn = self.conn.clone();
        let k = &self.keys;
        // MULTI and EXEC as commands of a plain pipeline, the same on the
        // wire as an atomic one: on a cluster the client then sees a
        // redirection of a queued command among the replies and sends the
        // whole again where it points (the transaction was aborted, so
        // nothing ran), where an atomic pipeline hands the redirection back
        // as an aborted transaction, not followed.
        let mut pipe = redis::pipe();
        pipe.cmd("MULTI").ignore();
        for (key, cmd) in [
            (&k.schedule, "ZREM"),
            (&k.dead, "ZREM"),
            (&k.jobs, "HDEL"),
            (&k.attempts, "HDEL"),
            (&k.errors, "HDEL"),
        ] {
            pipe.cmd(cmd).arg(key).arg(id).ignore();
        }
        pipe.cmd("EXEC");
        let replies: Vec<Value> = pipe.query_async(&mut conn).await?;
        let exec = replies.into_iter().next().unwrap_or(Value::Nil);
        exec_error(exec.clone())?;
        let (_, _, existed, _, _): (i64, i64, i64, i64, i64) = redis::from_redis_value(exec)?;
        Ok(existed == 1)
    }

    /// Deletes the dead jobs that died at least `older_than_ms` ago by the
    /// server's clock (0: all of them). Returns how many.
    /// On a sharded queue, summed over the shards.
    pub async fn purge_dead(&self, older_than_ms: u64) -> RedisResult<u64> {
        let mut removed = 0;
        for shard in self.each_shard() {
            removed += shard.purge_dead_one(older_than_ms).await?;
        }
        Ok(removed)
    }

    async fn purge_dead_one(&self, older_than_ms: u64) -> RedisResult<u64> {
        let mut conn = self.conn.clone();
        let k = &self.keys;
        Script::new(PURGE_DEAD)
            .key(&k.dead)
            .key(&k.jobs)
            .key(&k.attempts)
            .key(&k.errors)
            .arg(older_than_ms)
            .invoke_async(&mut conn)
            .await
    }
}

/// The new ids (`Some` in `jobs`, an `HSET` and an `ECHO.ADD` each) whose
/// `ECHO.ADD` is an error in `exec`, the `EXEC` reply of one transaction of
/// adds made in the order of `jobs` (`None`: a given id, one `EVALSHA`).
/// Nothing when `exec` is not an array: the transaction did not run.
fn refused_new_ids<'a>(
    exec: &Value,
    jobs: impl IntoIterator<Item = Option<&'a str>>,
) -> Vec<&'a str> {
    let Value::Array(replies) = exec else {
        return Vec::new();
    };
    let mut at = 0;
    let mut refused = Vec::new();
    for job in jobs {
        match job {
            Some(id) => {
                if let Some(Value::ServerError(_)) = replies.get(at + 1) {
                    refused.push(id);
                }
                at += 2;
            }
            None => at += 1,
        }
    }
    refused
}

/// The first error inside an `EXEC` reply (the commands of a transaction
/// fail one by one, and the crate hands their errors back as values).
fn exec_error(reply: Value) -> RedisResult<()> {
    match reply {
        Value::ServerError(e) => Err(e.into()),
        Value::Array(items) => items.into_iter().try_for_each(exec_error),
        _ => Ok(()),
    }
}

/// An add's options checked before anything is sent: a bad one sends none.
fn check_options(options: &AddOptions) -> RedisResult<()> {
    check_delay(options.delay_ms)?;
    if let Some(id) = &options.id {
        check_id(id)?;
    }
    if let Some(group) = &options.group {
        envelope::check_job_group(group)?;
    }
    Ok(())
}

/// A group's limit checked as `ECHO.GROUPLIMIT` checks it: `rate` `<n>/s`,
/// `<n>/m` or `<n>/h` with n in 1..=1000000 (digits only, no leading zero,
/// the unit in any case, a fixed rate), `burst` in 1..=1000000.
fn check_group_limit(rate: &str, burst: u64) -> RedisResult<()> {
    let n = rate
        .strip_suffix(['s', 'm', 'h', 'S', 'M', 'H'])
        .and_then(|rest| rest.strip_suffix('/'))
        .filter(|n| !n.starts_with('0') && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|n| n.parse::<u64>().ok())
        .filter(|n| *n <= MAX_GROUP_RATE);
    if n.is_none() {
        return Err(client_error(
            "invalid group rate",
            format!("a group's rate is <n>/s, <n>/m or <n>/h with n in 1..={MAX_GROUP_RATE}, not {rate:?}"),
        ));
    }
    if !(1..=MAX_GROUP_BURST).contains(&burst) {
        return Err(client_error(
            "invalid group burst",
            format!("a group's burst must be in 1..={MAX_GROUP_BURST}, got {burst}"),
        ));
    }
    Ok(())
}

fn check_delay(delay_ms: u64) -> RedisResult<()> {
    if delay_ms > MAX_DELAY_MS {
        return Err(client_error(
            "invalid delay",
            format!("delay_ms must be in 0..={MAX_DELAY_MS}, got {delay_ms}"),
        ));
    }
    Ok(())
}

fn check_id(id: &str) -> RedisResult<()> {
    if id.is_empty() {
        return Err(client_error(
            "invalid job id",
            "a job id may not be empty".into(),
        ));
    }
    Ok(())
}

/// The server's clock, Unix ms.
pub(crate) async fn server_time_ms(conn: &mut QueueConnection) -> RedisResult<i64> {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(conn).await?;
    Ok(secs * 1000 + micros / 1000)
}

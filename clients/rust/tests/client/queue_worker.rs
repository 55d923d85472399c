//! The shared scenarios 1-5 of the client libraries, in one process against a
//! real server: payloads, delays, concurrency, retries and the dead set,
//! and the hold a `RetryAfter` puts on a queue.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{eventually, queue_name, server_ms_async, start_worker, stop, Options, Server, LONG};
use echomq_client::{
    AddOptions, Counts, Job, JobError, Queue, QueueConnection, Worker, WorkerOptions,
};
use redis::AsyncCommands;

#[derive(Clone, Debug)]
struct Run {
    id: String,
    payload: Vec<u8>,
    attempt: u64,
    /// The server's TIME when the handler started, ms.
    started_ms: i64,
}

type Runs = Arc<Mutex<Vec<Run>>>;

async fn xlen(conn: &mut QueueConnection, key: String) -> u64 {
    redis::cmd("XLEN").arg(key).query_async(conn).await.unwrap()
}

/// A handler that records each run, then answers with `outcome(run)`.
fn recording<F>(
    conn: QueueConnection,
    runs: Runs,
    outcome: F,
) -> impl Fn(Job) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), JobError>> + Send>>
       + Send
       + Sync
       + 'static
where
    F: Fn(&Run) -> Result<(), JobError> + Send + Sync + 'static,
{
    let outcome = Arc::new(outcome);
    move |job: Job| {
        let (mut conn, runs, outcome) = (conn.clone(), runs.clone(), outcome.clone());
        Box::pin(async move {
            let run = Run {
                started_ms: server_ms_async(&mut conn).await,
                id: job.id,
                payload: job.payload,
                attempt: job.attempt,
            };
            runs.lock().unwrap().push(run.clone());
            outcome(&run)
        })
    }
}

fn options(concurrency: usize, backoff: &str, max_attempts: u64) -> WorkerOptions {
    WorkerOptions {
        concurrency,
        backoff: backoff.into(),
        max_attempts,
        ..WorkerOptions::default()
    }
}

async fn counts_are(queue: &Queue, want: Counts) -> bool {
    queue.counts().await.unwrap() == want
}

/// No trace of `id` in the queue's three hashes.
async fn no_traces(conn: &mut QueueConnection, name: &str, id: &str) {
    for hash in ["jobs", "attempts", "errors"] {
        let exists: bool = conn
            .hexists(format!("{{{name}}}:{hash}"), id)
            .await
            .unwrap();
        assert!(!exists, "{id} is still in {{{name}}}:{hash}");
    }
}

// 1. Payloads round-trip byte for byte; equal payloads are two jobs; a given
// id makes a second add a no-op; a removed job's entry is dropped unrun.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payloads_round_trip_and_ids() {
    let server = Server::start();
    let name = queue_name("payloads");
    let queue = Queue::new(server.client(), &name).await.unwrap();
    let mut conn = queue.connection();

    let binary: Vec<u8> = (0..=255u8).collect();
    let big: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let mut expected = vec![
        (
            queue.add(&binary, AddOptions::default()).await.unwrap(),
            binary.clone(),
        ),
        (
            queue.add(b"", AddOptions::default()).await.unwrap(),
            Vec::new(),
        ),
        (
            queue.add(&big, AddOptions::default()).await.unwrap(),
            big.clone(),
        ),
    ];
    let twins = queue.add_many([b"twin", b"twin"]).await.unwrap();
    assert_eq!(twins.len(), 2);
    assert_ne!(twins[0], twins[1], "two equal payloads are two jobs");
    for id in twins {
        expected.push((id, b"twin".to_vec()));
    }
    for (id, _) in &expected {
        let (ms, hex) = id.split_once('-').expect("a generated id is <ms>-<hex>");
        assert!(
            ms.len() == 13 && ms.bytes().all(|b| b.is_ascii_digit()),
            "{id}"
        );
        assert!(
            hex.len() == 16
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
            "{id}"
        );
    }
    let given = AddOptions {
        id: Some("order-1".into()),
        delay_ms: 0,
        group: None,
    };
    assert_eq!(queue.add(b"first", given.clone()).await.unwrap(), "order-1");
    assert_eq!(
        queue.add(b"second", given.clone()).await.unwrap(),
        "order-1"
    );
    expected.push(("order-1".into(), b"first".to_vec()));
    // A job removed while its entry waits in the stream: never run.
    let removed = queue.add(b"removed", AddOptions::default()).await.unwrap();
    assert!(queue.remove(&removed).await.unwrap());
    assert!(!queue.remove(&removed).await.unwrap());
    let len: u64 = xlen(&mut conn, format!("{{{name}}}:pending")).await;
    assert_eq!(
        len,
        expected.len() as u64 + 1,
        "the second add with a given id added nothing"
    );

    let runs: Runs = Default::default();
    let worker = Worker::new(
        queue.clone(),
        recording(queue.connection(), runs.clone(), |_| Ok(())),
        options(4, "fixed:100", 3),
    );
    let (handle, task) = start_worker(worker);
    eventually("every job done", LONG, || {
        counts_are(&queue, Counts::default())
    })
    .await;
    stop(handle, task).await;

    let runs = runs.lock().unwrap().clone();
    assert_eq!(
        runs.len(),
        expected.len(),
        "each job ran once: {:?}",
        runs.iter().map(|r| &r.id).collect::<Vec<_>>()
    );
    for (id, payload) in &expected {
        let run = runs
            .iter()
            .find(|r| &r.id == id)
            .unwrap_or_else(|| panic!("{id} did not run"));
        assert_eq!(&run.payload, payload, "the payload of {id}");
        assert_eq!(run.attempt, 1);
        no_traces(&mut conn, &name, id).await;
    }
    assert!(!runs.iter().any(|r| r.id == removed));
    let len: u64 = xlen(&mut conn, format!("{{{name}}}:pending")).await;
    assert_eq!(len, 0, "acknowledged entries are deleted");
}

// 2. delay_ms is kept by the server's clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_is_kept_by_the_server_clock() {
    let server = Server::start();
    let queue = Queue::new(server.client(), queue_name("delay"))
        .await
        .unwrap();
    delayed_jobs_wait_their_time(&queue, 1, 700).await;
}

/// Adds `n` jobs delayed by `delay_ms` while a worker runs: none starts
/// before the server's time at the add plus the delay, and all are done.
async fn delayed_jobs_wait_their_time(queue: &Queue, n: usize, delay_ms: u64) {
    let mut conn = queue.connection();
    let runs: Runs = Default::default();
    let worker = Worker::new(
        queue.clone(),
        recording(queue.connection(), runs.clone(), |_| Ok(())),
        options(2, "fixed:100", 3),
    );
    let (handle, task) = start_worker(worker);
    let before = server_ms_async(&mut conn).await;
    let ids = queue
        .add_many_with((0..n).map(|i| {
            (
                format!("later-{i}"),
                AddOptions {
                    id: None,
                    delay_ms,
                    group: None,
                },
            )
        }))
        .await
        .unwrap();
    let counts = queue.counts().await.unwrap();
    assert_eq!(counts.scheduled + counts.due, n as u64, "{counts:?}");
    eventually("the delayed jobs ran", LONG, || async {
        runs.lock().unwrap().len() == n
    })
    .await;
    eventually("all done", LONG, || counts_are(queue, Counts::default())).await;
    stop(handle, task).await;
    for run in runs.lock().unwrap().iter() {
        assert!(ids.contains(&run.id), "{run:?}");
        assert!(
            run.started_ms >= before + delay_ms as i64,
            "{run:?} started before {before} + {delay_ms} ms"
        );
    }
}

// 3. concurrency=20 runs 20 handlers at once, never 21.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_is_a_ceiling_that_is_reached() {
    let server = Server::start();
    let queue = Queue::new(server.client(), queue_name("concurrency"))
        .await
        .unwrap();
    queue
        .add_many((0..100).map(|i| format!("job-{i}")))
        .await
        .unwrap();
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let handler = {
        let (running, most, done) = (running.clone(), most.clone(), done.clone());
        move |_job: Job| {
            let (running, most, done) = (running.clone(), most.clone(), done.clone());
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(200)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                done.fetch_add(1, Ordering::SeqCst);
                Ok::<(), JobError>(())
            }
        }
    };
    let worker = Worker::new(queue.clone(), handler, options(20, "fixed:100", 3));
    let (handle, task) = start_worker(worker);
    eventually("100 jobs done", LONG, || async {
        done.load(Ordering::SeqCst) == 100
    })
    .await;
    eventually("all acknowledged", LONG, || {
        counts_are(&queue, Counts::default())
    })
    .await;
    stop(handle, task).await;
    assert_eq!(
        most.load(Ordering::SeqCst),
        20,
        "the most handlers running at once"
    );
}

// 4. Retries by the server's policy; the dead set, requeue and purge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_then_success_and_the_dead_set() {
    let server = Server::start();
    let name = queue_name("retries");
    let queue = Queue::new(server.client(), &name).await.unwrap();
    let mut conn = queue.connection();

    // Fails twice, then succeeds.
    let runs: Runs = Default::default();
    let worker = Worker::new(
        queue.clone(),
        recording(queue.connection(), runs.clone(), |run| {
            if run.attempt <= 2 {
                Err(JobError::msg(format!("boom {}", run.attempt)))
            } else {
                Ok(())
            }
        }),
        options(2, "fixed:100", 10),
    );
    let (handle, task) = start_worker(worker);
    let id = queue.add(b"flaky", AddOptions::default()).await.unwrap();
    eventually("three runs", LONG, || async {
        runs.lock().unwrap().len() >= 3
    })
    .await;
    eventually("all done", LONG, || counts_are(&queue, Counts::default())).await;
    stop(handle, task).await;
    let attempts: Vec<u64> = runs.lock().unwrap().iter().map(|r| r.attempt).collect();
    assert_eq!(attempts, [1, 2, 3]);
    no_traces(&mut conn, &name, &id).await;
    for key in ["schedule", "dead", "pending"] {
        let exists: bool = conn.exists(format!("{{{name}}}:{key}")).await.unwrap();
        let empty = if key == "pending" {
            let len: u64 = xlen(&mut conn, format!("{{{name}}}:{key}")).await;
            len == 0
        } else {
            !exists
        };
        assert!(empty, "{{{name}}}:{key} is not empty");
    }

    // Always fails: dead after 3 runs.
    let runs: Runs = Default::default();
    let worker = Worker::new(
        queue.clone(),
        recording(queue.connection(), runs.clone(), |run| {
            Err(JobError::msg(format!("always {}", run.attempt)))
        }),
        options(2, "fixed:50", 3),
    );
    let (handle, task) = start_worker(worker);
    let id = queue
        .add(b"doomed \x00\xff", AddOptions::default())
        .await
        .unwrap();
    let dead_only = Counts {
        dead: 1,
        ..Counts::default()
    };
    eventually("the job is dead", LONG, || counts_are(&queue, dead_only)).await;
    assert_eq!(
        runs.lock()
            .unwrap()
            .iter()
            .map(|r| r.attempt)
            .collect::<Vec<_>>(),
        [1, 2, 3]
    );
    let dead = queue.dead(0, 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].id, id);
    assert_eq!(dead[0].attempts, 3);
    assert_eq!(dead[0].error.as_deref(), Some("always 3"));
    assert_eq!(dead[0].payload.as_deref(), Some(&b"doomed \x00\xff"[..]));
    assert!(dead[0].died_at_ms >= runs.lock().unwrap()[2].started_ms);
    assert!(queue.dead(1, 10).await.unwrap().is_empty());

    // Requeued: runs again from attempt 1 (and dies again).
    assert!(!queue.requeue("no-such-job").await.unwrap());
    assert!(queue.requeue(&id).await.unwrap());
    eventually("three more runs", LONG, || async {
        runs.lock().unwrap().len() >= 6
    })
    .await;
    eventually("dead again", LONG, || counts_are(&queue, dead_only)).await;
    stop(handle, task).await;
    let attempts: Vec<u64> = runs.lock().unwrap().iter().map(|r| r.attempt).collect();
    assert_eq!(attempts, [1, 2, 3, 1, 2, 3]);

    assert_eq!(queue.purge_dead(0).await.unwrap(), 1);
    assert_eq!(queue.counts().await.unwrap(), Counts::default());
    no_traces(&mut conn, &name, &id).await;
    assert!(queue.dead(0, 10).await.unwrap().is_empty());
}

// purge_dead spares the recently dead; remove takes a scheduled job out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_by_age_and_remove_scheduled() {
    let server = Server::start();
    let name = queue_name("purge");
    let queue = Queue::new(server.client(), &name).await.unwrap();
    let mut conn = queue.connection();
    let dead_key = format!("{{{name}}}:dead");
    let now = server_ms_async(&mut conn).await;
    for (id, died) in [("old", now - 60_000), ("new", now)] {
        let _: () = conn.zadd(&dead_key, id, died).await.unwrap();
        let _: () = conn
            .hset(format!("{{{name}}}:jobs"), id, "p")
            .await
            .unwrap();
    }
    assert_eq!(queue.purge_dead(30_000).await.unwrap(), 1);
    let left: Vec<String> = conn.zrange(&dead_key, 0, -1).await.unwrap();
    assert_eq!(left, ["new"]);
    no_traces(&mut conn, &name, "old").await;

    let id = queue
        .add(
            b"x",
            AddOptions {
                id: Some("later".into()),
                delay_ms: 60_000,
                group: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(queue.counts().await.unwrap().scheduled, 1);
    assert!(queue.remove(&id).await.unwrap());
    assert_eq!(queue.counts().await.unwrap().scheduled, 0);
    no_traces(&mut conn, &name, &id).await;
}

// 5. After RetryAfter(500) no job of the queue starts in either worker until
// the hold ends, by the server's clock: neither the jobs waiting in the
// stream nor those falling due in the schedule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_holds_every_worker() {
    let server = Server::start();
    let name = queue_name("hold");
    let queue = Queue::new(server.client(), &name).await.unwrap();
    let schedule = format!("{{{name}}}:schedule");
    // In stream order: the trigger (its worker fails it with RetryAfter),
    // the blocker (keeps the other worker busy until the hold is in
    // force, so both workers' next reads come after it), then the rest.
    let trigger = queue.add(b"trigger", AddOptions::default()).await.unwrap();
    let blocker = queue.add(b"blocker", AddOptions::default()).await.unwrap();
    queue
        .add_many((0..4).map(|i| format!("pending-{i}")))
        .await
        .unwrap();
    for i in 0..3 {
        queue
            .add(
                format!("scheduled-{i}"),
                AddOptions {
                    id: None,
                    delay_ms: 300,
                    group: None,
                },
            )
            .await
            .unwrap();
    }
    let held_until = Arc::new(Mutex::new(0i64));
    let runs: Runs = Default::default();
    let make_handler = || {
        let (conn, runs, held_until) = (queue.connection(), runs.clone(), held_until.clone());
        let (trigger, blocker, schedule) = (trigger.clone(), blocker.clone(), schedule.clone());
        move |job: Job| {
            let (mut conn, runs, held_until) = (conn.clone(), runs.clone(), held_until.clone());
            let (trigger, blocker, schedule) = (trigger.clone(), blocker.clone(), schedule.clone());
            async move {
                let started_ms = server_ms_async(&mut conn).await;
                runs.lock().unwrap().push(Run {
                    id: job.id.clone(),
                    payload: job.payload,
                    attempt: job.attempt,
                    started_ms,
                });
                if job.id == trigger && job.attempt == 1 {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    return Err(JobError::RetryAfter(500));
                }
                if job.id == blocker {
                    for _ in 0..1500 {
                        let limits: Vec<redis::Value> = redis::cmd("ECHO.LIMITS")
                            .arg(&schedule)
                            .query_async(&mut conn)
                            .await?;
                        let until = limits
                            .chunks(2)
                            .find(|p| p[0] == redis::Value::BulkString(b"held-until-ms".to_vec()))
                            .and_then(|p| match p[1] {
                                redis::Value::Int(n) => Some(n),
                                _ => None,
                            })
                            .unwrap_or(0);
                        if until > 0 {
                            *held_until.lock().unwrap() = until;
                            return Ok(());
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    return Err(JobError::msg("no hold came"));
                }
                Ok(())
            }
        }
    };
    let (h1, t1) = start_worker(Worker::new(
        queue.clone(),
        make_handler(),
        options(1, "fixed:100", 5),
    ));
    let (h2, t2) = start_worker(Worker::new(
        queue.clone(),
        make_handler(),
        options(1, "fixed:100", 5),
    ));
    // Nine jobs, the trigger twice.
    eventually("every job ran", LONG, || async {
        runs.lock().unwrap().len() >= 10
    })
    .await;
    eventually("all done", LONG, || counts_are(&queue, Counts::default())).await;
    stop(h1, t1).await;
    stop(h2, t2).await;

    let held_until = *held_until.lock().unwrap();
    assert!(held_until > 0, "the blocker saw the hold");
    let runs = runs.lock().unwrap().clone();
    assert_eq!(runs.len(), 10, "{runs:?}");
    let failed = runs
        .iter()
        .find(|r| r.id == trigger && r.attempt == 1)
        .unwrap();
    assert!(held_until >= failed.started_ms + 500);
    for run in &runs {
        if run.id == blocker || (run.id == trigger && run.attempt == 1) {
            continue;
        }
        assert!(
            run.started_ms >= held_until,
            "{} ({}) started at {} ms, before the hold ended at {held_until} ms",
            String::from_utf8_lossy(&run.payload),
            run.attempt,
            run.started_ms
        );
    }
}

// A server restart: the queue's and the worker's connections replace
// themselves, the worker makes its group again and goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_survives_a_server_restart() {
    let mut server = Server::start();
    let queue = Queue::new(server.client(), queue_name("restart"))
        .await
        .unwrap();
    let runs: Runs = Default::default();
    let worker = Worker::new(
        queue.clone(),
        recording(queue.connection(), runs.clone(), |_| Ok(())),
        options(2, "fixed:100", 3),
    );
    let (handle, task) = start_worker(worker);
    queue.add(b"before", AddOptions::default()).await.unwrap();
    eventually("the first job ran", LONG, || async {
        runs.lock().unwrap().len() == 1
    })
    .await;
    tokio::task::block_in_place(|| server.restart(Options::default()));
    // The first commands after the restart may meet the broken connection.
    eventually("the queue answers again", LONG, || async {
        queue
            .add(
                b"after",
                AddOptions {
                    id: Some("after".into()),
                    delay_ms: 0,
                    group: None,
                },
            )
            .await
            .is_ok()
    })
    .await;
    eventually("the second job ran", LONG, || async {
        runs.lock().unwrap().iter().any(|r| r.id == "after")
    })
    .await;
    stop(handle, task).await;
}

// With the queue listed in echomq.auto-promote the server releases due jobs
// itself (the worker sees it in ECHO.QUEUES and stops promoting): the delay
// still holds by the server's clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_with_promotion_inside_the_server() {
    let name = queue_name("auto");
    let pair = format!("{{{name}}}:schedule {{{name}}}:pending");
    let server = Server::start_with(Options::default().arg("echomq.auto-promote", &pair));
    let queue = Queue::new(server.client(), &name).await.unwrap();
    let mut conn = queue.connection();
    let listed: Vec<(String, String)> = redis::cmd("ECHO.QUEUES")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        listed,
        [(
            format!("{{{name}}}:schedule"),
            format!("{{{name}}}:pending")
        )]
    );
    delayed_jobs_wait_their_time(&queue, 3, 500).await;
}

// A bad backoff policy stops run() at the start with the server's error,
// before any job is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_policy_fails_at_start() {
    let server = Server::start();
    let queue = Queue::new(server.client(), queue_name("policy"))
        .await
        .unwrap();
    queue.add(b"x", AddOptions::default()).await.unwrap();
    let worker = Worker::new(
        queue.clone(),
        |_job: Job| async { Ok(()) },
        options(1, "sometimes:5", 3),
    );
    let error = worker.run().await.expect_err("a bad policy is refused");
    assert!(error.to_string().contains("policy"), "{error}");
    let counts = queue.counts().await.unwrap();
    assert_eq!((counts.pending, counts.in_flight), (1, 0), "{counts:?}");
}

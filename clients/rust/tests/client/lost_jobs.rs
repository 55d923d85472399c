//! Jobs neither lost nor run twice where a worker or a producer meets an
//! error: a refused enqueue or retry, a hold another worker set, an orphan
//! behind many live entries, an acknowledgement on a dropped connection,
//! a job removed and added again while its old entry is dropped. Each
//! against a real server.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{eventually, queue_name, server_ms_async, start_worker, stop, Server, LONG};
use echomq_client::{
    AddOptions, Job, JobError, Queue, QueueConnection, Worker, WorkerOptions, MAX_DELAY_MS,
};
use redis::{AsyncCommands, Value};
use tokio::task::JoinHandle;

/// Waits until the worker has joined the group (its first read is on the
/// wire), so that blocking its shared connection cannot come first.
async fn worker_is_reading(observer: &QueueConnection, name: &str) {
    eventually("the worker to read", LONG, || {
        let (mut observer, name) = (observer.clone(), name.to_string());
        async move {
            let consumers: Value = redis::cmd("XINFO")
                .arg("CONSUMERS")
                .arg(format!("{{{name}}}:pending"))
                .arg("workers")
                .query_async(&mut observer)
                .await
                .unwrap();
            matches!(consumers, Value::Array(c) if !c.is_empty())
        }
    })
    .await;
}

/// Delivered, unacknowledged entries of the queue (XPENDING's summary; 0
/// before the group exists).
async fn in_flight(conn: &mut QueueConnection, name: &str) -> i64 {
    let summary: redis::RedisResult<Value> = redis::cmd("XPENDING")
        .arg(format!("{{{name}}}:pending"))
        .arg("workers")
        .query_async(conn)
        .await;
    let summary = match summary {
        // Before the worker made the group.
        Err(e) if e.code() == Some("NOGROUP") => return 0,
        other => other.unwrap(),
    };
    match summary {
        Value::Array(items) => match items.first() {
            Some(Value::Int(n)) => *n,
            other => panic!("XPENDING summary: {other:?}"),
        },
        other => panic!("XPENDING summary: {other:?}"),
    }
}

/// Entries in the queue's stream (XLEN).
async fn stream_len(conn: &mut QueueConnection, key: String) -> u64 {
    redis::cmd("XLEN").arg(key).query_async(conn).await.unwrap()
}

/// `held-until-ms` of `ECHO.LIMITS` (0 when the field is absent or nil).
async fn held_until(conn: &mut QueueConnection, name: &str) -> i64 {
    let limits: Value = redis::cmd("ECHO.LIMITS")
        .arg(format!("{{{name}}}:schedule"))
        .query_async(conn)
        .await
        .unwrap();
    let Value::Array(items) = limits else {
        panic!("ECHO.LIMITS: {limits:?}")
    };
    for pair in items.chunks(2) {
        if let [Value::BulkString(key), value] = pair {
            if key == b"held-until-ms" {
                return match value {
                    Value::Int(n) => *n,
                    _ => 0,
                };
            }
        }
    }
    0
}

/// A field of `CLIENT LIST ID <id>`.
async fn client_field(conn: &mut QueueConnection, id: i64, field: &str) -> String {
    let line: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("ID")
        .arg(id)
        .query_async(conn)
        .await
        .unwrap();
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{field}=")).map(str::to_string))
        .unwrap_or_else(|| panic!("no {field} in {line}"))
}

/// Blocks the queue's shared connection (the one the worker acknowledges
/// on) with a BLPOP of `key`: every command sent after it waits in the
/// server's query buffer until the test pushes to `key`. Returns the
/// connection's client id once the BLPOP is in force.
async fn block_shared_connection(
    queue: &Queue,
    observer: &mut QueueConnection,
    key: &str,
) -> (i64, JoinHandle<redis::RedisResult<Value>>) {
    let mut shared = queue.connection();
    let id: i64 = redis::cmd("CLIENT")
        .arg("ID")
        .query_async(&mut shared)
        .await
        .unwrap();
    let key = key.to_string();
    let blpop = tokio::spawn(async move {
        redis::cmd("BLPOP")
            .arg(key)
            .arg(25)
            .query_async::<Value>(&mut shared)
            .await
    });
    eventually("the BLPOP to block", LONG, || {
        let mut observer = observer.clone();
        async move { client_field(&mut observer, id, "cmd").await == "blpop" }
    })
    .await;
    (id, blpop)
}

/// Commands waiting behind the BLPOP on the blocked connection.
async fn queued_behind(observer: &mut QueueConnection, id: i64) -> bool {
    client_field(observer, id, "qbuf")
        .await
        .parse::<u64>()
        .unwrap()
        > 0
}

// A given-id add whose enqueue is refused leaves no trace: the delay is
// checked before anything is sent, and a schedule of the wrong type takes
// the payload back, so the id is not left taken by a job that is nowhere.
// A generated-id add meeting the same refusal returns the error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_add_leaves_no_trace() {
    let server = Server::start();
    let name = queue_name("ghost");
    let queue = Queue::new(server.client(), &name).await.unwrap();
    let mut conn = queue.connection();
    let jobs = format!("{{{name}}}:jobs");

    let too_late = AddOptions {
        id: Some("far".into()),
        delay_ms: MAX_DELAY_MS + 1,
        group: None,
    };
    let err = queue.add(b"x", too_late.clone()).await.unwrap_err();
    assert!(err.to_string().contains("0..=10000000000000"), "{err}");
    assert!(!conn.hexists::<_, _, bool>(&jobs, "far").await.unwrap());
    let err = queue.add_many_with([(b"y", too_late)]).await.unwrap_err();
    assert!(err.to_string().contains("0..=10000000000000"), "{err}");
    assert!(!conn.hexists::<_, _, bool>(&jobs, "far").await.unwrap());
    // Nothing of a batch with one bad delay is sent.
    let err = queue
        .add_many_with([
            (
                &b"fine"[..],
                AddOptions {
                    id: Some("first".into()),
                    delay_ms: 0,
                    group: None,
                },
            ),
            (
                &b"late"[..],
                AddOptions {
                    id: None,
                    delay_ms: MAX_DELAY_MS + 1,
                    group: None,
                },
            ),
        ])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("0..=10000000000000"), "{err}");
    // A generated id: no payload is left behind either.
    let err = queue
        .add(
            b"late",
            AddOptions {
                id: None,
                delay_ms: MAX_DELAY_MS + 1,
                group: None,
            },
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("0..=10000000000000"), "{err}");
    let stored: u64 = conn.hlen(&jobs).await.unwrap();
    assert_eq!(stored, 0, "a payload was left behind");
    // The id is free: a valid add of it is a job.
    let at_most = AddOptions {
        id: Some("far".into()),
        delay_ms: MAX_DELAY_MS,
        group: None,
    };
    assert_eq!(queue.add(b"ok", at_most).await.unwrap(), "far");
    let stored: Option<Vec<u8>> = conn.hget(&jobs, "far").await.unwrap();
    assert_eq!(stored.as_deref(), Some(&b"ok"[..]));

    // A schedule of the wrong type refuses the enqueue.
    let name = queue_name("wrongtype");
    let queue = Queue::new(server.client(), &name).await.unwrap();
    let jobs = format!("{{{name}}}:jobs");
    let _: () = conn
        .set(format!("{{{name}}}:schedule"), "not a sorted set")
        .await
        .unwrap();
    let delayed = |id: Option<&str>| AddOptions {
        id: id.map(str::to_string),
        delay_ms: 1000,
        group: None,
    };
    let err = queue.add(b"z", delayed(Some("given"))).await.unwrap_err();
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    assert!(!conn.hexists::<_, _, bool>(&jobs, "given").await.unwrap());
    let err = queue
        .add_many_with([(b"z", delayed(Some("given")))])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    assert!(!conn.hexists::<_, _, bool>(&jobs, "given").await.unwrap());
    let err = queue.add(b"z", delayed(None)).await.unwrap_err();
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    // Once the key is repaired the id is free.
    let _: () = conn.del(format!("{{{name}}}:schedule")).await.unwrap();
    queue.add(b"z", delayed(Some("given"))).await.unwrap();
    let scheduled: u64 = conn.zcard(format!("{{{name}}}:schedule")).await.unwrap();
    assert_eq!(scheduled, 1);
}

// A generated-id add whose ECHO.ADD the server refuses inside EXEC (a
// pending of another type, put there after the queue made its stream): the
// HSET of the same transaction was applied, and the library deletes that
// payload again before it returns the refusal, in add and in each of
// add_many's transactions (a given id among them is the script's, refused
// with nothing written). Once pending is a stream again, adds go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_new_id_add_takes_its_payload_back() {
    let server = Server::start();
    let name = queue_name("orphan");
    let queue = Queue::new(server.client(), &name).await.unwrap();
    let mut conn = queue.connection();
    let (jobs, pending) = (format!("{{{name}}}:jobs"), format!("{{{name}}}:pending"));
    // The first add makes the stream and the group (once per Queue).
    let first = queue.add(b"first", AddOptions::default()).await.unwrap();
    let _: () = conn.del(&pending).await.unwrap();
    let _: () = conn.set(&pending, "not a stream").await.unwrap();

    let err = queue
        .add(b"refused", AddOptions::default())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    // Two transactions (1,000 jobs at most each), both refused.
    let batch = (0..1500).map(|i| {
        let id = (i == 700).then(|| "given".to_string());
        (
            format!("refused-{i}"),
            AddOptions {
                id,
                delay_ms: 0,
                group: None,
            },
        )
    });
    let err = queue.add_many_with(batch).await.unwrap_err();
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    let stored: Vec<String> = conn.hkeys(&jobs).await.unwrap();
    assert_eq!(stored, [first], "the payloads of refused adds are left");

    // The key repaired: the stream and its group again.
    let _: () = conn.del(&pending).await.unwrap();
    queue.ensure_group().await.unwrap();
    let id = queue.add(b"after", AddOptions::default()).await.unwrap();
    let stored: Option<Vec<u8>> = conn.hget(&jobs, &id).await.unwrap();
    assert_eq!(stored.as_deref(), Some(&b"after"[..]));
    assert_eq!(queue.add_many([b"a", b"b"]).await.unwrap().len(), 2);
    let (entries, payloads): (u64, u64) = (
        conn.xlen(&pending).await.unwrap(),
        conn.hlen(&jobs).await.unwrap(),
    );
    assert_eq!((entries, payloads), (3, 4));
}

// A failure whose retry the server refuses (a schedule key of the wrong
// type) writes nothing (ECHO.RETRY is the failure script's first write) and
// leaves the entry delivered and unacknowledged, to be taken over after the
// lease, instead of acknowledging a job that is then in no key.
// The same key makes ECHO.PROMOTE and ECHO.LIMITS fail in every read: the
// entries the read delivered are still run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_retry_keeps_the_entry() {
    let server = Server::start();
    let name = queue_name("refused");
    let queue = Queue::new(server.client(), &name).await.unwrap();
    let mut conn = queue.connection();
    let id = queue.add(b"fails", AddOptions::default()).await.unwrap();
    let _: () = conn
        .set(format!("{{{name}}}:schedule"), "not a sorted set")
        .await
        .unwrap();
    let runs = Arc::new(Mutex::new(0));
    let counter = runs.clone();
    let worker = Worker::new(
        Queue::new(server.client(), &name).await.unwrap(),
        move |_job: Job| {
            *counter.lock().unwrap() += 1;
            async { Err(JobError::msg("it failed")) }
        },
        WorkerOptions {
            lease_ms: 60_000,
            ..WorkerOptions::default()
        },
    );
    let (handle, task) = start_worker(worker);
    eventually("the job to run", LONG, || {
        let runs = runs.clone();
        async move { *runs.lock().unwrap() == 1 }
    })
    .await;
    // close waits for the running handler, whose slot is kept until its
    // failure was sent.
    stop(handle, task).await;
    assert_eq!(*runs.lock().unwrap(), 1);
    assert_eq!(
        in_flight(&mut conn, &name).await,
        1,
        "the entry was dropped"
    );
    let stored: Option<Vec<u8>> = conn.hget(format!("{{{name}}}:jobs"), &id).await.unwrap();
    assert_eq!(stored.as_deref(), Some(&b"fails"[..]));
    for key in ["attempts", "errors"] {
        let written: bool = conn
            .hexists(format!("{{{name}}}:{key}"), &id)
            .await
            .unwrap();
        assert!(!written, "a refused retry wrote {{q}}:{key}");
    }
}

// RetryAfter(0) holds nothing, and so does not lift the hold another worker
// set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_zero_keeps_another_hold() {
    let server = Server::start();
    let name = queue_name("hold0");
    let queue = Queue::new(server.client(), &name).await.unwrap();
    let mut conn = queue.connection();
    let id = queue.add(b"busy", AddOptions::default()).await.unwrap();
    let schedule = format!("{{{name}}}:schedule");
    let handler_conn = queue.connection();
    let worker = Worker::new(
        queue.clone(),
        move |_job: Job| {
            let (mut conn, schedule) = (handler_conn.clone(), schedule.clone());
            async move {
                // Another worker's RetryAfter, while this one runs.
                let _: Value = redis::cmd("ECHO.HOLD")
                    .arg(schedule)
                    .arg(600_000)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                Err(JobError::RetryAfter(0))
            }
        },
        WorkerOptions::default(),
    );
    let (handle, task) = start_worker(worker);
    let attempts = format!("{{{name}}}:attempts");
    eventually("the failure to be written", LONG, || {
        let (mut conn, attempts, id) = (conn.clone(), attempts.clone(), id.clone());
        async move { conn.hexists::<_, _, bool>(attempts, id).await.unwrap() }
    })
    .await;
    let now = server_ms_async(&mut conn).await;
    let until = held_until(&mut conn, &name).await;
    assert!(
        until > now + 500_000,
        "the other hold was lifted: held until {until}, now {now}"
    );
    stop(handle, task).await;
}

// Takeover goes on from XAUTOCLAIM's cursor: an orphan entry behind more
// live entries than one call looks at (10 x COUNT, COUNT = 1 free slot) is
// reached, and the live entries are left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphan_behind_live_entries_is_taken_over() {
    let server = Server::start();
    let name = queue_name("orphan");
    let queue = Queue::new(server.client(), &name).await.unwrap();
    let mut conn = queue.connection();
    let pending = format!("{{{name}}}:pending");
    queue.ensure_group().await.unwrap();
    let ids = queue
        .add_many((0..13).map(|i| format!("job-{i}")))
        .await
        .unwrap();
    let read = |consumer: &'static str, count: usize| {
        let (mut conn, pending) = (conn.clone(), pending.clone());
        async move {
            let reply: Value = redis::cmd("XREADGROUP")
                .arg("GROUP")
                .arg("workers")
                .arg(consumer)
                .arg("COUNT")
                .arg(count)
                .arg("STREAMS")
                .arg(pending)
                .arg(">")
                .query_async(&mut conn)
                .await
                .unwrap();
            // [[stream, [[entry, fields], ...]]]
            let Value::Array(streams) = reply else {
                panic!("{reply:?}")
            };
            let Some(Value::Array(stream)) = streams.into_iter().next() else {
                panic!("no stream")
            };
            let Some(Value::Array(entries)) = stream.into_iter().nth(1) else {
                panic!("no entries")
            };
            entries
                .into_iter()
                .map(|e| match e {
                    Value::Array(parts) => match &parts[0] {
                        Value::BulkString(b) => String::from_utf8(b.clone()).unwrap(),
                        other => panic!("{other:?}"),
                    },
                    other => panic!("{other:?}"),
                })
                .collect::<Vec<String>>()
        }
    };
    // Twelve entries of a live consumer, then the orphan of a dead one.
    let live = read("live", 12).await;
    assert_eq!(live.len(), 12);
    assert_eq!(read("gone", 1).await.len(), 1);
    let renew = {
        let (mut conn, pending) = (conn.clone(), pending.clone());
        tokio::spawn(async move {
            loop {
                let mut claim = redis::cmd("XCLAIM");
                claim.arg(&pending).arg("workers").arg("live").arg(0);
                for entry in &live {
                    claim.arg(entry);
                }
                claim.arg("JUSTID");
                let _: Value = claim.query_async(&mut conn).await.unwrap();
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let runs = Arc::new(Mutex::new(Vec::new()));
    let record = runs.clone();
    let worker = Worker::new(
        queue.clone(),
        move |job: Job| {
            record.lock().unwrap().push(job.id);
            async { Ok(()) }
        },
        WorkerOptions {
            concurrency: 1,
            lease_ms: 2000,
            ..WorkerOptions::default()
        },
    );
    let (handle, task) = start_worker(worker);
    let orphan = ids[12].clone();
    eventually("the orphan to run", Duration::from_secs(60), || {
        let (runs, orphan) = (runs.clone(), orphan.clone());
        async move { runs.lock().unwrap().contains(&orphan) }
    })
    .await;
    stop(handle, task).await;
    renew.abort();
    assert_eq!(*runs.lock().unwrap(), vec![orphan]);
    assert_eq!(in_flight(&mut conn, &name).await, 12);
}

// An entry whose job was removed is acknowledged and deleted without the
// HDELs of a success: a job added again with that id meanwhile keeps its
// payload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_removed_job_keeps_its_successor() {
    let server = Server::start();
    let name = queue_name("readd");
    let queue = Queue::new(server.client(), &name).await.unwrap();
    let observer_queue = Queue::new(server.client(), &name).await.unwrap();
    let mut observer = observer_queue.connection();
    queue.ensure_group().await.unwrap();
    let runs = Arc::new(Mutex::new(0));
    let counter = runs.clone();
    let worker = Worker::new(
        queue.clone(),
        move |_job: Job| {
            *counter.lock().unwrap() += 1;
            async { Ok(()) }
        },
        WorkerOptions::default(),
    );
    let (handle, task) = start_worker(worker);
    // Give the worker time to start before its connection is blocked.
    worker_is_reading(&observer, &name).await;
    let release = format!("{{{name}}}:release");
    let (shared, blpop) = block_shared_connection(&queue, &mut observer, &release).await;
    // The entry of a removed job: it names an id with no payload.
    let _: String = redis::cmd("XADD")
        .arg(format!("{{{name}}}:pending"))
        .arg("*")
        .arg("job")
        .arg("same")
        .query_async(&mut observer)
        .await
        .unwrap();
    eventually("the drop to wait behind the BLPOP", LONG, || {
        let mut observer = observer.clone();
        async move { queued_behind(&mut observer, shared).await }
    })
    .await;
    // Added again, delayed, while the old entry's drop is on its way.
    observer_queue
        .add(
            b"new",
            AddOptions {
                id: Some("same".into()),
                delay_ms: 600_000,
                group: None,
            },
        )
        .await
        .unwrap();
    let _: () = observer.rpush(&release, "go").await.unwrap();
    blpop.await.unwrap().unwrap();
    eventually("the old entry to be dropped", LONG, || {
        let (mut observer, name) = (observer.clone(), name.clone());
        async move { in_flight(&mut observer, &name).await == 0 }
    })
    .await;
    stop(handle, task).await;
    assert_eq!(*runs.lock().unwrap(), 0, "the removed job ran");
    let stored: Option<Vec<u8>> = observer
        .hget(format!("{{{name}}}:jobs"), "same")
        .await
        .unwrap();
    assert_eq!(
        stored.as_deref(),
        Some(&b"new"[..]),
        "the new job lost its payload"
    );
}

// A success whose acknowledgement meets a dropped connection is sent again
// (the entry stays leased meanwhile): the job is acknowledged and its
// traces deleted, not left to run again after the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledgement_on_a_dropped_connection_is_sent_again() {
    let server = Server::start();
    let name = queue_name("resend");
    let queue = Queue::new(server.client(), &name).await.unwrap();
    let observer_queue = Queue::new(server.client(), &name).await.unwrap();
    let mut observer = observer_queue.connection();
    queue.ensure_group().await.unwrap();
    let runs = Arc::new(Mutex::new(0));
    let counter = runs.clone();
    let worker = Worker::new(
        queue.clone(),
        move |_job: Job| {
            *counter.lock().unwrap() += 1;
            async { Ok(()) }
        },
        WorkerOptions {
            lease_ms: 60_000,
            ..WorkerOptions::default()
        },
    );
    let (handle, task) = start_worker(worker);
    worker_is_reading(&observer, &name).await;
    let release = format!("{{{name}}}:release");
    let (shared, blpop) = block_shared_connection(&queue, &mut observer, &release).await;
    let id = observer_queue
        .add(b"work", AddOptions::default())
        .await
        .unwrap();
    eventually("the acknowledgement to wait behind the BLPOP", LONG, || {
        let mut observer = observer.clone();
        async move { queued_behind(&mut observer, shared).await }
    })
    .await;
    // The connection drops with the acknowledgement unanswered.
    let _: Value = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(shared)
        .query_async(&mut observer)
        .await
        .unwrap();
    assert!(blpop.await.unwrap().is_err());
    eventually("the job to be acknowledged", LONG, || {
        let (mut observer, name) = (observer.clone(), name.clone());
        async move { in_flight(&mut observer, &name).await == 0 }
    })
    .await;
    stop(handle, task).await;
    assert_eq!(*runs.lock().unwrap(), 1);
    let exists: bool = observer
        .hexists(format!("{{{name}}}:jobs"), &id)
        .await
        .unwrap();
    assert!(!exists, "the job's payload is still there");
}

// Options that would lose or repeat jobs are refused by run: a zero lease
// (XAUTOCLAIM would take every live entry), zero deliveries (every job
// taken over would fail), no slots, no attempts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_options_are_refused() {
    let server = Server::start();
    let name = queue_name("options");
    let queue = Queue::new(server.client(), &name).await.unwrap();
    let bad = [
        (
            WorkerOptions {
                lease_ms: 2,
                ..WorkerOptions::default()
            },
            "lease_ms",
        ),
        (
            WorkerOptions {
                max_deliveries: 0,
                ..WorkerOptions::default()
            },
            "max_deliveries",
        ),
        (
            WorkerOptions {
                concurrency: 0,
                ..WorkerOptions::default()
            },
            "concurrency",
        ),
        (
            WorkerOptions {
                max_attempts: 0,
                ..WorkerOptions::default()
            },
            "max_attempts",
        ),
    ];
    for (options, field) in bad {
        let worker = Worker::new(queue.clone(), |_job: Job| async { Ok(()) }, options);
        let err = tokio::time::timeout(LONG, worker.run())
            .await
            .expect("run returns at once")
            .unwrap_err();
        assert!(err.to_string().contains(field), "{err}");
    }
    // Nothing was started: no group, no stream.
    let mut conn = queue.connection();
    let exists: bool = conn.exists(format!("{{{name}}}:pending")).await.unwrap();
    assert!(!exists);
    // lease_ms 3 is the least accepted.
    let worker = Worker::new(
        queue.clone(),
        |_job: Job| async { Ok(()) },
        WorkerOptions {
            lease_ms: 3,
            ..WorkerOptions::default()
        },
    );
    let (handle, task) = start_worker(worker);
    stop(handle, task).await;
}

// A worker waiting out a hold asks again at least every second: a hold
// lifted meanwhile (ECHO.HOLD ... 0) is seen, not waited out to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lifted_hold_is_seen() {
    let server = Server::start();
    let name = queue_name("lifted");
    let queue = Queue::new(server.client(), &name).await.unwrap();
    let mut conn = queue.connection();
    let schedule = format!("{{{name}}}:schedule");
    let hold = |ms: u64| {
        let (mut conn, schedule) = (conn.clone(), schedule.clone());
        async move {
            let _: Value = redis::cmd("ECHO.HOLD")
                .arg(schedule)
                .arg(ms)
                .query_async(&mut conn)
                .await
                .unwrap();
        }
    };
    // Added before the hold: into pending (added while held, it would wait
    // in the schedule).
    let id = queue.add(b"held", AddOptions::default()).await.unwrap();
    hold(600_000).await;
    let runs = Arc::new(Mutex::new(Vec::new()));
    let record = runs.clone();
    let worker = Worker::new(
        queue.clone(),
        move |job: Job| {
            record.lock().unwrap().push(job.id);
            async { Ok(()) }
        },
        WorkerOptions::default(),
    );
    let (handle, task) = start_worker(worker);
    // Delivered, and waiting for the hold's end.
    eventually("the entry to be delivered", LONG, || {
        let (mut conn, name) = (conn.clone(), name.clone());
        async move { in_flight(&mut conn, &name).await == 1 }
    })
    .await;
    assert!(runs.lock().unwrap().is_empty(), "it ran while held");
    hold(0).await;
    assert_eq!(held_until(&mut conn, &name).await, 0);
    eventually("the job to run once the hold is lifted", LONG, || {
        let runs = runs.clone();
        async move { !runs.lock().unwrap().is_empty() }
    })
    .await;
    stop(handle, task).await;
    assert_eq!(*runs.lock().unwrap(), vec![id]);
}

// Issue 23, 1: a requeue the stream refuses (a `{q}:pending` of another
// type, or a stream at its last possible ID) returns the error and keeps the
// job in `{q}:dead` with its attempts and error: the script adds to pending
// before it takes anything away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_requeue_keeps_the_job_dead() {
    let server = Server::start();
    let name = queue_name("requeue");
    let queue = Queue::new(server.client(), &name).await.unwrap();
    let mut conn = queue.connection();
    let key = |suffix: &str| format!("{{{name}}}:{suffix}");
    // A dead job as a worker leaves it.
    let _: () = conn.zadd(key("dead"), "gone", 1_000).await.unwrap();
    let _: () = conn.hset(key("jobs"), "gone", "payload").await.unwrap();
    let _: () = conn.hset(key("attempts"), "gone", 3).await.unwrap();
    let _: () = conn.hset(key("errors"), "gone", "boom").await.unwrap();
    let still_dead = |queue: Queue| async move {
        let dead = queue.dead(0, 10).await.unwrap();
        assert_eq!(dead.len(), 1, "the job left the dead set: {dead:?}");
        assert_eq!(dead[0].id, "gone");
        assert_eq!(dead[0].attempts, 3, "its attempts were lost");
        assert_eq!(dead[0].error.as_deref(), Some("boom"), "its error was lost");
        assert_eq!(dead[0].payload.as_deref(), Some(&b"payload"[..]));
    };

    // A pending of another type.
    let _: () = conn.set(key("pending"), "not a stream").await.unwrap();
    let err = queue.requeue("gone").await.unwrap_err();
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    still_dead(queue.clone()).await;

    // A stream out of IDs.
    let _: () = conn.del(key("pending")).await.unwrap();
    let _: String = redis::cmd("XADD")
        .arg(key("pending"))
        .arg("18446744073709551615-18446744073709551615")
        .arg("job")
        .arg("top")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(queue.requeue("gone").await.is_err());
    still_dead(queue.clone()).await;

    // Once pending is repaired the requeue goes through, and a second one
    // finds nothing dead.
    let _: () = conn.del(key("pending")).await.unwrap();
    assert!(queue.requeue("gone").await.unwrap());
    assert!(!queue.requeue("gone").await.unwrap());
    let dead: u64 = conn.zcard(key("dead")).await.unwrap();
    assert_eq!(dead, 0);
    let pending: u64 = stream_len(&mut conn, key("pending")).await;
    assert_eq!(pending, 1);
    let attempts: bool = conn.hexists(key("attempts"), "gone").await.unwrap();
    assert!(!attempts, "the requeued job kept its attempts");
}

/// A TCP proxy to `upstream` that loses one reply: once armed with a
/// marker, the first request holding it is forwarded and the connection
/// dropped before its reply (a NOSCRIPT reply does not count: the retry
/// after SCRIPT LOAD is the one that runs). New connections then wait until
/// `resume`; requests holding the marker answered after that are counted.
struct ReplyDropper {
    port: u16,
    state: Arc<DropperState>,
}

struct DropperState {
    marker: Mutex<Option<Vec<u8>>>,
    armed: std::sync::atomic::AtomicBool,
    dropped: tokio::sync::Notify,
    paused: tokio::sync::watch::Sender<bool>,
    answered: std::sync::atomic::AtomicUsize,
}

fn holds(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

impl ReplyDropper {
    async fn start(upstream: u16) -> ReplyDropper {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(DropperState {
            marker: Mutex::new(None),
            armed: std::sync::atomic::AtomicBool::new(false),
            dropped: tokio::sync::Notify::new(),
            paused: tokio::sync::watch::channel(false).0,
            answered: std::sync::atomic::AtomicUsize::new(0),
        });
        let accepting = state.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let state = accepting.clone();
                tokio::spawn(async move {
                    let _ = state.paused.subscribe().wait_for(|p| !*p).await;
                    if let Ok(server) =
                        tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await
                    {
                        relay(client, server, state).await;
                    }
                });
            }
        });
        ReplyDropper { port, state }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn arm(&self, marker: &[u8]) {
        *self.state.marker.lock().unwrap() = Some(marker.to_vec());
        self.state.armed.store(true, Ordering::SeqCst);
    }

    fn resume(&self) {
        self.state.paused.send_replace(false);
    }

    fn answered(&self) -> usize {
        self.state.answered.load(Ordering::SeqCst)
    }
}

use std::sync::atomic::Ordering;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn relay(
    client: tokio::net::TcpStream,
    server: tokio::net::TcpStream,
    state: Arc<DropperState>,
) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let marked = std::sync::atomic::AtomicBool::new(false);
    let up = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match client_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let marker = state.marker.lock().unwrap().clone();
            if marker.is_some_and(|m| holds(&buf[..n], &m)) {
                marked.store(true, Ordering::SeqCst);
            }
            if server_write.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    let down = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match server_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if marked.swap(false, Ordering::SeqCst) && !holds(&buf[..n], b"NOSCRIPT") {
                if state.armed.swap(false, Ordering::SeqCst) {
                    // The request reached the server; its reply is lost
                    // with the connection, and no new one is let through
                    // until the test resumes.
                    state.paused.send_replace(true);
                    state.dropped.notify_one();
                    return;
                }
                state.answered.fetch_add(1, Ordering::SeqCst);
            }
            if client_write.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
}

// Issue 23, 2: a success batch reaches the server, its reply is lost with
// the connection, the same id is added again (a done job's id is free), and
// the worker resends the batch: the resend finds the entry acknowledged and
// deletes nothing, so the new job keeps its payload and runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_success_keeps_a_job_added_again() {
    let server = Server::start();
    let proxy = ReplyDropper::start(server.port).await;
    let name = queue_name("resent");
    let proxied = redis::Client::open(proxy.url()).unwrap();
    let queue = Queue::new(proxied, &name).await.unwrap();
    let observer_queue = Queue::new(server.client(), &name).await.unwrap();
    let mut observer = observer_queue.connection();
    let jobs = format!("{{{name}}}:jobs");
    queue.ensure_group().await.unwrap();
    let ran = Arc::new(Mutex::new(Vec::<Vec<u8>>::new()));
    let record = ran.clone();
    let worker = Worker::new(
        queue.clone(),
        move |job: Job| {
            record.lock().unwrap().push(job.payload);
            async { Ok(()) }
        },
        WorkerOptions {
            lease_ms: 60_000,
            ..WorkerOptions::default()
        },
    );
    let (handle, task) = start_worker(worker);
    let ran_payload = |payload: &'static [u8]| {
        let ran = ran.clone();
        move || {
            let ran = ran.clone();
            async move { ran.lock().unwrap().iter().any(|p| p == payload) }
        }
    };
    let checker = observer.clone();
    let no_payload = |id: &'static str| {
        let (observer, jobs) = (checker.clone(), jobs.clone());
        move || {
            let (mut observer, jobs) = (observer.clone(), jobs.clone());
            async move { !observer.hexists::<_, _, bool>(jobs, id).await.unwrap() }
        }
    };
    // A first success, so that the scripts are loaded before the test.
    observer_queue
        .add(
            b"warm",
            AddOptions {
                id: Some("warm".into()),
                delay_ms: 0,
                group: None,
            },
        )
        .await
        .unwrap();
    eventually("the first job to run", LONG, ran_payload(b"warm")).await;
    eventually("the first job to be settled", LONG, no_payload("warm")).await;

    // The next success's reply is lost (a success batch names {q}:errors).
    proxy.arm(format!("{{{name}}}:errors").as_bytes());
    let dropped = proxy.state.dropped.notified();
    observer_queue
        .add(
            b"old",
            AddOptions {
                id: Some("same".into()),
                delay_ms: 0,
                group: None,
            },
        )
        .await
        .unwrap();
    tokio::time::timeout(LONG, dropped)
        .await
        .expect("the success's reply to be dropped");
    eventually("the first try to be settled", LONG, || {
        let (mut observer, name) = (observer.clone(), name.clone());
        async move { in_flight(&mut observer, &name).await == 0 }
    })
    .await;
    eventually("the old job's payload to go", LONG, no_payload("same")).await;
    // The id is free again: a new job, delayed so that it waits in the
    // schedule while the worker resends.
    observer_queue
        .add(
            b"new",
            AddOptions {
                id: Some("same".into()),
                delay_ms: 600_000,
                group: None,
            },
        )
        .await
        .unwrap();
    proxy.resume();
    eventually("the success to be sent again", LONG, || {
        let answered = proxy.answered();
        async move { answered >= 1 }
    })
    .await;
    let stored: Option<Vec<u8>> = observer.hget(&jobs, "same").await.unwrap();
    assert_eq!(
        stored.as_deref(),
        Some(&b"new"[..]),
        "the resent success deleted the new job's payload"
    );
    // Due now: the new job runs.
    let _: i64 = redis::cmd("ECHO.SCHEDULE")
        .arg(format!("{{{name}}}:schedule"))
        .arg("same")
        .arg(0)
        .query_async(&mut observer)
        .await
        .unwrap();
    eventually("the new job to run", LONG, ran_payload(b"new")).await;
    eventually("the new job to be settled", LONG, no_payload("same")).await;
    stop(handle, task).await;
    assert_eq!(ran.lock().unwrap().len(), 3);
}

// Issue 23, 3: with the hold table full (10,000 schedules held, the most the
// module's table takes), a RetryAfter still writes its failure: the attempt
// is counted, the retry scheduled and the entry acknowledged and deleted.
// The refused hold is reported, not raised.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_with_a_full_hold_table_records_the_failure() {
    let server = Server::start();
    let name = queue_name("fullholds");
    let queue = Queue::new(server.client(), &name).await.unwrap();
    let mut conn = queue.connection();
    let mut pipe = redis::pipe();
    for i in 0..10_000 {
        pipe.cmd("ECHO.HOLD")
            .arg(format!("{{other-{i}}}:schedule"))
            .arg(60_000)
            .ignore();
    }
    let _: () = pipe.query_async(&mut conn).await.unwrap();
    let id = queue.add(b"busy", AddOptions::default()).await.unwrap();
    let runs = Arc::new(Mutex::new(0));
    let counter = runs.clone();
    let worker = Worker::new(
        queue.clone(),
        move |_job: Job| {
            *counter.lock().unwrap() += 1;
            async { Err(JobError::RetryAfter(5_000)) }
        },
        WorkerOptions {
            backoff: "fixed:600000".into(),
            lease_ms: 60_000,
            ..WorkerOptions::default()
        },
    );
    let (handle, task) = start_worker(worker);
    let attempts = format!("{{{name}}}:attempts");
    eventually("the failure to be written", LONG, || {
        let (mut conn, attempts, id) = (conn.clone(), attempts.clone(), id.clone());
        async move { conn.hget::<_, _, Option<u64>>(attempts, id).await.unwrap() == Some(1) }
    })
    .await;
    stop(handle, task).await;
    assert_eq!(*runs.lock().unwrap(), 1);
    let error: Option<String> = conn.hget(format!("{{{name}}}:errors"), &id).await.unwrap();
    assert_eq!(error.as_deref(), Some("retry after 5000 ms"));
    let retry: Option<f64> = conn
        .zscore(format!("{{{name}}}:schedule"), &id)
        .await
        .unwrap();
    assert!(retry.is_some(), "the retry was not scheduled");
    assert_eq!(
        in_flight(&mut conn, &name).await,
        0,
        "the entry is unacknowledged"
    );
    let entries: u64 = stream_len(&mut conn, format!("{{{name}}}:pending")).await;
    assert_eq!(entries, 0, "the entry was not deleted");
}

// Issue 23, 4: a job removed while it runs, whose run then fails, leaves no
// trace in any key of the queue: the failure script drops its entry and
// writes nothing, so a later add of the id starts afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remove_during_a_run_leaves_no_trace() {
    let server = Server::start();
    let name = queue_name("removed");
    let queue = Queue::new(server.client(), &name).await.unwrap();
    let mut conn = queue.connection();
    let id = queue.add(b"doomed", AddOptions::default()).await.unwrap();
    let started = Arc::new(tokio::sync::Notify::new());
    let removed = Arc::new(tokio::sync::Notify::new());
    let (on_start, on_removed) = (started.clone(), removed.clone());
    let worker = Worker::new(
        queue.clone(),
        move |_job: Job| {
            let (on_start, on_removed) = (on_start.clone(), on_removed.clone());
            async move {
                on_start.notify_one();
                on_removed.notified().await;
                Err(JobError::msg("failed after its removal"))
            }
        },
        WorkerOptions {
            backoff: "fixed:600000".into(),
            lease_ms: 60_000,
            ..WorkerOptions::default()
        },
    );
    let (handle, task) = start_worker(worker);
    tokio::time::timeout(LONG, started.notified())
        .await
        .expect("the job to start");
    assert!(queue.remove(&id).await.unwrap());
    removed.notify_one();
    eventually("the entry to be settled", LONG, || {
        let (mut conn, name) = (conn.clone(), name.clone());
        async move { in_flight(&mut conn, &name).await == 0 }
    })
    .await;
    stop(handle, task).await;
    let key = |suffix: &str| format!("{{{name}}}:{suffix}");
    for hash in ["attempts", "errors", "jobs"] {
        let kept: bool = conn.hexists(key(hash), &id).await.unwrap();
        assert!(!kept, "{{q}}:{hash} holds the removed job");
    }
    for set in ["schedule", "dead"] {
        let kept: Option<f64> = conn.zscore(key(set), &id).await.unwrap();
        assert!(kept.is_none(), "{{q}}:{set} holds the removed job");
    }
    let entries: u64 = stream_len(&mut conn, key("pending")).await;
    assert_eq!(entries, 0, "the entry was not deleted");
}

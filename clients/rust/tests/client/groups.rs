//! Groups (docs/clients.md, Groups): `AddOptions::group` puts the job in its
//! group's part of the schedule, released by the server's timer; a grouped
//! job keeps its group through a retry; a group the server would refuse is
//! refused by the library with nothing written.

use crate::common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use common::{
    calls, eventually, held_until, queue_name, server_ms_async, start_worker, stop, Server, LONG,
};
use echomq_client::{
    AddOptions, GroupInfo, Job, JobError, Queue, QueueConnection, Worker, WorkerOptions,
};
use redis::AsyncCommands;

fn grouped(group: &str) -> AddOptions {
    AddOptions {
        group: Some(group.into()),
        ..AddOptions::default()
    }
}

fn group_key(name: &str, group: &str) -> String {
    format!("{{{name}}}:schedule:echomq-g:{group}")
}

async fn members(conn: &mut QueueConnection, key: &str) -> Vec<String> {
    let mut members: Vec<String> = conn.zrange(key, 0, -1).await.unwrap();
    members.sort();
    members
}

async fn queue_keys(conn: &mut QueueConnection, name: &str) -> Vec<String> {
    let mut keys: Vec<String> = conn.keys(format!("{{{name}}}:*")).await.unwrap();
    keys.sort();
    keys
}

/// The queue's pair in `echomq.auto-promote` (`on`) or none: the server
/// releases it.
async fn timer(conn: &mut QueueConnection, name: &str, on: bool) {
    let pair = if on {
        format!("{{{name}}}:schedule {{{name}}}:pending")
    } else {
        String::new()
    };
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("echomq.auto-promote")
        .arg(pair)
        .query_async(conn)
        .await
        .unwrap();
}

type Runs = Arc<Mutex<Vec<(String, Vec<u8>, u64, Option<String>)>>>;

/// A worker recording each run (id, payload, attempt, group) that fails
/// every first attempt when `fail_first`.
fn recording_worker(queue: &Queue, runs: &Runs, fail_first: bool, backoff: &str) -> Worker {
    let runs = runs.clone();
    let handler = move |job: Job| {
        let runs = runs.clone();
        async move {
            runs.lock().unwrap().push((
                job.id.clone(),
                job.payload.clone(),
                job.attempt,
                job.group.clone(),
            ));
            if fail_first && job.attempt == 1 {
                return Err(JobError::Failed("once".into()));
            }
            Ok(())
        }
    };
    let options = WorkerOptions {
        backoff: backoff.into(),
        ..WorkerOptions::default()
    };
    Worker::new(queue.clone(), handler, options)
}

/// Runs a recording worker, with the queue's pair in the server's timer,
/// until it has run `n` jobs.
async fn run_all(queue: &Queue, conn: &mut QueueConnection, name: &str, n: usize) -> Runs {
    timer(conn, name, true).await;
    let runs = Runs::default();
    let (handle, task) = start_worker(recording_worker(queue, &runs, false, "fixed:1"));
    eventually("the jobs to run", LONG, || async {
        runs.lock().unwrap().len() == n
    })
    .await;
    stop(handle, task).await;
    timer(conn, name, false).await;
    runs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grouped_add_waits_in_its_group_and_the_timer_releases_it() {
    let server = Server::start();
    let name = queue_name("groups");
    let queue = Queue::new(server.client(), &name).await.unwrap();
    let mut conn = queue.connection();
    let generated = queue.add(b"one", grouped("acme")).await.unwrap();
    let given = AddOptions {
        id: Some("given-1".into()),
        ..grouped("acme")
    };
    let given = queue.add(b"two", given).await.unwrap();
    let many = queue
        .add_many_with([("three", grouped("other")), ("four", grouped("other"))])
        .await
        .unwrap();
    // Not straight into pending, though nothing governs the queue: into
    // the group's own set.
    let pending: u64 = conn.xlen(format!("{{{name}}}:pending")).await.unwrap();
    let scheduled: u64 = conn.zcard(format!("{{{name}}}:schedule")).await.unwrap();
    assert_eq!((pending, scheduled), (0, 0));
    let mut acme = vec![generated.clone(), given.clone()];
    acme.sort();
    assert_eq!(members(&mut conn, &group_key(&name, "acme")).await, acme);
    let mut other = many.clone();
    other.sort();
    assert_eq!(members(&mut conn, &group_key(&name, "other")).await, other);

    let runs = run_all(&queue, &mut conn, &name, 4).await;
    let got: BTreeMap<String, (Vec<u8>, Option<String>)> = runs
        .lock()
        .unwrap()
        .iter()
        .map(|(id, payload, _, group)| (id.clone(), (payload.clone(), group.clone())))
        .collect();
    let want: BTreeMap<String, (Vec<u8>, Option<String>)> = [
        (generated, (b"one".to_vec(), Some("acme".into()))),
        (given, (b"two".to_vec(), Some("acme".into()))),
        (many[0].clone(), (b"three".to_vec(), Some("other".into()))),
        (many[1].clone(), (b"four".to_vec(), Some("other".into()))),
    ]
    .into();
    assert_eq!(got, want);
    eventually("every job to be done", LONG, || {
        let (mut conn, name) = (conn.clone(), name.clone());
        async move { queue_keys(&mut conn, &name).await == [format!("{{{name}}}:pending")] }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grouped_job_is_retried_into_its_group() {
    let server = Server::start();
    let name = queue_name("groups-retry");
    let queue = Queue::new(server.client(), &name).await.unwrap();
    let mut conn = queue.connection();
    let grouped_id = queue.add(b"g", grouped("acme")).await.unwrap();
    let plain = queue.add(b"p", AddOptions::default()).await.unwrap();
    timer(&mut conn, &name, true).await;
    let runs = Runs::default();
    let (handle, task) = start_worker(recording_worker(&queue, &runs, true, "fixed:600000"));
    for id in [&grouped_id, &plain] {
        failed_once(&conn, &name, id).await;
    }
    // The grouped retry is in its group, the ungrouped one in the schedule,
    // as before.
    let schedule = format!("{{{name}}}:schedule");
    let in_group: Option<i64> = conn
        .zscore(group_key(&name, "acme"), &grouped_id)
        .await
        .unwrap();
    let grouped_in_schedule: Option<i64> = conn.zscore(&schedule, &grouped_id).await.unwrap();
    let plain_in_schedule: Option<i64> = conn.zscore(&schedule, &plain).await.unwrap();
    assert!(in_group.is_some(), "the grouped retry is in its group");
    assert_eq!(grouped_in_schedule, None);
    assert!(
        plain_in_schedule.is_some(),
        "the ungrouped retry is in the schedule"
    );
    // Due now (still in its group): the timer releases it and it succeeds.
    let _: i64 = redis::cmd("ECHO.SCHEDULE")
        .arg(&schedule)
        .arg(&grouped_id)
        .arg(0)
        .arg("XX")
        .arg("GROUP")
        .arg("acme")
        .query_async(&mut conn)
        .await
        .unwrap();
    eventually("the grouped retry to be done", LONG, || {
        let (mut conn, name, id) = (conn.clone(), name.clone(), grouped_id.clone());
        async move {
            let exists: bool = conn.hexists(format!("{{{name}}}:jobs"), &id).await.unwrap();
            !exists
        }
    })
    .await;
    stop(handle, task).await;
    timer(&mut conn, &name, false).await;
    let of_grouped: Vec<(u64, Option<String>)> = runs
        .lock()
        .unwrap()
        .iter()
        .filter(|run| run.0 == grouped_id)
        .map(|run| (run.2, run.3.clone()))
        .collect();
    assert_eq!(
        of_grouped,
        [(1, Some("acme".into())), (2, Some("acme".into()))]
    );
    let left: bool = conn.exists(group_key(&name, "acme")).await.unwrap();
    assert!(!left, "the group's key is gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_grouped_job_keeps_its_group_and_payloads_stay_as_they_are() {
    let server = Server::start();
    let name = queue_name("groups-dead");
    let queue = Queue::new(server.client(), &name).await.unwrap();
    let mut conn = queue.connection();
    let tricky: &[u8] = b"\0echomq-group:4:acmepayload";
    let id = queue.add(b"d", grouped("acme")).await.unwrap();
    let other = queue.add(tricky, AddOptions::default()).await.unwrap();
    timer(&mut conn, &name, true).await;
    let worker = Worker::new(
        queue.clone(),
        |_job: Job| async { Err(JobError::Failed("never".into())) },
        WorkerOptions {
            max_attempts: 1,
            ..WorkerOptions::default()
        },
    );
    let (handle, task) = start_worker(worker);
    eventually("both to die", LONG, || async {
        queue.counts().await.unwrap().dead == 2
    })
    .await;
    stop(handle, task).await;
    timer(&mut conn, &name, false).await;
    let dead: BTreeMap<String, (Option<Vec<u8>>, Option<String>)> = queue
        .dead(0, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|d| (d.id, (d.payload, d.group)))
        .collect();
    let want: BTreeMap<String, (Option<Vec<u8>>, Option<String>)> = [
        (id, (Some(b"d".to_vec()), Some("acme".into()))),
        (other, (Some(tricky.to_vec()), None)),
    ]
    .into();
    assert_eq!(dead, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_group_is_refused_with_nothing_written() {
    let server = Server::start();
    let name = queue_name("groups-bad");
    let queue = Queue::new(server.client(), &name).await.unwrap();
    let mut conn = queue.connection();
    for group in [String::new(), "x".repeat(1025), "é".repeat(513)] {
        let error = queue.add(b"x", grouped(&group)).await.unwrap_err();
        assert!(error.to_string().contains("1..=1024 bytes"), "{error}");
        let given = AddOptions {
            id: Some("given".into()),
            ..grouped(&group)
        };
        queue.add(b"x", given).await.unwrap_err();
        // One bad job sends none of the batch.
        queue
            .add_many_with([("x", AddOptions::default()), ("y", grouped(&group))])
            .await
            .unwrap_err();
    }
    assert_eq!(queue_keys(&mut conn, &name).await, Vec::<String>::new());
    // The longest group the server takes is taken.
    let longest = "x".repeat(1024);
    queue.add(b"x", grouped(&longest)).await.unwrap();
    let n: u64 = conn.zcard(group_key(&name, &longest)).await.unwrap();
    assert_eq!(n, 1);
}

/// A server and a queue on it named after `tag`, with its connection.
async fn open(tag: &str) -> (Server, String, Queue, QueueConnection) {
    let server = Server::start();
    let name = queue_name(tag);
    let queue = Queue::new(server.client(), &name).await.unwrap();
    let conn = queue.connection();
    (server, name, queue, conn)
}

/// Waits for the first failure of job `id` to be written.
async fn failed_once(conn: &QueueConnection, name: &str, id: &str) {
    let attempts = format!("{{{name}}}:attempts");
    eventually("the failure", LONG, || {
        let (mut conn, attempts) = (conn.clone(), attempts.clone());
        async move { conn.hget::<_, _, Option<u64>>(&attempts, id).await.unwrap() == Some(1) }
    })
    .await;
}

/// How many times the server ran ECHO.GROUPLIMIT and ECHO.GROUPS.
async fn group_calls(conn: &mut QueueConnection) -> (u64, u64) {
    (
        calls(conn, "ECHO.GROUPLIMIT").await,
        calls(conn, "ECHO.GROUPS").await,
    )
}

/// The whole queue's hold, ECHO.LIMITS' held-until-ms (0: not held).
async fn queue_held_until(conn: &mut QueueConnection, name: &str) -> i64 {
    held_until(conn, &format!("{{{name}}}:schedule")).await
}

fn by_name(groups: &[GroupInfo], name: &str) -> GroupInfo {
    groups
        .iter()
        .find(|g| g.group.as_deref() == Some(name))
        .unwrap()
        .clone()
}

fn fixed_backoff(ms: u64) -> WorkerOptions {
    WorkerOptions {
        backoff: format!("fixed:{ms}"),
        ..WorkerOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_limit_set_by_the_library_binds_that_group_only() {
    let (_server, name, queue, mut conn) = open("groups-limit").await;
    queue.set_group_limit("slow", "2/s", 1).await.unwrap();
    assert_eq!(
        queue.groups().await.unwrap(),
        [],
        "a limit alone makes no group"
    );
    let jobs = |group: &str| (0..6).map(|_| (b"x", grouped(group))).collect::<Vec<_>>();
    queue.add_many_with(jobs("slow")).await.unwrap();
    queue.add_many_with(jobs("fast")).await.unwrap();
    let groups = queue.groups().await.unwrap();
    let (slow, fast) = (by_name(&groups, "slow"), by_name(&groups, "fast"));
    assert_eq!((slow.limit_rate, slow.limit_burst), (Some(2.0), Some(1)));
    assert_eq!((fast.limit_rate, fast.limit_burst), (None, None));
    let runs = run_all(&queue, &mut conn, &name, 12).await;
    // At 2/s, burst 1, the slow group's six jobs take 2.5 s at least (one
    // now, then one every 500 ms); the fast one's leave at the first
    // release with the slow group's first (the workers start those seven in
    // any order), so all six run before the slow group's second job.
    // Without the limit both would leave at once.
    let order: Vec<String> = runs
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.3.clone().unwrap())
        .collect();
    let slow_at: Vec<usize> = (0..order.len()).filter(|&i| order[i] == "slow").collect();
    assert!(slow_at[0] < 7, "{order:?}");
    let fast_before = order[..slow_at[1]].iter().filter(|g| *g == "fast").count();
    assert_eq!(fast_before, 6, "{order:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cleared_group_limit_lets_the_group_go() {
    let (_server, name, queue, mut conn) = open("groups-clear").await;
    queue.set_group_limit("g", "1/h", 1).await.unwrap();
    let jobs = (0..3).map(|_| (b"x", grouped("g")));
    queue.add_many_with(jobs).await.unwrap();
    let limits: Vec<_> = queue
        .groups()
        .await
        .unwrap()
        .iter()
        .map(|g| (g.limit_rate, g.limit_burst))
        .collect();
    assert_eq!(limits, [(Some(1.0 / 3600.0), Some(1))]);
    timer(&mut conn, &name, true).await;
    let runs = Runs::default();
    let (handle, task) = start_worker(recording_worker(&queue, &runs, false, "fixed:1"));
    eventually("the one job its burst lets go", LONG, || async {
        runs.lock().unwrap().len() == 1
    })
    .await;
    let members: Vec<u64> = queue
        .groups()
        .await
        .unwrap()
        .iter()
        .map(|g| g.members)
        .collect();
    assert_eq!(members, [2], "one an hour: the two others wait");
    queue.clear_group_limit("g").await.unwrap();
    eventually("the two others once the limit is cleared", LONG, || async {
        runs.lock().unwrap().len() == 3
    })
    .await;
    stop(handle, task).await;
    timer(&mut conn, &name, false).await;
    queue.clear_group_limit("g").await.unwrap(); // nothing left to clear
    assert_eq!(queue.groups().await.unwrap(), []);
}

type TimedRuns = Arc<Mutex<Vec<(String, Option<String>, u64, i64)>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_with_a_group_holds_that_group_only() {
    let (_server, name, queue, mut conn) = open("groups-hold").await;
    let held = queue.add(b"h", grouped("held")).await.unwrap();
    let runs = TimedRuns::default();
    let handler = {
        let (runs, conn) = (runs.clone(), conn.clone());
        move |job: Job| {
            let (runs, mut conn) = (runs.clone(), conn.clone());
            async move {
                let at = server_ms_async(&mut conn).await;
                runs.lock()
                    .unwrap()
                    .push((job.id.clone(), job.group.clone(), job.attempt, at));
                if job.group.as_deref() == Some("held") && job.attempt == 1 {
                    return Err(JobError::retry_after(3000, job.group.clone()));
                }
                Ok(())
            }
        }
    };
    timer(&mut conn, &name, true).await;
    let (handle, task) = start_worker(Worker::new(queue.clone(), handler, fixed_backoff(0)));
    let attempts = format!("{{{name}}}:attempts");
    eventually("the held group's failure", LONG, || {
        let (mut conn, attempts, id) = (conn.clone(), attempts.clone(), held.clone());
        async move {
            conn.hget::<_, _, Option<u64>>(&attempts, &id)
                .await
                .unwrap()
                == Some(1)
        }
    })
    .await;
    let hold_end = by_name(&queue.groups().await.unwrap(), "held").held_until_ms;
    let first_at = runs.lock().unwrap()[0].3;
    assert!(
        hold_end > first_at + 2000,
        "the group is held for about 3 s"
    );
    assert_eq!(
        queue_held_until(&mut conn, &name).await,
        0,
        "the queue is not held"
    );
    let later = queue.add(b"h2", grouped("held")).await.unwrap();
    let others = queue
        .add_many_with((0..5).map(|_| (b"o", grouped("other"))))
        .await
        .unwrap();
    // The other group runs during the hold, the held group's jobs wait it out.
    eventually("the other group's jobs", LONG, || async {
        let runs = runs.lock().unwrap();
        others.iter().all(|id| runs.iter().any(|r| &r.0 == id))
    })
    .await;
    {
        let runs = runs.lock().unwrap();
        assert!(runs
            .iter()
            .filter(|r| others.contains(&r.0))
            .all(|r| r.3 < hold_end));
        assert!(!runs.iter().any(|r| r.0 == later));
    }
    eventually("the held group's jobs after the hold", LONG, || async {
        runs.lock().unwrap().len() == 8
    })
    .await;
    stop(handle, task).await;
    timer(&mut conn, &name, false).await;
    let runs = runs.lock().unwrap();
    for (id, _, attempt, at) in runs.iter() {
        if (*id == held && *attempt > 1) || *id == later {
            assert!(*at >= hold_end, "{id} ran before its group's hold ended");
        }
    }
    let mut of_held: Vec<(String, u64)> = runs
        .iter()
        .filter(|r| r.1.as_deref() == Some("held"))
        .map(|r| (r.0.clone(), r.2))
        .collect();
    of_held.sort();
    let mut want = vec![(held.clone(), 1), (held, 2), (later, 1)];
    want.sort();
    assert_eq!(of_held, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_without_a_group_of_its_own_holds_the_queue() {
    // An ungrouped job's JobError::retry_after(ms, job.group) is RetryAfter:
    // the whole queue.
    let (_server, name, queue, mut conn) = open("groups-hold-all").await;
    let id = queue.add(b"u", AddOptions::default()).await.unwrap();
    let handler = |job: Job| async move {
        assert_eq!(job.group, None);
        Err(JobError::retry_after(60_000, job.group))
    };
    let (handle, task) = start_worker(Worker::new(queue.clone(), handler, fixed_backoff(600_000)));
    failed_once(&conn, &name, &id).await;
    assert!(
        queue_held_until(&mut conn, &name).await > 0,
        "the queue is held"
    );
    stop(handle, task).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_lists_every_group_with_its_counts_across_pages() {
    let (server, name, queue, mut conn) = open("groups-list").await;
    let schedule = format!("{{{name}}}:schedule");
    for i in 0..7u64 {
        let group = format!("g0{i}");
        queue
            .add_many_with((0..=i).map(|_| (b"x", grouped(&group))))
            .await
            .unwrap();
        let later = AddOptions {
            delay_ms: 600_000,
            ..grouped(&group)
        };
        queue.add(b"later", later).await.unwrap();
    }
    // nothing governs the ungrouped jobs: straight into pending
    queue.add_many([b"u", b"u"]).await.unwrap();
    let delayed = AddOptions {
        delay_ms: 600_000,
        ..AddOptions::default()
    };
    queue.add(b"u", delayed).await.unwrap();
    let _: i64 = redis::cmd("ECHO.SCHEDULE")
        .arg(&schedule)
        .arg("due-now")
        .arg(0)
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: i64 = redis::cmd("ECHO.HOLD")
        .arg(&schedule)
        .arg(60_000)
        .arg("GROUP")
        .arg("g03")
        .query_async(&mut conn)
        .await
        .unwrap();
    let before = calls(&mut conn, "ECHO.GROUPS").await;
    let got = queue.groups_in_pages_of(2).await.unwrap();
    assert!(
        calls(&mut conn, "ECHO.GROUPS").await - before >= 4,
        "eight groups, two a page"
    );
    let names: Vec<Option<String>> = got.iter().map(|g| g.group.clone()).collect();
    let mut want = vec![None];
    want.extend((0..7).map(|i| Some(format!("g0{i}"))));
    assert_eq!(names, want);
    assert_eq!((got[0].members, got[0].due), (2, 1));
    for (i, g) in got[1..].iter().enumerate() {
        let n = i as u64 + 1;
        assert_eq!((g.members, g.due), (n + 1, n), "{g:?}");
        assert_eq!((g.limit_rate, g.available), (None, None));
    }
    let held: Vec<_> = got.iter().filter(|g| g.held_until_ms > 0).collect();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].group.as_deref(), Some("g03"));
    assert_eq!(queue.groups().await.unwrap(), got);
    // RESP3: maps and doubles, read the same.
    let resp3 = redis::Client::open(format!("{}?protocol=resp3", server.url())).unwrap();
    let queue3 = Queue::new(resp3, &name).await.unwrap();
    assert_eq!(queue3.groups_in_pages_of(3).await.unwrap(), got);
    // More groups than the default page: 1,000 more, two pages or more.
    let mut pipe = redis::pipe();
    for i in 0..1000 {
        pipe.cmd("ECHO.SCHEDULE")
            .arg(&schedule)
            .arg(format!("m{i}"))
            .arg(600_000)
            .arg("GROUP")
            .arg(format!("z{i:04}"))
            .ignore();
    }
    let _: () = pipe.query_async(&mut conn).await.unwrap();
    let start = calls(&mut conn, "ECHO.GROUPS").await;
    let many = queue.groups().await.unwrap();
    assert!(calls(&mut conn, "ECHO.GROUPS").await - start >= 2);
    assert_eq!(many.len(), 1 + 7 + 1000);
    for (i, g) in many[8..].iter().enumerate() {
        assert_eq!(g.group, Some(format!("z{i:04}")));
        assert_eq!((g.members, g.due), (1, 0));
    }
    // counts() adds every group's jobs to the schedule's own, past the first
    // page too.
    let counts = queue.counts().await.unwrap();
    let due: u64 = many.iter().map(|g| g.due).sum();
    let waiting: u64 = many.iter().map(|g| g.members - g.due).sum();
    assert_eq!((counts.scheduled, counts.due), (waiting, due));
    assert_eq!(
        (counts.scheduled, counts.due, counts.pending),
        (1 + 7 + 1000, 1 + 28, 2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_group_arguments_are_refused_with_nothing_sent() {
    let (_server, name, queue, mut conn) = open("groups-badlimit").await;
    let before = group_calls(&mut conn).await;
    let (long, ok) = ("x".repeat(1025), "g");
    for (group, rate, burst) in [
        ("", "5/s", 1),
        (long.as_str(), "5/s", 1),
        (ok, "0/s", 1),
        (ok, "05/s", 1),
        (ok, "5/d", 1),
        (ok, "5", 1),
        (ok, "/s", 1),
        (ok, "-5/s", 1),
        (ok, "+5/s", 1),
        (ok, "1000001/s", 1),
        (ok, "adaptive:5/s", 1),
        (ok, " 5/s", 1),
        (ok, "5/s", 0),
        (ok, "5/s", 1_000_001),
    ] {
        let refused = queue.set_group_limit(group, rate, burst).await;
        assert!(refused.is_err(), "{group:?} {rate:?} {burst}");
    }
    for group in ["", long.as_str()] {
        assert!(queue.clear_group_limit(group).await.is_err());
    }
    for page_size in [0, 1001] {
        assert!(queue.groups_in_pages_of(page_size).await.is_err());
    }
    let after = group_calls(&mut conn).await;
    assert_eq!(after, before);
    assert_eq!(queue_keys(&mut conn, &name).await, Vec::<String>::new());
    // The largest the server takes is taken, and counted.
    queue
        .set_group_limit(&"x".repeat(1024), "1000000/H", 1_000_000)
        .await
        .unwrap();
    queue.set_group_limit("g", "1/m", 1).await.unwrap();
    let stored: String = conn
        .get(format!("{{{name}}}:schedule:echomq-glim:g"))
        .await
        .unwrap();
    assert_eq!(stored, "1 1 60000 1");
    assert_eq!(calls(&mut conn, "ECHO.GROUPLIMIT").await, before.0 + 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_group_to_hold_holds_nothing_and_the_failure_is_written() {
    let (_server, name, queue, mut conn) = open("groups-badhold").await;
    let id = queue.add(b"x", AddOptions::default()).await.unwrap();
    let before = calls(&mut conn, "ECHO.HOLD").await;
    let handler = |_job: Job| async {
        Err(JobError::RetryAfterGroup {
            ms: 60_000,
            group: String::new(),
        })
    };
    let (handle, task) = start_worker(Worker::new(queue.clone(), handler, fixed_backoff(600_000)));
    failed_once(&conn, &name, &id).await;
    stop(handle, task).await;
    assert_eq!(
        calls(&mut conn, "ECHO.HOLD").await,
        before,
        "no hold was sent"
    );
    assert_eq!(queue_held_until(&mut conn, &name).await, 0);
    let retry: Option<i64> = conn
        .zscore(format!("{{{name}}}:schedule"), &id)
        .await
        .unwrap();
    assert!(
        retry.is_some(),
        "the failure was written: the retry is scheduled"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_refusal_of_a_group_limit_is_its_error() {
    let (_server, name, queue, mut conn) = open("groups-wrongtype").await;
    let key = format!("{{{name}}}:schedule:echomq-glim:g");
    let _: () = conn.rpush(&key, "not an override").await.unwrap();
    let error = queue.set_group_limit("g", "5/s", 1).await.unwrap_err();
    assert_eq!(error.code(), Some("WRONGTYPE"), "{error}");
    let error = queue.clear_group_limit("g").await.unwrap_err();
    assert_eq!(error.code(), Some("WRONGTYPE"), "{error}");
    let kept: Vec<String> = conn.lrange(&key, 0, -1).await.unwrap();
    assert_eq!(kept, ["not an override"]);
}

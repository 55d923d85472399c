//! Groups (docs/clients.md, Groups): `AddOptions::group` puts the job in its
//! group's part of the schedule, released by the server's timer; a grouped
//! job keeps its group through a retry; a group the server would refuse is
//! refused by the library with nothing written.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use common::{eventually, queue_name, start_worker, stop, Server, LONG};
use echomq_client::{AddOptions, Job, JobError, Queue, QueueConnection, Worker, WorkerOptions};
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

    timer(&mut conn, &name, true).await;
    let runs = Runs::default();
    let (handle, task) = start_worker(recording_worker(&queue, &runs, false, "fixed:1"));
    eventually("the grouped jobs to run", LONG, || async {
        runs.lock().unwrap().len() == 4
    })
    .await;
    stop(handle, task).await;
    timer(&mut conn, &name, false).await;
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
    let attempts = format!("{{{name}}}:attempts");
    for id in [&grouped_id, &plain] {
        eventually("the failure", LONG, || {
            let (mut conn, attempts, id) = (conn.clone(), attempts.clone(), id.clone());
            async move {
                let n: Option<u64> = conn.hget(&attempts, &id).await.unwrap();
                n == Some(1)
            }
        })
        .await;
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

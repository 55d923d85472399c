//! The queue and the worker on a real Valkey Cluster (echomq-testkit's: three
//! primaries with a replica each, every node loading the module): every
//! command of a queue reaches the primary of its slot, and a worker keeps
//! its jobs through a failover of that primary. One cluster per test.

use crate::common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use std::time::{Duration, Instant};

use common::{eventually, queue_name, start_worker, stop, LONG};
use echomq_client::{AddOptions, Counts, Job, JobError, Queue, Worker, WorkerOptions};
use echomq_testkit::cluster::Cluster;
use echomq_testkit::{cmd, info_field, q, wait_until};
use redis::Value;

fn cluster_client(cluster: &Cluster) -> redis::cluster::ClusterClient {
    // One seed is enough: the client learns the other nodes from it.
    redis::cluster::ClusterClient::new(vec![cluster.nodes[0].url()]).unwrap()
}

type Runs = Arc<Mutex<HashMap<String, u64>>>;

/// A handler that counts the runs of each job and fails ids ending in `-f`
/// once.
fn counting(runs: Runs) -> impl Fn(Job) -> std::future::Ready<Result<(), JobError>> {
    move |job: Job| {
        assert!(!job.entry_id.is_empty(), "a run names its entry");
        *runs.lock().unwrap().entry(job.id.clone()).or_insert(0) += 1;
        std::future::ready(if job.id.ends_with("-f") && job.attempt == 1 {
            Err(JobError::msg("first attempt fails"))
        } else {
            Ok(())
        })
    }
}

/// Runs a `counting` worker of `concurrency` slots (no backoff) until the
/// queue is empty, and returns the runs of each job.
async fn work_off(queue: &Queue, concurrency: usize) -> HashMap<String, u64> {
    let runs: Runs = Arc::default();
    let options = WorkerOptions {
        concurrency,
        backoff: "fixed:0".into(),
        ..WorkerOptions::default()
    };
    let worker = Worker::new(queue.clone(), counting(runs.clone()), options);
    let (handle, task) = start_worker(worker);
    eventually("every job done", LONG, || async {
        queue.counts().await.unwrap() == Counts::default()
    })
    .await;
    stop(handle, task).await;
    let runs = runs.lock().unwrap().clone();
    runs
}

// Adding (a transaction, a script, a batch), counting (TIME and reads), the
// dead set, and a worker on a queue whose slot is not on the seed node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_and_worker_on_the_queue_slot() {
    let cluster = Cluster::start();
    // A name whose slot the seed (node 0) does not serve, so that every
    // command has to be routed (or redirected) to another primary.
    let name = (0..)
        .map(|i| format!("{}-{i}", queue_name("cluster")))
        .find(|n| cluster.owner(cluster.keyslot(&format!("{{{n}}}"))) != 0)
        .unwrap();
    let queue = Queue::on_cluster(cluster_client(&cluster), &name)
        .await
        .unwrap();
    queue.add(b"a", AddOptions::default()).await.unwrap();
    let given = AddOptions {
        id: Some("job-f".into()),
        delay_ms: 0,
        group: None,
    };
    assert_eq!(queue.add(b"b", given.clone()).await.unwrap(), "job-f");
    assert_eq!(queue.add(b"b", given).await.unwrap(), "job-f");
    let batch: Vec<(String, AddOptions)> = (0..2500)
        .map(|i| {
            let id = (i % 2 == 0).then(|| format!("batch-{i}"));
            (
                format!("p{i}"),
                AddOptions {
                    id,
                    delay_ms: 0,
                    group: None,
                },
            )
        })
        .collect();
    assert_eq!(queue.add_many_with(batch).await.unwrap().len(), 2500);
    assert_eq!(
        queue.counts().await.unwrap(),
        Counts {
            pending: 2502,
            ..Counts::default()
        }
    );

    let runs = work_off(&queue, 20).await;
    assert_eq!(runs.len(), 2502);
    assert_eq!(runs["job-f"], 2, "failed once, then done");
    let twice: Vec<_> = runs
        .iter()
        .filter(|(id, n)| **n != 1 && *id != "job-f")
        .collect();
    assert!(twice.is_empty(), "run more than once: {twice:?}");
}

/// How a test moves the queue's slot while the worker runs.
#[derive(Clone, Copy, Debug)]
enum Move {
    /// `CLUSTER FAILOVER` by the owner's replica.
    Failover,
    /// The owner killed (SIGKILL): its replica takes over after the node
    /// timeout (2 s), the cluster answering `CLUSTERDOWN` meanwhile.
    Kill,
    /// IMPORTING/MIGRATING, then a `MIGRATE` per key, 100 ms apart (so the
    /// worker meets `ASK` for the keys moved and `TRYAGAIN` for commands
    /// whose keys are split), and 300 ms more before `SETSLOT NODE`.
    Migration,
}

const N: usize = 600;

/// A worker (and a producer adding the second half) on a queue whose slot
/// is moved mid-run: every job is done, none is dead or left over, each ran
/// as often as planned (`-f` jobs fail their first attempt) or, at most
/// `concurrency` of them, once more (in flight at the move: at least once).
async fn goes_on_through(how: Move) {
    let cluster = Cluster::start();
    let name = queue_name("move");
    let slot = cluster.keyslot(&format!("{{{name}}}"));
    let queue = Queue::on_cluster(cluster_client(&cluster), &name)
        .await
        .unwrap();
    let job = |i: usize| {
        let id = if i.is_multiple_of(3) {
            format!("job-{i}-f")
        } else {
            format!("job-{i}")
        };
        (
            format!("payload-{i}"),
            AddOptions {
                id: Some(id),
                delay_ms: 0,
                group: None,
            },
        )
    };
    // A kill loses what the replica had not received yet, which a worker
    // cannot help: the jobs are all added (and replicated, see move_slot)
    // before it. Else the second half is added while the slot moves.
    let added_first = if let Move::Kill = how { N } else { N / 2 };
    queue
        .add_many_with((0..added_first).map(job))
        .await
        .unwrap();

    let runs: Runs = Arc::default();
    let handler = {
        let runs = runs.clone();
        move |job: Job| {
            let runs = runs.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                counting(runs)(job).await
            }
        }
    };
    let concurrency = 8;
    let options = WorkerOptions {
        concurrency,
        backoff: "fixed:0".into(),
        lease_ms: 3000,
        ..WorkerOptions::default()
    };
    let worker = Worker::new(queue.clone(), handler, options);
    let (handle, task) = start_worker(worker);
    eventually("a third of the jobs done", LONG, || async {
        runs.lock().unwrap().len() >= N / 3
    })
    .await;

    let started = Instant::now();
    let runs_at_start = runs.lock().unwrap().len();
    let mover = tokio::task::spawn_blocking(move || {
        let mut cluster = cluster;
        move_slot(&mut cluster, slot, how);
        cluster
    });
    // One job at a time (each add is one script).
    for i in added_first..N {
        let (payload, options) = job(i);
        queue.add(payload, options).await.unwrap();
    }
    // The worker busy until the move ends, however long a loaded machine
    // makes it: more jobs (at most the worker's pace) while it lasts. Not
    // for a kill, which must find every job replicated before it.
    let mut total = N;
    while !matches!(how, Move::Kill) && !mover.is_finished() && total < 20 * N {
        let (payload, options) = job(total);
        queue.add(payload, options).await.unwrap();
        total += 1;
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    let cluster = mover.await.unwrap();
    let runs_at_end = runs.lock().unwrap().len();
    println!(
        "{how:?} done in {:?}, while {} jobs ran ({runs_at_start} before)",
        started.elapsed(),
        runs_at_end - runs_at_start
    );
    // The worker was busy while the slot moved, or the test proves nothing.
    assert!(runs_at_end < total, "all done before the move ended");

    let deadline = Instant::now() + LONG;
    loop {
        let counts = queue.counts().await;
        let ran = runs.lock().unwrap().len();
        if counts.as_ref().is_ok_and(|c| *c == Counts::default()) && ran == total {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{how:?}: not all done: {counts:?}, {ran} of {total} jobs ran; the cluster:\n{:?}\n{}",
            cluster.entries(),
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop(handle, task).await;
    let runs = runs.lock().unwrap();
    let extra: Vec<_> = runs
        .iter()
        .filter(|(id, n)| **n > if id.ends_with("-f") { 2 } else { 1 })
        .collect();
    println!(
        "{how:?}: {} jobs ran once more than planned: {extra:?}",
        extra.len()
    );
    assert!(
        extra.len() <= concurrency,
        "run again beyond those in flight: {extra:?}"
    );
    let missing: Vec<_> = runs
        .iter()
        .filter(|(id, n)| id.ends_with("-f") && **n < 2)
        .collect();
    assert!(missing.is_empty(), "failed jobs not retried: {missing:?}");
    let owner = cluster.owner(slot);
    let mut on_owner = cluster.conn(owner);
    let left: i64 = q!(&mut on_owner, "HLEN", format!("{{{name}}}:jobs"));
    assert_eq!(left, 0, "payloads left");
}

fn move_slot(cluster: &mut Cluster, slot: u16, how: Move) {
    let a = cluster.owner(slot);
    match how {
        Move::Failover | Move::Kill => {
            let r = cluster.replica_of(a);
            let mut on_r = cluster.conn(r);
            if let Move::Kill = how {
                // Caught up first, so that the kill loses none of the
                // queue (replication is asynchronous): a replica behind
                // takes over without it (NOGROUP on the new primary, every
                // count 0, the jobs not run yet lost). Caught up is the
                // replica's own offset at the primary's of now, what the
                // primary wrote so far (the adds, the group, the runs so
                // far). Not `WAIT 1`, on a connection of the test's own:
                // WAIT waits for that connection's writes, none, so it
                // counts at once a replica whose link is up and that has
                // been sent nothing since its first sync. That one is
                // common here: a replica fully synced by the cluster's
                // creation a second before gets the stream only after its
                // first REPLCONF ACK, up to a second later (seen 2 runs in
                // 10: the new primary elected at offset 0).
                let mut on_a = cluster.conn(a);
                let offset = |con: &mut redis::Connection| -> i64 {
                    info_field(con, "replication", "master_repl_offset")
                        .parse()
                        .unwrap_or(-1)
                };
                let written = offset(&mut on_a);
                let (from, waited) = (offset(&mut on_r), Instant::now());
                wait_until("the replica caught up", LONG, || {
                    let link = info_field(&mut on_r, "replication", "master_link_status");
                    let applied = offset(&mut on_r);
                    (link == "up" && applied >= written)
                        .then_some(())
                        .ok_or(format!("link {link}, offset {applied} of {written}"))
                });
                println!(
                    "the replica went from offset {from} to the primary's {written} in {:?}",
                    waited.elapsed()
                );
                cluster.nodes[a].kill();
            } else {
                let _: () = q!(&mut on_r, "CLUSTER", "FAILOVER");
            }
            wait_until("the replica took over", LONG, || {
                let role: Vec<Value> = cmd!("ROLE").query(&mut on_r).map_err(|e| e.to_string())?;
                match role.first() {
                    Some(Value::BulkString(r)) if r == b"master" => Ok(()),
                    other => Err(format!("ROLE {other:?}")),
                }
            });
        }
        Move::Migration => {
            let primaries = cluster.primaries();
            let b = *primaries.iter().find(|&&i| i != a).unwrap();
            let (a_id, b_id) = (cluster.id(a), cluster.id(b));
            let (mut on_a, mut on_b) = (cluster.conn(a), cluster.conn(b));
            let _: () = q!(&mut on_b, "CLUSTER", "SETSLOT", slot, "IMPORTING", &a_id);
            let _: () = q!(&mut on_a, "CLUSTER", "SETSLOT", slot, "MIGRATING", &b_id);
            let keys: Vec<String> = q!(&mut on_a, "CLUSTER", "GETKEYSINSLOT", slot, 100);
            for key in keys {
                std::thread::sleep(Duration::from_millis(100));
                let port = cluster.port(b);
                let _: String = q!(&mut on_a, "MIGRATE", "127.0.0.1", port, &key, 0, 10_000);
            }
            std::thread::sleep(Duration::from_millis(300));
            let _: () = q!(&mut on_b, "CLUSTER", "SETSLOT", slot, "NODE", &b_id);
            for p in primaries {
                if p != b {
                    let _: () = q!(
                        &mut cluster.conn(p),
                        "CLUSTER",
                        "SETSLOT",
                        slot,
                        "NODE",
                        &b_id
                    );
                }
            }
            let left: i64 = q!(&mut on_a, "CLUSTER", "COUNTKEYSINSLOT", slot);
            assert_eq!(left, 0, "keys left on the old owner");
        }
    }
    cluster.wait_stable(LONG);
}

// Blocking reads, takeovers, outcome batches and lease renewals through a
// CLUSTER FAILOVER of the queue's primary (MOVED, READONLY, UNBLOCKED).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_goes_on_through_a_cluster_failover() {
    goes_on_through(Move::Failover).await;
}

// The same through the death of the queue's primary: connections refused,
// CLUSTERDOWN until its replica is elected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_goes_on_through_the_death_of_its_primary() {
    goes_on_through(Move::Kill).await;
}

// The same through a slot migration, key by key (ASK, TRYAGAIN, then MOVED).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_goes_on_through_a_slot_migration() {
    goes_on_through(Move::Migration).await;
}

// A sharded queue on a cluster: its shards spread over the primaries, each
// job runs once from whichever primary holds its shard, a RetryAfter holds
// every shard, and set_limit writes the split limit to every node,
// replicas included, keeping another queue's entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_queue_spreads_over_the_primaries() {
    let cluster = Cluster::start();
    let name = queue_name("sharded");
    let queue = Queue::on_cluster(cluster_client(&cluster), &name)
        .await
        .unwrap()
        .with_shards(6)
        .unwrap();
    let owners: std::collections::HashSet<usize> = queue
        .shards()
        .iter()
        .map(|tag| cluster.owner(cluster.keyslot(&format!("{{{tag}}}"))))
        .collect();
    assert!(owners.len() > 1, "six shards on one primary: {owners:?}");
    let ids = queue
        .add_many((0..600).map(|i| format!("p{i}")))
        .await
        .unwrap();
    queue
        .add(
            b"f",
            AddOptions {
                id: Some("one-f".into()),
                ..AddOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(queue.counts().await.unwrap().pending, 601);

    let runs = work_off(&queue, 10).await;
    assert_eq!(runs.len(), 601);
    assert_eq!(runs["one-f"], 2, "failed once, then done");
    assert!(ids.iter().all(|id| runs[id] == 1));

    for i in 0..cluster.nodes.len() {
        let _: () = q!(
            &mut cluster.conn(i),
            "CONFIG",
            "SET",
            "echomq.release-limits",
            "{other}:schedule 5/s 1"
        );
    }
    queue.set_limit("500/s", 50).await.unwrap();
    let mut want = vec!["{other}:schedule 5/s 1".to_string()];
    want.extend(
        queue
            .shards()
            .iter()
            .map(|t| format!("{{{t}}}:schedule 5000/m 9")),
    );
    assert_eq!(
        release_limits(&cluster),
        vec![want.join(" "); cluster.nodes.len()]
    );
    queue.clear_limit().await.unwrap();
    assert_eq!(
        release_limits(&cluster),
        vec!["{other}:schedule 5/s 1"; cluster.nodes.len()]
    );
}

/// Each node's `echomq.release-limits`.
fn release_limits(cluster: &Cluster) -> Vec<String> {
    (0..cluster.nodes.len())
        .map(|i| {
            let reply: Vec<String> = q!(
                &mut cluster.conn(i),
                "CONFIG",
                "GET",
                "echomq.release-limits"
            );
            reply[1].clone()
        })
        .collect()
}

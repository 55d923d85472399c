//! The queue and the worker on a real Valkey Cluster (echomq-testkit's: three
//! primaries with a replica each, every node loading the module): every
//! command of a queue reaches the primary of its slot, and a worker keeps
//! its jobs through a failover of that primary. One cluster per test.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use common::{eventually, queue_name, start_worker, stop, LONG};
use echomq_client::{AddOptions, Counts, Job, JobError, Queue, Worker, WorkerOptions};
use echomq_testkit::cluster::Cluster;

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
    };
    assert_eq!(queue.add(b"b", given.clone()).await.unwrap(), "job-f");
    assert_eq!(queue.add(b"b", given).await.unwrap(), "job-f");
    let batch: Vec<(String, AddOptions)> = (0..2500)
        .map(|i| {
            let id = (i % 2 == 0).then(|| format!("batch-{i}"));
            (format!("p{i}"), AddOptions { id, delay_ms: 0 })
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

    let runs: Runs = Arc::default();
    let options = WorkerOptions {
        concurrency: 20,
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
    let runs = runs.lock().unwrap();
    assert_eq!(runs.len(), 2502);
    assert_eq!(runs["job-f"], 2, "failed once, then done");
    let twice: Vec<_> = runs
        .iter()
        .filter(|(id, n)| **n != 1 && *id != "job-f")
        .collect();
    assert!(twice.is_empty(), "run more than once: {twice:?}");
}

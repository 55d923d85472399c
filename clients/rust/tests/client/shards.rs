//! Sharded queues (docs/clients.md, Sharded queues) against a real server:
//! the protocol's vectors, where jobs land, the whole queue seen across its
//! shards, the worker over every shard (each job once, fairness, the idle
//! wait), holds, the split release limit and growing the layout.

use crate::common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{calls, eventually, held_until, queue_name, start_worker, stop, Server, LONG};
use echomq_client::{
    key_slot, shard_of, shard_tags, AddOptions, Job, JobError, Queue, QueueConnection, Worker,
    WorkerOptions,
};
use redis::AsyncCommands;

/// A server and a queue of `shards` shards on it, with its connection.
async fn open(tag: &str, shards: usize) -> (Server, String, Queue, QueueConnection) {
    let server = Server::start();
    let name = queue_name(tag);
    let queue = Queue::new(server.client(), &name)
        .await
        .unwrap()
        .with_shards(shards)
        .unwrap();
    let conn = queue.connection();
    (server, name, queue, conn)
}

fn with_id(id: impl Into<String>) -> AddOptions {
    AddOptions {
        id: Some(id.into()),
        ..AddOptions::default()
    }
}

/// `n` ids `<prefix><i>` that hash to `shard` of `shards`.
fn ids_in_shard(prefix: &str, shard: usize, shards: usize, n: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .filter(|id| shard_of(id, shards) == shard)
        .take(n)
        .collect()
}

/// The shard whose `jobs` hash holds `id`, and in how many shards it is.
async fn where_is(conn: &mut QueueConnection, tags: &[String], id: &str) -> (usize, usize) {
    let mut found = Vec::new();
    for (i, tag) in tags.iter().enumerate() {
        if conn
            .hexists::<_, _, bool>(format!("{{{tag}}}:jobs"), id)
            .await
            .unwrap()
        {
            found.push(i);
        }
    }
    (found.first().copied().unwrap_or(usize::MAX), found.len())
}

/// Each run's id and the moment its handler started.
type Starts = Arc<Mutex<Vec<(String, Instant)>>>;

/// A worker that records when each run starts, sleeps `sleep_ms`, then
/// answers `outcome(job)`.
fn recording<F>(
    queue: &Queue,
    starts: &Starts,
    sleep_ms: u64,
    options: WorkerOptions,
    outcome: F,
) -> Worker
where
    F: Fn(&Job) -> Result<(), JobError> + Send + Sync + 'static,
{
    let (starts, outcome) = (starts.clone(), Arc::new(outcome));
    Worker::new(
        queue.clone(),
        move |job: Job| {
            let (starts, outcome) = (starts.clone(), outcome.clone());
            async move {
                starts
                    .lock()
                    .unwrap()
                    .push((job.id.clone(), Instant::now()));
                if sleep_ms > 0 {
                    tokio::time::sleep(Duration::from_millis(sleep_ms)).await;
                }
                outcome(&job)
            }
        },
        options,
    )
}

fn concurrency(n: usize) -> WorkerOptions {
    WorkerOptions {
        concurrency: n,
        ..WorkerOptions::default()
    }
}

/// When `id` started (its first run), once it has.
async fn started_at(starts: &Starts, id: &str) -> Instant {
    let mut at = None;
    eventually(&format!("{id} to start"), LONG, || {
        at = starts
            .lock()
            .unwrap()
            .iter()
            .find(|(run, _)| run == id)
            .map(|(_, t)| *t);
        std::future::ready(at.is_some())
    })
    .await;
    at.unwrap()
}

fn runs_by_id(starts: &Starts) -> HashMap<String, usize> {
    let mut runs = HashMap::new();
    for (id, _) in starts.lock().unwrap().iter() {
        *runs.entry(id.clone()).or_default() += 1;
    }
    runs
}

/// Runs a `recording` worker with `options` (every job done at once) until
/// `n` runs have started and the queue is empty; the runs of each id.
async fn run_all(queue: &Queue, options: WorkerOptions, n: usize) -> HashMap<String, usize> {
    let starts = Starts::default();
    let worker = recording(queue, &starts, 0, options, |_| Ok(()));
    let (handle, task) = start_worker(worker);
    eventually("every job done", LONG, || {
        let queue = queue.clone();
        let ran = starts_len(&starts);
        async move { ran >= n && queue.counts().await.unwrap() == Default::default() }
    })
    .await;
    stop(handle, task).await;
    runs_by_id(&starts)
}

async fn release_limits(conn: &mut QueueConnection) -> String {
    let (_, value): (String, String) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("echomq.release-limits")
        .query_async(conn)
        .await
        .unwrap();
    value
}

// The tags and the job -> shard rule of protocol/shards.json, read at test
// time; shard counts out of 1..=1024 refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_protocol_vectors_hold_and_bad_counts_are_refused() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../protocol/shards.json");
    let vectors: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let server = Server::start();
    for layout in vectors["layouts"].as_array().unwrap() {
        let name = layout["queue"].as_str().unwrap();
        let shards = layout["shards"].as_u64().unwrap() as usize;
        let tags: Vec<String> = layout["tags"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap().to_string())
            .collect();
        assert_eq!(shard_tags(name, shards), tags, "{name} over {shards}");
        let queue = Queue::new(server.client(), name)
            .await
            .unwrap()
            .with_shards(shards)
            .unwrap();
        assert_eq!(queue.shards(), tags.as_slice());
    }
    for job in vectors["jobs"].as_array().unwrap() {
        let id = job["id"].as_str().unwrap();
        let shards = job["shards"].as_u64().unwrap() as usize;
        assert_eq!(
            u64::from(key_slot(id.as_bytes())),
            job["slot"].as_u64().unwrap(),
            "{id}"
        );
        assert_eq!(
            shard_of(id, shards) as u64,
            job["shard"].as_u64().unwrap(),
            "{id}"
        );
    }
    let queue = Queue::new(server.client(), "q").await.unwrap();
    for bad in [0, 1025, usize::MAX] {
        let e = queue.clone().with_shards(bad).err().expect("refused");
        assert_eq!(e.kind(), redis::ErrorKind::Client, "{bad}");
        assert!(e.to_string().contains("1..=1024"), "{e}");
    }
    assert_eq!(
        queue.clone().with_shards(1024).unwrap().shards().len(),
        1024
    );
}

// A job with an id lands in its shard, an add with that id again is one
// job; generated ids spread over every shard; add_many groups by shard,
// one transaction per shard and batch; one shard is the plain queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_land_in_their_shard() {
    let (_server, name, queue, mut conn) = open("place", 6).await;
    let tags = queue.shards().to_vec();
    for id in ["job-1", "job-2", "order:42", "a{b}c"] {
        assert_eq!(queue.add(b"x", with_id(id)).await.unwrap(), id);
        assert_eq!(queue.add(b"y", with_id(id)).await.unwrap(), id);
        assert_eq!(
            where_is(&mut conn, &tags, id).await,
            (shard_of(id, 6), 1),
            "{id}"
        );
    }
    assert_eq!(where_is(&mut conn, &tags, "job-1").await.0, 1); // protocol/shards.json
    assert_eq!(where_is(&mut conn, &tags, "order:42").await.0, 3);
    assert_eq!(queue.counts().await.unwrap().pending, 4);
    let payload: Vec<u8> = conn
        .hget(format!("{{{name}#1}}:jobs"), "job-1")
        .await
        .unwrap();
    assert_eq!(payload, b"x");

    let one = queue
        .add(b"generated", AddOptions::default())
        .await
        .unwrap();
    assert_eq!(
        where_is(&mut conn, &tags, &one).await,
        (queue.shard_of(&one), 1)
    );

    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .exec_async(&mut conn)
        .await
        .unwrap();
    let ids = queue
        .add_many((0..2500).map(|i| format!("p{i}")))
        .await
        .unwrap();
    let mut per_shard = [0usize; 6];
    for id in &ids {
        per_shard[queue.shard_of(id)] += 1;
    }
    assert!(per_shard.iter().all(|&n| n > 300), "{per_shard:?}");
    for id in ["job-1", "job-2", "order:42", "a{b}c", one.as_str()] {
        per_shard[queue.shard_of(id)] += 1;
    }
    for (i, tag) in tags.iter().enumerate() {
        let len: usize = conn.xlen(format!("{{{tag}}}:pending")).await.unwrap();
        assert_eq!(len, per_shard[i], "shard {i}");
    }
    // One transaction per shard (each under 1,000 jobs).
    assert_eq!(calls(&mut conn, "multi").await, 6);
    for (id, payload) in ids.iter().zip(0..) {
        if payload % 500 == 0 {
            let stored: String = conn
                .hget(format!("{{{}}}:jobs", tags[queue.shard_of(id)]), id)
                .await
                .unwrap();
            assert_eq!(stored, format!("p{payload}"));
        }
    }
    // Given ids and groups, mixed: each in its shard.
    let mixed = queue
        .add_many_with((0..30).map(|i| {
            let options = AddOptions {
                id: (i % 2 == 0).then(|| format!("m{i}")),
                group: (i % 3 == 0).then(|| "g".to_string()),
                ..AddOptions::default()
            };
            (format!("m{i}"), options)
        }))
        .await
        .unwrap();
    for id in &mixed {
        assert_eq!(
            where_is(&mut conn, &tags, id).await,
            (queue.shard_of(id), 1),
            "{id}"
        );
    }

    // One shard: the queue's own keys, nothing else.
    let plain = Queue::new(_server.client(), queue_name("plain"))
        .await
        .unwrap()
        .with_shards(1)
        .unwrap();
    assert_eq!(plain.shards(), [plain.name().to_string()]);
    plain.add(b"z", with_id("job-1")).await.unwrap();
    let exists: bool = conn
        .hexists(format!("{{{}}}:jobs", plain.name()), "job-1")
        .await
        .unwrap();
    assert!(exists);
}

// counts, dead (merged, oldest death first, offset/count over the merged
// order), requeue, remove, purge_dead and repeats over three shards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_queue_is_seen_across_shards() {
    let (_server, _name, queue, mut conn) = open("whole", 3).await;
    let tags = queue.shards().to_vec();
    // Two jobs per shard, each dying after one attempt.
    let mut ids = Vec::new();
    for shard in 0..3 {
        ids.extend(ids_in_shard(&format!("d{shard}-"), shard, 3, 2));
    }
    for id in &ids {
        queue.add(id.as_bytes(), with_id(id.clone())).await.unwrap();
        // Distinct times of death, in the order added.
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    let starts = Starts::default();
    let options = WorkerOptions {
        concurrency: 1,
        max_attempts: 1,
        ..WorkerOptions::default()
    };
    let worker = recording(&queue, &starts, 0, options, |_| Err(JobError::msg("boom")));
    let (handle, task) = start_worker(worker);
    eventually("six dead", LONG, || {
        let queue = queue.clone();
        async move { queue.counts().await.unwrap().dead == 6 }
    })
    .await;
    stop(handle, task).await;
    let per_shard = queue.counts_per_shard().await.unwrap();
    assert_eq!(
        per_shard.iter().map(|c| c.dead).collect::<Vec<_>>(),
        [2, 2, 2]
    );

    let dead = queue.dead(0, 100).await.unwrap();
    assert_eq!(dead.len(), 6);
    assert!(dead.windows(2).all(|w| w[0].died_at_ms <= w[1].died_at_ms));
    for job in &dead {
        assert_eq!(job.error.as_deref(), Some("boom"));
        assert_eq!(job.payload.as_deref(), Some(job.id.as_bytes()));
    }
    let page = queue.dead(2, 3).await.unwrap();
    assert_eq!(page, dead[2..5].to_vec());
    assert!(queue.dead(6, 3).await.unwrap().is_empty());

    assert!(queue.requeue(&ids[5]).await.unwrap());
    assert!(!queue.requeue(&ids[5]).await.unwrap());
    let pending: usize = conn.xlen(format!("{{{}}}:pending", tags[2])).await.unwrap();
    assert_eq!(pending, 1);
    assert!(queue.remove(&ids[0]).await.unwrap());
    assert!(!queue.remove(&ids[0]).await.unwrap());
    assert_eq!(queue.counts().await.unwrap().dead, 4);
    assert_eq!(queue.purge_dead(0).await.unwrap(), 4);
    assert_eq!(queue.counts().await.unwrap().dead, 0);
    assert_eq!(queue.counts().await.unwrap().pending, 1);

    // Recurring jobs: each definition in its id's shard, listed together.
    let mut defined = Vec::new();
    for (shard, tag) in tags.iter().enumerate() {
        let id = ids_in_shard(&format!("r{shard}-"), shard, 3, 1).remove(0);
        queue
            .repeat(&id, "every:60000", b"tick", Default::default())
            .await
            .unwrap();
        let listed: Vec<redis::Value> = redis::cmd("ECHO.REPEATS")
            .arg(format!("{{{tag}}}:schedule"))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(listed.len(), 1, "shard {shard}");
        defined.push(id);
    }
    let repeats: Vec<String> = queue
        .repeats()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    defined.sort();
    assert_eq!(repeats, defined);
    assert_eq!(queue.counts().await.unwrap().scheduled, 3);
    for id in &defined {
        assert!(queue.unrepeat(id).await.unwrap());
        assert!(!queue.unrepeat(id).await.unwrap());
    }
    assert!(queue.repeats().await.unwrap().is_empty());
}

// A worker on three shards runs every job of every shard exactly once:
// immediate and delayed, generated ids and given ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_runs_every_job_of_every_shard_once() {
    let (_server, _name, queue, _conn) = open("every", 3).await;
    let mut ids = queue
        .add_many((0..600).map(|i| format!("j{i}")))
        .await
        .unwrap();
    for i in 0..30 {
        let options = AddOptions {
            delay_ms: 50,
            ..with_id(format!("late-{i}"))
        };
        ids.push(queue.add(b"late", options).await.unwrap());
    }
    let runs = run_all(&queue, concurrency(8), 630).await;
    assert_eq!(runs.len(), 630);
    assert!(ids.iter().all(|id| runs.get(id) == Some(&1)));
}

fn starts_len(starts: &Starts) -> usize {
    starts.lock().unwrap().len()
}

// One shard 10,000 deep, the others empty, a worker running through it: a
// job added to another shard starts within 200 ms of its add.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deep_shard_keeps_no_other_shards_job_waiting() {
    let (_server, _name, queue, _conn) = open("fair", 3).await;
    let deep = ids_in_shard("deep-", 0, 3, 10_000);
    queue
        .add_many_with(deep.iter().map(|id| (b"deep", with_id(id.clone()))))
        .await
        .unwrap();
    assert_eq!(queue.counts_per_shard().await.unwrap()[0].pending, 10_000);
    let starts = Starts::default();
    let worker = recording(&queue, &starts, 2, concurrency(4), |_| Ok(()));
    let (handle, task) = start_worker(worker);
    eventually("the deep shard being worked", LONG, || {
        std::future::ready(starts_len(&starts) >= 200)
    })
    .await;
    let mut worst = Duration::ZERO;
    for (i, shard) in [1, 2, 1].into_iter().enumerate() {
        let id = ids_in_shard(&format!("fresh{i}-"), shard, 3, 1).remove(0);
        let added = Instant::now();
        queue.add(b"fresh", with_id(id.clone())).await.unwrap();
        let latency = started_at(&starts, &id).await - added;
        worst = worst.max(latency);
    }
    let left = queue.counts_per_shard().await.unwrap()[0].pending;
    stop(handle, task).await;
    eprintln!(
        "fairness: worst start {worst:?} after the add, {left} still pending in the deep shard"
    );
    assert!(
        left > 5_000,
        "the deep shard was drained too soon to tell ({left} left)"
    );
    assert!(
        worst < Duration::from_millis(200),
        "a job of another shard started {worst:?} after its add"
    );
}

// An idle worker on four shards waits on all of them at once: a job added
// to the last shard (or any) starts within 200 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_worker_waits_on_every_shard_at_once() {
    let (_server, _name, queue, _conn) = open("idle", 4).await;
    let starts = Starts::default();
    let worker = recording(&queue, &starts, 0, concurrency(1), |_| Ok(()));
    let (handle, task) = start_worker(worker);
    let warm = ids_in_shard("warm-", 0, 4, 1).remove(0);
    queue.add(b"warm", with_id(warm.clone())).await.unwrap();
    started_at(&starts, &warm).await;
    let mut worst = Duration::ZERO;
    for (i, shard) in [3, 3, 2, 1].into_iter().enumerate() {
        // Idle long enough for every shard's read to block, and then some.
        tokio::time::sleep(Duration::from_millis(250)).await;
        let id = ids_in_shard(&format!("idle{i}-"), shard, 4, 1).remove(0);
        let added = Instant::now();
        queue.add(b"wake", with_id(id.clone())).await.unwrap();
        worst = worst.max(started_at(&starts, &id).await - added);
    }
    stop(handle, task).await;
    eprintln!("idle wait: worst start {worst:?} after the add");
    assert!(
        worst < Duration::from_millis(200),
        "started {worst:?} after its add"
    );
}

// A RetryAfter without a group holds every shard's schedule; with a group,
// that group on every shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_holds_every_shard() {
    let (_server, _name, queue, mut conn) = open("hold", 3).await;
    let tags = queue.shards().to_vec();
    let id = ids_in_shard("overloaded-", 1, 3, 1).remove(0);
    let grouped = ids_in_shard("shop-", 2, 3, 1).remove(0);
    let options = AddOptions {
        group: Some("shop".into()),
        ..with_id(grouped.clone())
    };
    queue.add(b"y", options).await.unwrap();
    let starts = Starts::default();
    let hold_id = id.clone();
    let worker = recording(&queue, &starts, 0, concurrency(2), move |job| {
        if job.id == hold_id {
            Err(JobError::RetryAfter(60_000))
        } else {
            Err(JobError::retry_after(60_000, job.group.clone()))
        }
    });
    let (handle, task) = start_worker(worker);
    // The group's hold first: the queue's would keep the grouped job from
    // starting.
    started_at(&starts, &grouped).await;
    let now = common::server_ms_async(&mut conn).await;
    let schedules: Vec<String> = tags.iter().map(|t| format!("{{{t}}}:schedule")).collect();
    eventually("the group's failure", LONG, || {
        let queue = queue.clone();
        async move {
            let counts = queue.counts().await.unwrap();
            counts.scheduled + counts.due == 1
        }
    })
    .await;
    queue.add(b"x", with_id(id.clone())).await.unwrap();
    started_at(&starts, &id).await;
    for schedule in &schedules {
        let (s, c) = (schedule.clone(), conn.clone());
        eventually(&format!("{schedule} held"), LONG, move || {
            let (s, mut c) = (s.clone(), c.clone());
            async move { held_until(&mut c, &s).await > now + 50_000 }
        })
        .await;
    }
    stop(handle, task).await;
    // The group's hold on every shard: ECHO.HOLD's key of each.
    for schedule in &schedules {
        let reply: redis::Value = redis::cmd("ECHO.HOLD")
            .arg(schedule)
            .arg(1)
            .arg("GROUP")
            .arg("shop")
            .query_async(&mut conn)
            .await
            .unwrap();
        // A shorter hold keeps the longer one in force: its end comes back.
        let until: i64 = redis::from_redis_value(reply).unwrap();
        assert!(
            until > now + 50_000,
            "{schedule}: the group held until {until}"
        );
    }
}

// set_limit writes each shard's part into echomq.release-limits, keeps
// another queue's entry, clear_limit removes them; bad limits are refused
// with nothing sent; set_group_limit splits per shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_release_limit_is_split_over_the_shards() {
    let (_server, name, queue, mut conn) = open("limit", 6).await;
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("echomq.release-limits")
        .arg("{other}:schedule 5/s 1")
        .exec_async(&mut conn)
        .await
        .unwrap();
    let config_calls = calls(&mut conn, "config|set").await + calls(&mut conn, "config|get").await;
    assert!(config_calls > 0, "INFO commandstats counts CONFIG SET");
    for (rate, burst) in [
        ("0/s", 1),
        ("10/d", 1),
        ("01/s", 1),
        ("1000001/s", 1),
        ("adaptive:", 1),
        ("5/s", 0),
    ] {
        let e = queue.set_limit(rate, burst).await.expect_err("refused");
        assert_eq!(e.kind(), redis::ErrorKind::Client, "{rate} {burst}");
    }
    let after = calls(&mut conn, "config|set").await + calls(&mut conn, "config|get").await;
    assert_eq!(after, config_calls, "nothing sent");

    queue.set_limit("500/s", 50).await.unwrap();
    let mut want = vec!["{other}:schedule 5/s 1".to_string()];
    for tag in queue.shards() {
        want.push(format!("{{{tag}}}:schedule 5000/m 9"));
    }
    assert_eq!(release_limits(&mut conn).await, want.join(" "));
    // Set again (another limit): replaced, not added.
    queue.set_limit("adaptive:7/s", 6).await.unwrap();
    let value = release_limits(&mut conn).await;
    assert!(value.starts_with("{other}:schedule 5/s 1 "), "{value}");
    assert_eq!(value.matches("adaptive:70/m 1").count(), 6, "{value}");
    assert!(
        value.contains(&format!("{{{name}#5}}:schedule adaptive:70/m 1")),
        "{value}"
    );
    queue.clear_limit().await.unwrap();
    assert_eq!(release_limits(&mut conn).await, "{other}:schedule 5/s 1");

    // A group's limit: each shard's part, summed again by groups().
    for shard in 0..6 {
        let options = AddOptions {
            delay_ms: 60_000,
            group: Some("g".into()),
            ..with_id(ids_in_shard("g-", shard, 6, 1).remove(0))
        };
        queue.add(b"g", options).await.unwrap();
    }
    queue.set_group_limit("g", "60/s", 12).await.unwrap();
    let groups = queue.groups().await.unwrap();
    assert_eq!(groups.len(), 1);
    let g = &groups[0];
    assert_eq!((g.group.as_deref(), g.members), (Some("g"), 6));
    assert!((g.limit_rate.unwrap() - 60.0).abs() < 1e-6, "{g:?}");
    assert_eq!(g.limit_burst, Some(12));
    queue.clear_group_limit("g").await.unwrap();
    assert_eq!(queue.groups().await.unwrap()[0].limit_rate, None);
}

// Growing from 2 to 3 shards: jobs queued and delayed in the old layout
// all run exactly once by a worker opened with 3; requeue and remove find
// a job in the shard the old layout gave it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn growing_from_two_to_three_shards_loses_nothing() {
    let server = Server::start();
    let name = queue_name("grow");
    let two = Queue::new(server.client(), &name)
        .await
        .unwrap()
        .with_shards(2)
        .unwrap();
    let mut ids = two
        .add_many((0..200).map(|i| format!("now{i}")))
        .await
        .unwrap();
    for i in 0..20 {
        let options = AddOptions {
            delay_ms: 300,
            ..AddOptions::default()
        };
        ids.push(two.add(format!("later{i}"), options).await.unwrap());
    }
    // Ids whose shard differs under 3 shards.
    let moved: Vec<String> = (0..)
        .map(|i| format!("moved-{i}"))
        .filter(|id| shard_of(id, 2) != shard_of(id, 3))
        .take(3)
        .collect();
    for id in &moved {
        two.add(b"m", with_id(id.clone())).await.unwrap();
    }
    ids.extend(moved[..2].iter().cloned());
    let three = Queue::new(server.client(), &name)
        .await
        .unwrap()
        .with_shards(3)
        .unwrap();
    assert_eq!(three.shards()[..2], *two.shards());
    assert!(three.remove(&moved[2]).await.unwrap());
    let runs = run_all(&three, concurrency(4), ids.len()).await;
    assert_eq!(runs.len(), ids.len());
    assert!(ids.iter().all(|id| runs.get(id) == Some(&1)), "{runs:?}");
    assert!(!runs.contains_key(&moved[2]));
}

// Runs delivered to a worker that died, on every shard, are taken over
// after the lease by a worker of the sharded queue, each on its shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_workers_runs_are_taken_over_on_every_shard() {
    let (_server, _name, queue, mut conn) = open("takeover", 3).await;
    let mut ids = Vec::new();
    for (shard, tag) in queue.shards().to_vec().iter().enumerate() {
        let id = ids_in_shard(&format!("orphan{shard}-"), shard, 3, 1).remove(0);
        queue.add(b"o", with_id(id.clone())).await.unwrap();
        // Delivered to a consumer that will never settle it.
        let _: redis::Value = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg("workers")
            .arg("dead-worker")
            .arg("COUNT")
            .arg(10)
            .arg("STREAMS")
            .arg(format!("{{{tag}}}:pending"))
            .arg(">")
            .query_async(&mut conn)
            .await
            .unwrap();
        ids.push(id);
    }
    assert_eq!(queue.counts().await.unwrap().in_flight, 3);
    let options = WorkerOptions {
        concurrency: 2,
        lease_ms: 300,
        ..WorkerOptions::default()
    };
    let runs = run_all(&queue, options, 3).await;
    assert!(ids.iter().all(|id| runs.get(id) == Some(&1)), "{runs:?}");
}

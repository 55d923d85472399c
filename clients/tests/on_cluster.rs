//! Each library on a real Valkey Cluster (three primaries, one replica
//! each) through its cluster client: the crossworker programs with
//! `--cluster`, seeded with the address of a primary that does *not* own
//! the queue's slot, so the first command is redirected and the client has
//! to learn the slot map from the cluster. One cluster per language, the
//! scenarios of the library suites that do not depend on a single node:
//! adds, first runs delayed by the server's clock, the concurrency bound,
//! retries, the dead set, requeue and purge, a hold, a takeover after a
//! SIGKILL, and a recurring job declared, run and ended. Each scenario has its own queue, so the queues land on
//! different slots (and nodes).
//!
//! Outside CI a missing python3 (with venv) or Node.js makes a test say
//! SKIPPED with the reason; in CI it fails.

mod support;

use echomq_testkit as common;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::ExitStatusExt;

use common::cluster::Cluster;
use common::node::or_skip;
use common::{run, server_time_ms, Connection, FromRedisValue};
use redis::cmd;
use support::*;

/// The language's crossworker, or None (SKIPPED) when its runtime is missing.
fn ready(lang: Lang, test: &str) -> Option<()> {
    match lang {
        Python => or_skip(test, python().map(|_| ()))?,
        Node => or_skip(test, node_ready())?,
        Rust => {
            rust_crossworker();
        }
    }
    Some(())
}

/// A queue of the cluster: its name, a connection to the primary owning its
/// slot, and the URL of another primary to seed the client with.
struct Placed {
    name: String,
    owner: Connection,
    seed: String,
}

fn place(cluster: &Cluster, name: &str) -> Placed {
    let owner = cluster.owner(cluster.keyslot(&format!("{{{name}}}:pending")));
    let other = *cluster
        .primaries()
        .iter()
        .find(|&&p| p != owner)
        .expect("three primaries");
    Placed {
        name: name.to_string(),
        owner: cluster.conn(owner),
        seed: cluster.nodes[other].url(),
    }
}

impl Placed {
    fn key(&self, suffix: &str) -> String {
        format!("{{{}}}:{suffix}", self.name)
    }

    /// `crossworker <command> --cluster --url <seed> --queue <name> <args>`
    /// run to its end (exit 0); its stdout.
    fn run(&self, lang: Lang, command: &str, args: &[&str]) -> String {
        let mut full = vec![
            command,
            "--cluster",
            "--url",
            &self.seed,
            "--queue",
            &self.name,
        ];
        full.extend_from_slice(args);
        run_to_end(lang, &full)
    }

    /// Adds `count` jobs `<prefix><i>`, optionally delayed; their ids.
    fn add(&self, lang: Lang, count: usize, prefix: &str, delay_ms: u64) -> Vec<String> {
        let (count, delay) = (count.to_string(), delay_ms.to_string());
        let args = [
            "--count",
            &count,
            "--id-prefix",
            prefix,
            "--delay-ms",
            &delay,
        ];
        let out = self.run(lang, "add", &args);
        out.lines().map(str::to_string).collect()
    }

    /// A worker that exits by itself once `jobs` jobs are done or dead: its
    /// takes (`took <entry-id> <job> <attempt>`) and its summary.
    fn work(&self, lang: Lang, jobs: usize, args: &[&str]) -> (Vec<Take>, Summary) {
        let done = self.key("done");
        let jobs = jobs.to_string();
        let mut full = vec!["--done", &done, "--jobs", &jobs, "--deadline-secs", "60"];
        full.extend_from_slice(&["--log-takes", "--lease-ms", "2000"]);
        full.extend_from_slice(args);
        let out = self.run(lang, "work", &full);
        parse_work(lang, &out)
    }

    /// `<command> {name}:<suffix> <args>` on the owner.
    fn get<T: FromRedisValue>(&mut self, command: &str, suffix: &str, args: &[&str]) -> T {
        let key = self.key(suffix);
        run(&mut self.owner, cmd(command).arg(key).arg(args))
    }

    fn done(&mut self) -> BTreeMap<String, i64> {
        self.get("HGETALL", "done", &[])
    }

    fn dead_ids(&mut self) -> BTreeSet<String> {
        self.get("ZRANGE", "dead", &["0", "-1"])
    }
}

/// The trailing number of `job-7`.
fn index(id: &str) -> usize {
    let digits = id.trim_start_matches(|c: char| !c.is_ascii_digit());
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no number in {id}"))
}

/// Adds, delays, retries, the dead set, requeue and purge, the concurrency
/// bound: 30 jobs due now and 9 delayed 1.5 s, a worker with 3 handlers
/// where job `i` fails its first `i % 3` attempts with 2 attempts allowed
/// (so `i % 3 == 2` dies, `i % 3 == 1` is retried once).
fn adds_retries_and_the_dead_set(lang: Lang, cluster: &Cluster) {
    let mut q = place(cluster, &format!("work-{lang:?}").to_lowercase());
    let before_ms = server_time_ms(&mut q.owner);
    let now = q.add(lang, 30, "job-", 0);
    let late = q.add(lang, 9, "late-", 1500);
    assert_eq!(now.len() + late.len(), 39);
    let pending: i64 = q.get("XLEN", "pending", &[]);
    assert_eq!(pending, 30, "the jobs due now are pending at once");
    let fire_at: BTreeMap<String, i64> = late
        .iter()
        .map(|id| {
            let score: i64 = q.get("ZSCORE", "schedule", &[id]);
            assert!(
                score >= before_ms + 1500,
                "{id} due at {score}, added at {before_ms}"
            );
            (id.clone(), score)
        })
        .collect();

    let args = ["--concurrency", "3", "--fail-first", "2"];
    let args = [&args[..], &["--max-attempts", "2", "--backoff", "fixed:50"]].concat();
    let (takes, summary) = q.work(lang, 39, &args);
    assert!(
        (1..=3).contains(&summary.max_concurrent),
        "{lang:?}: {summary:?}"
    );
    let all: Vec<&String> = now.iter().chain(&late).collect();
    let dies = |id: &str| index(id) % 3 == 2;
    let want_done: BTreeMap<String, i64> = all
        .iter()
        .filter(|id| !dies(id))
        .map(|id| (id.to_string(), 1))
        .collect();
    assert_eq!(
        q.done(),
        want_done,
        "{lang:?}: each job that succeeds, once"
    );
    let want_dead: BTreeSet<String> = all
        .iter()
        .filter(|id| dies(id))
        .map(|id| id.to_string())
        .collect();
    assert_eq!(
        q.dead_ids(),
        want_dead,
        "{lang:?}: the jobs out of attempts"
    );
    for id in &all {
        let attempts: Vec<u64> = takes
            .iter()
            .filter(|t| &t.job == *id)
            .map(|t| t.attempt)
            .collect();
        let planned = 1 + (index(id) % 3).min(1) as u64;
        let want: Vec<u64> = (1..=planned).collect();
        assert_eq!(attempts, want, "{lang:?}: the runs of {id}");
    }
    for t in takes.iter().filter(|t| t.attempt == 1) {
        if let Some(&due) = fire_at.get(&t.job) {
            assert!(
                t.entry_ms >= due,
                "{lang:?}: {} released at {} < due {due}",
                t.job,
                t.entry_ms
            );
        }
    }

    let dead: Vec<serde_json::Value> = q
        .run(lang, "dead", &[])
        .lines()
        .map(|l| serde_json::from_str(l).expect("dead JSON"))
        .collect();
    assert_eq!(dead.len(), want_dead.len(), "{lang:?}: {dead:?}");
    for d in &dead {
        assert_eq!(d["attempts"], 2, "{lang:?}: {d}");
        let error = d["error"].as_str().unwrap_or_default();
        assert!(error.contains("planned failure"), "{lang:?}: {d}");
    }
    let back = want_dead.iter().next().expect("a dead job").clone();
    assert_eq!(q.run(lang, "requeue", &["--id", &back]).trim(), "true");
    assert_eq!(
        q.run(lang, "requeue", &["--id", &back]).trim(),
        "false",
        "only once"
    );
    // No planned failures now: the requeued job is done, the others stay dead.
    q.work(lang, 39, &[]);
    assert_eq!(
        q.done().get(&back),
        Some(&1),
        "{lang:?}: {back} done after requeue"
    );
    let left = want_dead.len() - 1;
    assert_eq!(q.run(lang, "purge", &[]).trim(), left.to_string());
    assert!(q.dead_ids().is_empty());
    for suffix in ["jobs", "attempts", "errors", "schedule"] {
        let exists: i64 = q.get("EXISTS", suffix, &[]);
        assert_eq!(exists, 0, "{lang:?}: {} left", q.key(suffix));
    }
}

/// A worker killed (SIGKILL) mid-job: another takes its entry over after
/// the lease and nothing is lost.
fn a_takeover_after_a_kill(lang: Lang, cluster: &Cluster) {
    let mut q = place(cluster, &format!("kill-{lang:?}").to_lowercase());
    let ids = q.add(lang, 10, "k-", 0);
    let done = q.key("done");
    let seed = q.seed.clone();
    let args = [
        "work",
        "--cluster",
        "--url",
        &seed,
        "--queue",
        &q.name,
        "--done",
        &done,
    ];
    let args = [
        &args[..],
        &[
            "--concurrency",
            "1",
            "--lease-ms",
            "1000",
            "--crash-on",
            "k-3",
        ],
    ]
    .concat();
    let out = crossworker(lang, &args)
        .output()
        .expect("run the crossworker");
    assert_eq!(
        out.status.signal(),
        Some(9),
        "{lang:?}: killed itself on k-3: {out:?}"
    );
    let before = q.done();
    let want: BTreeSet<&str> = ["k-0", "k-1", "k-2"].into();
    assert_eq!(
        before.keys().map(String::as_str).collect::<BTreeSet<_>>(),
        want
    );
    let (takes, _) = q.work(lang, 10, &["--lease-ms", "1000"]);
    let done = q.done();
    assert_eq!(
        done.keys().collect::<Vec<_>>(),
        ids.iter().collect::<Vec<_>>()
    );
    for (id, &n) in &done {
        // A job finished before the kill may not have been acknowledged
        // yet when the worker died on k-3 (successes go out in batches, by
        // a thread that a loaded machine may not have run since): it is
        // taken over and run again, at least once. Every job after it runs
        // once.
        let most = if before.contains_key(id) { 2 } else { 1 };
        assert!(
            (1..=most).contains(&n),
            "{lang:?}: {id} done {n} times: {done:?}"
        );
    }
    let k3: Vec<&Take> = takes.iter().filter(|t| t.job == "k-3").collect();
    assert_eq!(k3.len(), 1, "{lang:?}: k-3 taken over once: {k3:?}");
}

/// A `RetryAfter` holds the queue on its owner: `ECHO.LIMITS` there shows
/// the hold.
fn a_hold(lang: Lang, cluster: &Cluster) {
    let mut q = place(cluster, &format!("hold-{lang:?}").to_lowercase());
    q.add(lang, 1, "h-", 0);
    let args = [
        "--overload-every",
        "1",
        "--retry-after-ms",
        "20000",
        "--max-attempts",
        "1",
    ];
    let (takes, _) = q.work(lang, 1, &args);
    assert_eq!(takes.len(), 1);
    let limits: Vec<redis::Value> = q.get("ECHO.LIMITS", "schedule", &[]);
    let fields: BTreeMap<String, i64> = limits
        .chunks(2)
        .filter_map(|kv| match kv {
            [redis::Value::BulkString(k), redis::Value::Int(v)] => {
                Some((String::from_utf8_lossy(k).into_owned(), *v))
            }
            _ => None,
        })
        .collect();
    let held = fields.get("held-until-ms").copied().unwrap_or(0);
    let now_ms = server_time_ms(&mut q.owner);
    assert!(
        held > now_ms + 10_000,
        "{lang:?}: held until {held}, now {now_ms}: {limits:?}"
    );
    assert_eq!(q.dead_ids().len(), 1, "the job failed as well");
}

/// A recurring job through the cluster client: `repeat`, `repeats` and
/// `unrepeat` reach the owner of the queue's slot (the definitions hash is
/// in it), and a worker runs the occurrences with their ids, from the first.
fn a_recurring_job(lang: Lang, cluster: &Cluster) {
    let mut q = place(cluster, &format!("repeat-{lang:?}").to_lowercase());
    let from = (server_time_ms(&mut q.owner) + 1500).to_string();
    let declare = [
        "--id",
        "tick",
        "--spec",
        "every:1000",
        "--payload",
        "p",
        "--from-ms",
        &from,
    ];
    let fire = q.run(lang, "repeat", &declare);
    assert_eq!(fire.trim(), from, "{lang:?}: armed at FROM");
    let listed = q.run(lang, "repeats", &[]);
    let listed: serde_json::Value = serde_json::from_str(listed.trim()).expect("one definition");
    assert_eq!(listed["next_ms"].to_string(), from, "{lang:?}: {listed}");
    let defined: i64 = q.get("HLEN", "schedule:echomq-repeats", &[]);
    assert_eq!(defined, 1, "{lang:?}: the definition on the slot's owner");
    q.work(lang, 2, &[]);
    let first: i64 = from.parse().expect("ms");
    let done = q.done();
    let ran: Vec<i64> = done
        .keys()
        .map(|id| id.strip_prefix("tick@").expect(id).parse().expect(id))
        .collect();
    assert!(
        ran.len() >= 2 && ran.iter().zip(0..).all(|(&n, k)| n == first + 1000 * k),
        "{lang:?}: {done:?}"
    );
    assert!(done.values().all(|&n| n == 1), "{lang:?}: {done:?}");
    assert_eq!(q.run(lang, "unrepeat", &["--id", "tick"]).trim(), "true");
    let defined: i64 = q.get("EXISTS", "schedule:echomq-repeats", &[]);
    assert_eq!(defined, 0, "{lang:?}: the definition gone");
}

fn on_a_cluster(lang: Lang, test: &str) {
    let Some(()) = ready(lang, test) else {
        return;
    };
    let cluster = Cluster::start();
    adds_retries_and_the_dead_set(lang, &cluster);
    a_takeover_after_a_kill(lang, &cluster);
    a_hold(lang, &cluster);
    a_recurring_job(lang, &cluster);
}

#[test]
fn python_works_queues_on_a_cluster() {
    on_a_cluster(Python, "python_works_queues_on_a_cluster");
}

#[test]
fn node_works_queues_on_a_cluster() {
    on_a_cluster(Node, "node_works_queues_on_a_cluster");
}

#[test]
fn rust_works_queues_on_a_cluster() {
    on_a_cluster(Rust, "rust_works_queues_on_a_cluster");
}

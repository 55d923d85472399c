//! Scenarios 6 and 7 of the client libraries, with workers in processes of
//! their own (the `crossworker` example): leases, a worker killed mid-job,
//! and a graceful SIGTERM. Also the `add` and `dead` commands of
//! `crossworker`, which the cross-language tests rely on.

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::{queue_name, wait_until, Server, LONG};
use redis::Commands;

/// target/<profile>/examples/crossworker, next to this test's directory
/// (`cargo test` builds the examples; `--test client` alone does not).
fn crossworker() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let path = profile_dir.join("examples").join("crossworker");
    assert!(
        path.exists(),
        "{} is missing: build it with `cargo build --release -p echomq-client --examples` \
         (a plain `cargo test` builds it)",
        path.display()
    );
    path
}

struct WorkerProcess {
    child: Child,
    _stdout: BufReader<ChildStdout>,
}

impl WorkerProcess {
    /// Starts `crossworker work` and waits for its `ready` line.
    fn start(server: &Server, queue: &str, args: &[&str]) -> WorkerProcess {
        let mut child = Command::new(crossworker())
            .arg("work")
            .args(["--url", &server.url(), "--queue", queue])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start crossworker");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout
            .read_line(&mut line)
            .expect("read crossworker's stdout");
        assert_eq!(line.trim(), "ready", "crossworker's first line");
        WorkerProcess {
            child,
            _stdout: stdout,
        }
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success());
    }

    fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "the worker process did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn crossworker_output(server: &Server, args: &[&str]) -> String {
    let out = Command::new(crossworker())
        .args(args)
        .args(["--url", &server.url()])
        .output()
        .expect("run crossworker");
    assert!(
        out.status.success(),
        "crossworker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

fn add(server: &Server, queue: &str, count: usize, prefix: &str) -> Vec<String> {
    let n = count.to_string();
    let out = crossworker_output(
        server,
        &[
            "add",
            "--queue",
            queue,
            "--count",
            &n,
            "--id-prefix",
            prefix,
        ],
    );
    let ids: Vec<String> = out.lines().map(str::to_string).collect();
    let want: Vec<String> = (0..count).map(|i| format!("{prefix}{i}")).collect();
    assert_eq!(ids, want);
    ids
}

fn in_flight(conn: &mut redis::Connection, queue: &str) -> u64 {
    let summary: redis::Value = redis::cmd("XPENDING")
        .arg(format!("{{{queue}}}:pending"))
        .arg("workers")
        .query(conn)
        .unwrap();
    match summary {
        redis::Value::Array(items) => match items.first() {
            Some(redis::Value::Int(n)) => *n as u64,
            _ => 0,
        },
        _ => 0,
    }
}

// 6a. A handler running three leases long, with a second live worker: once.
#[test]
fn a_long_job_keeps_its_lease() {
    let server = Server::start();
    let mut conn = server.conn();
    let queue = queue_name("lease");
    let args = [
        "--lease-ms",
        "300",
        "--sleep-ms",
        "1000",
        "--started",
        "started",
        "--done",
        "done",
    ];
    let _a = WorkerProcess::start(&server, &queue, &args);
    let _b = WorkerProcess::start(&server, &queue, &args);
    add(&server, &queue, 1, "long-");
    wait_until("the job is done", LONG, || {
        conn.hexists::<_, _, bool>("done", "long-0").unwrap()
    });
    // Two more leases for a second run to show up, if there were one.
    std::thread::sleep(Duration::from_millis(600));
    let started: Vec<String> = conn.lrange("started", 0, -1).unwrap();
    assert_eq!(started, ["long-0"], "the job ran once");
    let done: u64 = conn.hget("done", "long-0").unwrap();
    assert_eq!(done, 1);
}

// 6b. A worker killed with SIGKILL mid-job: its jobs run in the other worker
// within a few leases, none lost.
#[test]
fn jobs_of_a_killed_worker_are_taken_over() {
    let server = Server::start();
    let mut conn = server.conn();
    let queue = queue_name("kill");
    let lease = 1000u64;
    let lease_arg = lease.to_string();
    let mut victim = WorkerProcess::start(
        &server,
        &queue,
        &[
            "--lease-ms",
            &lease_arg,
            "--sleep-ms",
            "60000",
            "--concurrency",
            "4",
            "--started",
            "started",
        ],
    );
    let ids = add(&server, &queue, 4, "k-");
    wait_until("the victim started all four", LONG, || {
        conn.llen::<_, u64>("started").unwrap() == 4
    });
    let _survivor = WorkerProcess::start(
        &server,
        &queue,
        &[
            "--lease-ms",
            &lease_arg,
            "--sleep-ms",
            "10",
            "--concurrency",
            "4",
            "--started",
            "started",
            "--done",
            "done",
        ],
    );
    victim.signal("KILL");
    victim.wait(LONG);
    let killed = Instant::now();
    wait_until("the survivor did all four", LONG, || {
        ids.iter()
            .all(|id| conn.hexists::<_, _, bool>("done", id).unwrap())
    });
    let took = killed.elapsed();
    assert!(
        took < Duration::from_millis(10 * lease),
        "taken over after {took:?}, more than 10 leases"
    );
    wait_until("all acknowledged", LONG, || {
        in_flight(&mut conn, &queue) == 0
    });
    let len: u64 = redis::cmd("XLEN")
        .arg(format!("{{{queue}}}:pending"))
        .query(&mut conn)
        .unwrap();
    assert_eq!(len, 0);
}

// 7a. SIGTERM with handlers running: they finish and their outcomes are
// written, nothing new is taken, exit 0.
#[test]
fn sigterm_finishes_running_jobs_and_takes_nothing_new() {
    let server = Server::start();
    let mut conn = server.conn();
    let queue = queue_name("term");
    let mut worker = WorkerProcess::start(
        &server,
        &queue,
        &[
            "--sleep-ms",
            "1500",
            "--concurrency",
            "3",
            "--started",
            "started",
            "--done",
            "done",
        ],
    );
    let first = add(&server, &queue, 3, "a-");
    wait_until("three running", LONG, || {
        conn.llen::<_, u64>("started").unwrap() == 3
    });
    add(&server, &queue, 3, "b-");
    worker.signal("TERM");
    let status = worker.wait(LONG);
    assert!(status.success(), "exit status {status:?}");
    for id in &first {
        let done: Option<u64> = conn.hget("done", id).unwrap();
        assert_eq!(done, Some(1), "{id} finished");
        let exists: bool = conn.hexists(format!("{{{queue}}}:jobs"), id).unwrap();
        assert!(!exists, "{id}'s success was acknowledged");
    }
    let started: Vec<String> = conn.lrange("started", 0, -1).unwrap();
    assert_eq!(started.len(), 3, "nothing new started: {started:?}");
    assert_eq!(in_flight(&mut conn, &queue), 0);
    let len: u64 = redis::cmd("XLEN")
        .arg(format!("{{{queue}}}:pending"))
        .query(&mut conn)
        .unwrap();
    assert_eq!(len, 3, "the three later jobs wait in the stream");
}

// 7b. A handler that outlives shutdown_timeout_ms is left in the group and
// another worker takes it over after the lease.
#[test]
fn a_handler_outliving_shutdown_is_taken_over() {
    let server = Server::start();
    let mut conn = server.conn();
    let queue = queue_name("outlive");
    let mut worker = WorkerProcess::start(
        &server,
        &queue,
        &[
            "--sleep-ms",
            "60000",
            "--shutdown-timeout-ms",
            "300",
            "--lease-ms",
            "1000",
            "--started",
            "started",
        ],
    );
    add(&server, &queue, 1, "slow-");
    wait_until("running", LONG, || {
        conn.llen::<_, u64>("started").unwrap() == 1
    });
    worker.signal("TERM");
    let status = worker.wait(LONG);
    assert!(status.success(), "exit status {status:?}");
    assert_eq!(
        in_flight(&mut conn, &queue),
        1,
        "left in the group, unacknowledged"
    );
    let mut other = WorkerProcess::start(
        &server,
        &queue,
        &["--sleep-ms", "10", "--lease-ms", "1000", "--done", "done"],
    );
    wait_until("taken over and done", LONG, || {
        conn.hexists::<_, _, bool>("done", "slow-0").unwrap()
    });
    wait_until("acknowledged", LONG, || in_flight(&mut conn, &queue) == 0);
    other.signal("TERM");
    assert!(other.wait(LONG).success());
}

// crossworker dead: one JSON object per dead job, oldest first.
#[test]
fn crossworker_dead_prints_the_dead_set() {
    let server = Server::start();
    let mut conn = server.conn();
    let queue = queue_name("deadcli");
    let mut worker = WorkerProcess::start(
        &server,
        &queue,
        &["--fail", "it \"broke\"", "--max-attempts", "1"],
    );
    add(&server, &queue, 2, "d-");
    wait_until("both dead", LONG, || {
        conn.zcard::<_, u64>(format!("{{{queue}}}:dead")).unwrap() == 2
    });
    worker.signal("TERM");
    assert!(worker.wait(LONG).success());
    let out = crossworker_output(&server, &["dead", "--queue", &queue]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    let mut ids = Vec::new();
    for line in lines {
        assert!(line.contains("\"attempts\": 1"), "{line}");
        assert!(line.contains(r#""error": "it \"broke\"""#), "{line}");
        let id = if line.contains("\"id\": \"d-0\"") {
            "d-0"
        } else {
            "d-1"
        };
        assert!(line.contains(&format!("\"id\": \"{id}\"")), "{line}");
        let hex: String = format!("payload-{}", &id[2..])
            .bytes()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert!(
            line.contains(&format!("\"payload_hex\": \"{hex}\"")),
            "{line}"
        );
        ids.push(id);
    }
    ids.sort();
    assert_eq!(ids, ["d-0", "d-1"]);
    // A missing error or payload is JSON null, as in the other languages.
    let _: () = conn.hdel(format!("{{{queue}}}:jobs"), "d-1").unwrap();
    let _: () = conn.hdel(format!("{{{queue}}}:errors"), "d-1").unwrap();
    let out = crossworker_output(&server, &["dead", "--queue", &queue]);
    let line = out
        .lines()
        .find(|l| l.contains("\"id\": \"d-1\""))
        .unwrap_or_else(|| panic!("no d-1 in {out}"));
    assert!(line.contains("\"error\": null"), "{line}");
    assert!(line.contains("\"payload_hex\": null"), "{line}");
}

// 7 (takeover with max_deliveries): a job whose worker dies on every
// delivery is failed, not run again, once delivered more than
// max_deliveries times, and ends in the dead set with that message.
#[test]
fn a_job_that_kills_its_workers_ends_dead() {
    let server = Server::start();
    let mut conn = server.conn();
    let queue = queue_name("deliveries");
    let args = [
        "--sleep-ms",
        "60000",
        "--lease-ms",
        "300",
        "--max-deliveries",
        "1",
        "--max-attempts",
        "1",
        "--started",
        "started",
    ];
    let mut victim = WorkerProcess::start(&server, &queue, &args);
    add(&server, &queue, 1, "poison-");
    wait_until("running", LONG, || {
        conn.llen::<_, u64>("started").unwrap() == 1
    });
    victim.signal("KILL");
    victim.wait(LONG);
    let mut next = WorkerProcess::start(&server, &queue, &args);
    wait_until("dead", LONG, || {
        conn.zcard::<_, u64>(format!("{{{queue}}}:dead")).unwrap() == 1
    });
    let started: u64 = conn.llen("started").unwrap();
    assert_eq!(started, 1, "not run a second time");
    let error: String = conn
        .hget(format!("{{{queue}}}:errors"), "poison-0")
        .unwrap();
    assert_eq!(error, "delivered 2 times without an outcome");
    assert_eq!(in_flight(&mut conn, &queue), 0);
    next.signal("TERM");
    assert!(next.wait(LONG).success());
}

// `--shards N` on the crossworker's commands: `add` puts each job in its
// shard, `work --jobs` counts every shard's dead set, `dead`, `requeue`
// and `purge` see the whole queue.
#[test]
fn crossworker_works_a_sharded_queue() {
    let server = Server::start();
    let mut conn = server.conn();
    let queue = queue_name("shardcli");
    let shards = ["--shards", "3"];
    let out = crossworker_output(
        &server,
        &[
            "add",
            "--queue",
            &queue,
            "--count",
            "30",
            "--id-prefix",
            "s-",
            "--shards",
            "3",
        ],
    );
    let tags = echomq_client::shard_tags(&queue, 3);
    for id in out.lines() {
        let tag = &tags[echomq_client::shard_of(id, 3)];
        assert!(
            conn.hexists::<_, _, bool>(format!("{{{tag}}}:jobs"), id)
                .unwrap(),
            "{id}"
        );
    }
    let done = format!("{queue}-done");
    let mut worker = WorkerProcess::start(
        &server,
        &queue,
        &[
            "--done",
            &done,
            "--jobs",
            "30",
            "--fail-first",
            "1",
            "--max-attempts",
            "1",
            "--shards",
            "3",
        ],
    );
    // Ids ending in an odd digit fail their only attempt: 15 done, 15 dead,
    // over every shard; `--jobs 30` closes the worker.
    assert!(worker.wait(LONG).success());
    assert_eq!(conn.hlen::<_, u64>(&done).unwrap(), 15);
    let dead = crossworker_output(
        &server,
        &[&["dead", "--queue", &queue][..], &shards].concat(),
    );
    assert_eq!(dead.lines().count(), 15, "{dead}");
    let requeued = crossworker_output(
        &server,
        &[&["requeue", "--queue", &queue, "--id", "s-1"][..], &shards].concat(),
    );
    assert_eq!(requeued.trim(), "true");
    let purged = crossworker_output(
        &server,
        &[&["purge", "--queue", &queue][..], &shards].concat(),
    );
    assert_eq!(purged.trim(), "14");
}

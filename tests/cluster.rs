//! echomq on a real Valkey Cluster: routing and redirects, hash-tagged
//! queues, CROSSSLOT refusals, resharding a live queue, automatic failover,
//! and the effects (not the commands) reaching the replicas; the server's own
//! promotion on each owner, and a stream queue promoted by its owner alone.
//! (Workers through failovers and resharding: clients/tests/failover.rs.)
//!
//! Each test brings up its own cluster of three primaries with one replica
//! each, every node loading the module, on 127.0.0.1 (tests/common/cluster.rs).
//! Every process is killed by pid when its handle drops, also when a test
//! panics.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::{self, sleep};
use std::time::{Duration, Instant};

use common::cluster::*;
use common::*;

/// Full jitter over up to 10^13 ms: random, exact, large scores, and the
/// chance that a draw falls due during a test (under a minute) is ~10^-8.
const FAR: &str = "jitter:exponential:1000000:10000000000000";

#[test]
fn commands_route_to_the_slot_owner_and_redirect_elsewhere() {
    let cluster = Cluster::start();
    let (schedule, pending) = ("{route}:schedule", "{route}:pending");
    let slot = cluster.keyslot(schedule);
    assert_eq!(cluster.keyslot(pending), slot, "a hash tag shares the slot");
    let owner = cluster.owner(slot);
    let owner_addr = cluster.nodes[owner].addr();
    let mut con = cluster.conn(owner);

    // The owner accepts both commands.
    one_job_through(&mut con, schedule, pending, "job-1");

    // Every other primary, and the owner's own replica (even in READONLY
    // mode: these are writes), redirects to the owner, and the module never
    // runs there.
    let moved = format!("MOVED {slot} {owner_addr}");
    let others: Vec<usize> = cluster
        .primaries()
        .into_iter()
        .filter(|&i| i != owner)
        .collect();
    assert_eq!(others.len(), 2);
    let replica = cluster.replica_of(owner);
    for &i in others.iter().chain([&replica]) {
        let mut other = cluster.conn(i);
        if i == replica {
            let _: () = q!(&mut other, "READONLY");
        }
        let what = format!("ECHO.RETRY on {}", cluster.port(i));
        assert_eq!(
            refused(
                try_retry(&mut other, schedule, "job-2", "fixed:0", 1),
                &what
            ),
            moved,
            "{what}"
        );
        let what = format!("ECHO.PROMOTE on {}", cluster.port(i));
        assert_eq!(
            refused(try_promote(&mut other, schedule, pending), &what),
            moved,
            "{what}"
        );
        assert_eq!(echomq_stat(&mut other, "echomq_retries"), 0);
        assert_eq!(echomq_stat(&mut other, "echomq_promote_calls"), 0);
    }
    let card: i64 = q!(&mut con, "ZCARD", schedule);
    assert_eq!(card, 0, "no redirected call wrote anything");

    // valkey-cli: without -c it prints the redirect; with -c it follows it.
    let cli = |options: &[&str], words: &[&str]| {
        let out = Command::new(cli_binary())
            .args(options)
            .args(words)
            .stdin(Stdio::null())
            .output()
            .expect("run valkey-cli");
        assert!(
            out.status.success(),
            "valkey-cli {options:?} {words:?}: {out:?}"
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let other_port = cluster.port(others[0]).to_string();
    let retry_words = ["ECHO.RETRY", schedule, "cli-job", "fixed:60000", "1"];
    let printed = cli(&["-p", &other_port], &retry_words);
    assert!(printed.contains(&moved), "valkey-cli without -c: {printed}");
    let printed = cli(&["-c", "-p", &other_port], &retry_words);
    let fire: i64 = printed
        .parse()
        .unwrap_or_else(|_| panic!("valkey-cli -c ECHO.RETRY printed {printed:?}"));
    let score: i64 = q!(&mut con, "ZSCORE", schedule, "cli-job");
    assert_eq!(score, fire, "valkey-cli -c wrote on the owner");
    let printed = cli(
        &["-c", "-p", &other_port],
        &["ECHO.PROMOTE", schedule, pending],
    );
    assert_eq!(printed, "0", "nothing due: the job fires in a minute");

    // The redis-rs cluster client routes by the first key: one queue on each
    // primary, each retried, promoted and consumed through the client.
    let mut client = cluster.client();
    let mut served_by = BTreeSet::new();
    for i in 0..200 {
        if served_by.len() == 3 {
            break;
        }
        let tag = format!("{{q{i}}}");
        let owner = cluster.owner(cluster.keyslot(&tag));
        if served_by.contains(&owner) {
            continue;
        }
        served_by.insert(owner);
        let (s, p) = (format!("{tag}:schedule"), format!("{tag}:pending"));
        let job = format!("job-of-{tag}");
        let fire = retry(&mut client, &s, &job, "fixed:0", 3);
        let score: i64 = q!(&mut cluster.conn(owner), "ZSCORE", &s, &job);
        assert_eq!(score, fire, "written on the owner of {tag}");
        assert_eq!(promote(&mut client, &s, &p), 1);
        let len: i64 = q!(&mut cluster.conn(owner), "LLEN", &p);
        assert_eq!(len, 1, "pushed on the owner of {tag}");
        let popped: String = q!(&mut client, "RPOP", &p);
        assert_eq!(popped, job);
    }
    assert_eq!(served_by.len(), 3, "queues on all three primaries");
}

#[test]
fn a_hash_tagged_queue_retries_promotes_and_is_consumed_on_its_owner() {
    let cluster = Cluster::start();
    let (schedule, pending) = ("{orders}:schedule", "{orders}:pending");
    let slot = cluster.keyslot(schedule);
    assert_eq!(cluster.keyslot(pending), slot);
    let owner = cluster.owner(slot);
    let mut con = cluster.conn(owner);

    // A consumer already waiting on the owner.
    let consumer_con = cluster.conn(owner);
    let consumer = thread::spawn(move || {
        let mut con = consumer_con;
        let got: Option<(String, String)> = q!(&mut con, "BRPOP", "{orders}:pending", 20);
        got
    });
    wait_blocked_clients(&mut con, 1);

    for (i, attempts) in [(1, 1), (2, 4), (3, 2), (4, 9), (5, 3)] {
        let job = format!("order-{i}");
        retry(&mut con, schedule, &job, "fixed:0", attempts);
    }
    let late = retry(&mut con, schedule, "order-late", "fixed:600000", 1);
    let due: Vec<String> = schedule_in_order(&mut con, schedule)
        .into_iter()
        .map(|(member, _)| member)
        .filter(|m| m != "order-late")
        .collect();
    assert_eq!(due.len(), 5);

    assert_eq!(promote(&mut con, schedule, pending), 5);
    let left = schedule_of(&mut con, schedule);
    assert_eq!(
        left,
        BTreeMap::from([("order-late".to_string(), late.to_string())])
    );

    // First due, first out: the consumer got the earliest, RPOP the rest in order.
    let woke = consumer.join().unwrap();
    assert_eq!(woke, Some((pending.to_string(), due[0].clone())));
    let mut consumed = vec![due[0].clone()];
    while let Some(job) = q!(&mut con, "RPOP", pending) {
        consumed.push(job);
    }
    assert_eq!(consumed, due);
    assert_eq!(echomq_stat(&mut con, "echomq_promoted"), 5);
}

#[test]
fn keys_across_slots_are_refused_with_crossslot_and_nothing_moves() {
    let cluster = Cluster::start();
    let schedule = "{east}:schedule";
    let slot = cluster.keyslot(schedule);
    let owner = cluster.owner(slot);
    // One pending key on the same node in another slot, one on another node.
    let mut same_node = None;
    let mut other_node = None;
    for i in 0..500 {
        if same_node.is_some() && other_node.is_some() {
            break;
        }
        let key = format!("{{west{i}}}:pending");
        let s = cluster.keyslot(&key);
        if s == slot {
            continue;
        }
        if cluster.owner(s) == owner {
            same_node.get_or_insert(key);
        } else {
            other_node.get_or_insert(key);
        }
    }
    let pendings = [same_node.unwrap(), other_node.unwrap()];

    let mut con = cluster.conn(owner);
    for i in 0..3 {
        retry(&mut con, schedule, format!("job-{i}"), "fixed:0", 1);
    }
    let before = schedule_of(&mut con, schedule);
    assert_eq!(before.len(), 3);
    let mut client = cluster.client();
    for pending in &pendings {
        let err = refused(try_promote(&mut con, schedule, pending), "ECHO.PROMOTE");
        assert!(err.starts_with("CROSSSLOT"), "{pending}: {err}");
        let err = refused(
            try_promote(&mut client, schedule, pending),
            "cluster ECHO.PROMOTE",
        );
        assert!(
            err.contains("CROSSSLOT"),
            "cluster client, {pending}: {err}"
        );
        let pending_owner = cluster.owner(cluster.keyslot(pending));
        let exists: i64 = q!(&mut cluster.conn(pending_owner), "EXISTS", pending);
        assert_eq!(exists, 0, "{pending} was not created");
    }
    // A dead set in another slot is a key too: CROSSSLOT, dying or not, and
    // nothing written anywhere.
    for dead in pendings.iter().map(|p| p.replace(":pending", ":dead")) {
        for attempts in [1, 3] {
            let dead_letter = cmd!(
                "ECHO.RETRY",
                schedule,
                "job-0",
                "fixed:0",
                attempts,
                "MAXATTEMPTS",
                3,
                "DEAD",
                &dead
            );
            let err = refused(dead_letter.query::<i64>(&mut con), "ECHO.RETRY DEAD");
            assert!(err.starts_with("CROSSSLOT"), "{dead}: {err}");
            let err = refused(
                dead_letter.query::<i64>(&mut client),
                "cluster ECHO.RETRY DEAD",
            );
            assert!(err.contains("CROSSSLOT"), "cluster client, {dead}: {err}");
            let dead_owner = cluster.owner(cluster.keyslot(&dead));
            let exists: i64 = q!(&mut cluster.conn(dead_owner), "EXISTS", &dead);
            assert_eq!(exists, 0, "{dead} was not created");
        }
    }
    // All three jobs are due, yet none moved: the module never ran.
    assert_eq!(schedule_of(&mut con, schedule), before);
    assert_eq!(echomq_stat(&mut con, "echomq_promote_calls"), 0);
    assert_eq!(echomq_stat(&mut con, "echomq_retries"), 3);
    assert_eq!(echomq_stat(&mut con, "echomq_dead_lettered"), 0);
    // A dead set in the schedule's own slot takes the job.
    let died: i64 = q!(
        &mut client,
        "ECHO.RETRY",
        schedule,
        "job-0",
        "fixed:0",
        3,
        "MAXATTEMPTS",
        3,
        "DEAD",
        "{east}:dead"
    );
    assert_eq!(died, -1);
    let dead: Vec<String> = q!(&mut con, "ZRANGE", "{east}:dead", 0, -1);
    assert_eq!(dead, ["job-0"]);
    // The same schedule with a pending key in its own slot does move them.
    assert_eq!(promote(&mut con, schedule, "{east}:pending"), 2);
}

#[test]
fn a_live_queue_survives_resharding_to_another_primary() {
    let cluster = Cluster::start();
    let (schedule, pending) = ("{live}:schedule", "{live}:pending");
    let slot = cluster.keyslot(schedule);
    let a = cluster.owner(slot);
    let primaries = cluster.primaries();
    let b = *primaries.iter().find(|&&i| i != a).unwrap();
    let (a_id, b_id) = (cluster.id(a), cluster.id(b));
    let (a_addr, b_addr) = (cluster.nodes[a].addr(), cluster.nodes[b].addr());
    let mut on_a = cluster.conn(a);
    let mut on_b = cluster.conn(b);

    // A live queue: jittered future retries, plus work already pending.
    for i in 0..40 {
        retry(&mut on_a, schedule, format!("job-{i}"), FAR, i + 25);
    }
    for i in 0..3 {
        retry(&mut on_a, schedule, format!("due-{i}"), "fixed:0", 1);
    }
    assert_eq!(promote(&mut on_a, schedule, pending), 3);
    let mut expected = schedule_of(&mut on_a, schedule);
    let expected_pending = list_of(&mut on_a, pending);
    assert_eq!(expected.len(), 40);
    assert_eq!(expected_pending.len(), 3);

    let setslot = |con: &mut Connection, args: &[&str]| {
        let _: () = q!(con, "CLUSTER", "SETSLOT", slot, args);
    };
    let migrate = |con: &mut Connection, key: &str| {
        // MIGRATE host port "" db timeout KEYS key: to B, database 0, within 10 s.
        let to_b = ("127.0.0.1", cluster.port(b), "", 0, 10_000);
        let reply: String = q!(con, "MIGRATE", to_b, "KEYS", key);
        assert_eq!(reply, "OK");
    };
    setslot(&mut on_b, &["IMPORTING", &a_id]);
    setslot(&mut on_a, &["MIGRATING", &b_id]);
    // While both keys are still on A, A serves the queue (nothing due).
    assert_eq!(promote(&mut on_a, schedule, pending), 0);

    // Half way: the schedule on B, the pending list still on A.
    migrate(&mut on_a, schedule);
    let err = err!(&mut on_a, "ECHO.PROMOTE", schedule, pending);
    assert!(err.starts_with("TRYAGAIN"), "{err}");
    assert_eq!(
        retry_refused(&mut on_a, schedule),
        format!("ASK {slot} {b_addr}")
    );
    assert_eq!(
        retry_refused(&mut on_b, schedule),
        format!("MOVED {slot} {a_addr}")
    );
    let _: () = q!(&mut on_b, "ASKING");
    let asked = retry(&mut on_b, schedule, "asked", "fixed:3600000", 1);
    expected.insert("asked".into(), asked.to_string());

    migrate(&mut on_a, pending);
    let left: Vec<String> = q!(&mut on_a, "CLUSTER", "GETKEYSINSLOT", slot, 10);
    assert!(left.is_empty(), "{left:?} still on A");
    let third = *primaries.iter().find(|&&i| i != a && i != b).unwrap();
    setslot(&mut on_b, &["NODE", &b_id]);
    setslot(&mut on_a, &["NODE", &b_id]);
    setslot(&mut cluster.conn(third), &["NODE", &b_id]);
    wait_until(
        "all nodes see the slot on B",
        Duration::from_secs(30),
        || {
            cluster.check_stable()?;
            if cluster.owner(slot) == b {
                Ok(())
            } else {
                Err(format!("slot {slot} not yet on {}", cluster.port(b)))
            }
        },
    );

    // The schedule is intact on B, exact scores included, and so is pending.
    assert_eq!(schedule_of(&mut on_b, schedule), expected);
    assert_eq!(list_of(&mut on_b, pending), expected_pending);
    assert_eq!(
        retry_refused(&mut on_a, schedule),
        format!("MOVED {slot} {b_addr}")
    );

    // B runs the queue now.
    let fire = retry(&mut on_b, schedule, "after-move", "fixed:0", 1);
    let score: i64 = q!(&mut on_b, "ZSCORE", schedule, "after-move");
    assert_eq!(score, fire);
    assert_eq!(promote(&mut on_b, schedule, pending), 1);
    let mut now_pending = vec!["after-move".to_string()];
    now_pending.extend(expected_pending.iter().cloned());
    assert_eq!(list_of(&mut on_b, pending), now_pending);
    let oldest: String = q!(&mut on_b, "RPOP", pending);
    assert_eq!(
        &oldest,
        expected_pending.last().unwrap(),
        "oldest work first"
    );

    // A fresh cluster client finds the queue on B.
    let mut client = cluster.client();
    let fire = retry(&mut client, schedule, "via-client", "fixed:1000", 1);
    let score: i64 = q!(&mut on_b, "ZSCORE", schedule, "via-client");
    assert_eq!(score, fire);

    // B's replica holds the same data as B.
    let mut b_replica = cluster.conn(cluster.replica_of(b));
    wait_replica_synced(&mut on_b, &mut b_replica);
    assert_eq!(digest(&mut b_replica), digest(&mut on_b));
}

#[test]
fn acknowledged_retries_survive_the_failover_of_their_primary() {
    let mut cluster = Cluster::start();
    let (schedule, pending) = ("{fo}:schedule", "{fo}:pending");
    let slot = cluster.keyslot(schedule);
    let primary = cluster.owner(slot);
    let replica = cluster.replica_of(primary);
    let replica_addr = cluster.nodes[replica].addr();

    // A writer retries job after job; each counts as acknowledged once the
    // reply came back and WAIT confirmed the replica has it. It runs until
    // the primary dies under it.
    let acked: Arc<Mutex<Vec<(String, i64)>>> = Arc::default();
    let writer = {
        let acked = Arc::clone(&acked);
        let mut con = cluster.conn(primary);
        thread::spawn(move || {
            for i in 0u64.. {
                let job = format!("job-{i}");
                let Ok(fire) = try_retry(&mut con, schedule, &job, FAR, i % 20 + 25) else {
                    return;
                };
                match wait_replicas(&mut con, 5000) {
                    Ok(n) if n >= 1 => acked.lock().unwrap().push((job, fire)),
                    Ok(n) => panic!("WAIT 1 replied {n} with the replica up"),
                    Err(_) => return,
                }
            }
        })
    };
    wait_until(
        "the writer got going",
        Duration::from_secs(20),
        || match acked.lock().unwrap().len() {
            n if n >= 50 => Ok(()),
            n => Err(format!("{n} acknowledged")),
        },
    );
    cluster.nodes[primary].kill();
    writer.join().expect("writer");
    let acked = acked.lock().unwrap().clone();

    // Automatic failover: the replica is elected and the cluster is whole again.
    let logs_on_panic = || cluster.logs();
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut con = cluster.conn(replica);
    while info_field(&mut con, "replication", "role") != "master" {
        assert!(
            Instant::now() < deadline,
            "the replica was not promoted\n{}",
            logs_on_panic()
        );
        sleep(Duration::from_millis(100));
    }
    cluster.wait_stable(Duration::from_secs(30));
    assert_eq!(cluster.owner(slot), replica);
    let role: Vec<Value> = q!(&mut con, "ROLE");
    assert_eq!(role[0], Value::BulkString(b"master".to_vec()));

    // Every acknowledged retry is there, with the very score that was replied.
    let held = schedule_of(&mut con, schedule);
    for (job, fire) in &acked {
        assert_eq!(
            held.get(job),
            Some(&fire.to_string()),
            "{job} (acknowledged at {fire}) after failover"
        );
    }
    // At most the one in flight when the primary died went unacknowledged.
    assert!(held.len() <= acked.len() + 1, "{} held", held.len());

    // The new primary runs the queue; the others redirect to it.
    one_job_through(&mut con, schedule, pending, "after-failover");
    for other in cluster.primaries().into_iter().filter(|&i| i != replica) {
        assert_eq!(
            retry_refused(&mut cluster.conn(other), schedule),
            format!("MOVED {slot} {replica_addr}")
        );
    }
    let mut client = cluster.client();
    let fire = retry(&mut client, schedule, "via-client", "fixed:0", 1);
    assert_eq!(
        schedule_of(&mut con, schedule).get("via-client"),
        Some(&fire.to_string())
    );
    assert_eq!(promote(&mut client, schedule, pending), 1);
}

#[test]
fn replicas_receive_the_effects_not_the_commands() {
    let cluster = Cluster::start();
    let (schedule, pending) = ("{fx}:schedule", "{fx}:pending");
    let slot = cluster.keyslot(schedule);
    let primary = cluster.owner(slot);
    let replica = cluster.replica_of(primary);
    let mut con = cluster.conn(primary);
    let mut rcon = cluster.conn(replica);

    // A burst of jittered retries (some reschedule a job already there),
    // with promotions in between, some of them moving work.
    let policies = [
        "jitter:exponential:1:40",
        "jitter:fixed:20",
        "jitter:jitter:exponential:100:10000",
        "jitter:fixed:0",
    ];
    let mut moved = 0;
    for i in 0..400u64 {
        let job = format!("job-{}", i % 250);
        retry(
            &mut con,
            schedule,
            &job,
            policies[i as usize % 4],
            i % 7 + 1,
        );
        if i % 40 == 39 {
            moved += promote(&mut con, schedule, pending);
            sleep(Duration::from_millis(5));
        }
    }
    sleep(Duration::from_millis(50));
    moved += promote(&mut con, schedule, pending);
    assert!(moved > 0, "some work was promoted");
    let card: i64 = q!(&mut con, "ZCARD", schedule);
    assert!(card > 0, "some work still scheduled");

    let acked = wait_replicas(&mut con, 10_000).expect("WAIT");
    assert!(acked >= 1, "WAIT 1 replied {acked}");
    let primary_digest = digest(&mut con);
    assert_ne!(primary_digest, "0".repeat(40));
    assert_eq!(digest(&mut rcon), primary_digest, "replica == primary");
    let _: () = q!(&mut rcon, "READONLY");
    assert_eq!(
        schedule_of(&mut rcon, schedule),
        schedule_of(&mut con, schedule),
        "same members, same scores"
    );
    assert_eq!(list_of(&mut rcon, pending), list_of(&mut con, pending));

    // The replica ran ZADD/ZREM/LPUSH, never an ECHO.* command.
    let stats = |con: &mut Connection| -> Vec<String> {
        let info: String = q!(con, "INFO", "commandstats");
        info.lines()
            .filter_map(|l| l.strip_prefix("cmdstat_"))
            .filter_map(|l| l.split(':').next())
            // module commands are listed as registered: ECHO.RETRY
            .map(str::to_ascii_lowercase)
            .collect()
    };
    let on_primary = stats(&mut con);
    for name in ["echo.retry", "echo.promote"] {
        assert!(on_primary.iter().any(|n| n == name), "{on_primary:?}");
    }
    let on_replica = stats(&mut rcon);
    assert!(
        !on_replica.iter().any(|n| n.starts_with("echo.")),
        "the replica ran a module command: {on_replica:?}"
    );
    for name in ["zadd", "zrem", "lpush"] {
        assert!(on_replica.iter().any(|n| n == name), "{on_replica:?}");
    }
    assert_eq!(echomq_stat(&mut rcon, "echomq_retries"), 0);
    assert_eq!(echomq_stat(&mut rcon, "echomq_promote_calls"), 0);

    // The read-only ECHO.SPREAD serves reads from the replica, alike.
    let now = server_time_ms(&mut con);
    let spread = |c: &mut Connection| -> Vec<i64> {
        q!(c, "ECHO.SPREAD", schedule, now - 60_000, now + 60_000, 24)
    };
    let on_replica = spread(&mut rcon);
    assert_eq!(on_replica, spread(&mut con));
    assert_eq!(
        on_replica.iter().sum::<i64>(),
        card,
        "every scheduled job counted"
    );
}

/// `ZADD schedule` of `n` jobs named `prefix-i`, due `step_ms` apart from
/// the node's own clock plus `from_ms`: returns the names.
fn schedule_spread(
    con: &mut Connection,
    schedule: &str,
    prefix: &str,
    n: usize,
    from_ms: i64,
    step_ms: i64,
) -> Vec<String> {
    let now_ms = server_time_ms(con);
    let mut zadd = redis::cmd("ZADD");
    zadd.arg(schedule);
    let mut names = Vec::with_capacity(n);
    for i in 0..n {
        let name = format!("{prefix}-{i:04}");
        zadd.arg(now_ms + from_ms + i as i64 * step_ms).arg(&name);
        names.push(name);
    }
    let _: i64 = run(con, &zadd);
    names
}

fn llen_is(con: &mut Connection, key: &str, want: i64) -> Result<(), String> {
    let len: i64 = cmd!("LLEN", key).query(con).map_err(|e| e.to_string())?;
    (len == want)
        .then_some(())
        .ok_or(format!("{key}: {len} of {want}"))
}

/// Ownership and failover: with the same config on every node,
/// each queue is promoted by the primary that owns it and nowhere else; after
/// a failover the new primary promotes.
#[test]
fn auto_promotion_runs_on_each_owner_and_on_the_new_primary_after_failover() {
    let mut cluster = Cluster::start();
    // One queue on each primary.
    let mut queues: Vec<(String, usize)> = Vec::new();
    for i in 0..500 {
        if queues.len() == 3 {
            break;
        }
        let tag = format!("{{auto{i}}}");
        let owner = cluster.owner(cluster.keyslot(&tag));
        if queues.iter().all(|&(_, o)| o != owner) {
            queues.push((tag, owner));
        }
    }
    assert_eq!(queues.len(), 3);
    let pairs: Vec<String> = queues
        .iter()
        .map(|(tag, _)| format!("{tag}:schedule {tag}:pending"))
        .collect();
    configure_everywhere(&cluster, &pairs.join(" "));

    for (tag, owner) in &queues {
        let mut con = cluster.conn(*owner);
        let schedule = format!("{tag}:schedule");
        let pending = format!("{tag}:pending");
        for i in 0..20 {
            retry(
                &mut con,
                &schedule,
                format!("job-{i}"),
                "jitter:fixed:200",
                1,
            );
        }
        wait_until("promoted by the owner", Duration::from_secs(20), || {
            llen_is(&mut con, &pending, 20)
        });
    }
    for i in 0..cluster.nodes.len() {
        let mut con = cluster.conn(i);
        let owns = queues.iter().any(|&(_, o)| o == i);
        let moved = echomq_stat(&mut con, "echomq_auto_promoted");
        assert_eq!(moved, if owns { 20 } else { 0 }, "node {}", cluster.port(i));
        assert_eq!(echomq_stat(&mut con, "echomq_promote_calls"), 0);
        assert_eq!(echomq_stat(&mut con, "echomq_auto_promote_errors"), 0);
    }

    // A pair whose keys hash to different slots cannot move atomically on
    // one node: skipped, counted and logged; the other pairs keep moving.
    let (_, first) = queues[0];
    let mut con = cluster.conn(first);
    let _: () = q!(
        &mut con,
        "CONFIG",
        "SET",
        "echomq.auto-promote",
        format!("{{east}}:schedule {{west}}:pending {}", pairs.join(" "))
    );
    wait_until(
        "the cross-slot pair counted",
        Duration::from_secs(10),
        || match echomq_stat(&mut con, "echomq_auto_promote_errors") {
            0 => Err("no error yet".to_string()),
            _ => Ok(()),
        },
    );
    let log = cluster.nodes[first].log();
    assert!(
        log.contains("'{east}:schedule' '{west}:pending': CROSSSLOT"),
        "{log}"
    );
    let (tag, _) = &queues[0];
    retry(
        &mut con,
        &format!("{tag}:schedule"),
        "beside-crossslot",
        "fixed:0",
        1,
    );
    wait_until(
        "the other pairs still served",
        Duration::from_secs(10),
        || llen_is(&mut con, &format!("{tag}:pending"), 21),
    );
    let _: String = q!(&mut con, "LPOP", format!("{tag}:pending"));
    let _: () = q!(
        &mut con,
        "CONFIG",
        "SET",
        "echomq.auto-promote",
        pairs.join(" ")
    );

    // Fail the first queue's primary over to its replica.
    let (tag, primary) = queues[0].clone();
    let replica = cluster.replica_of(primary);
    let mut rcon = cluster.conn(replica);
    wait_replica_synced(&mut cluster.conn(primary), &mut rcon);
    cluster.nodes[primary].kill();
    let deadline = Instant::now() + Duration::from_secs(40);
    while info_field(&mut rcon, "replication", "role") != "master" {
        assert!(
            Instant::now() < deadline,
            "the replica was not promoted\n{}",
            cluster.logs()
        );
        sleep(Duration::from_millis(100));
    }
    cluster.wait_stable(Duration::from_secs(30));
    assert_eq!(echomq_stat(&mut rcon, "echomq_auto_promoted"), 0);
    let schedule = format!("{tag}:schedule");
    let pending = format!("{tag}:pending");
    retry(&mut rcon, &schedule, "after-failover", "fixed:0", 1);
    wait_until(
        "promoted by the new primary",
        Duration::from_secs(20),
        || llen_is(&mut rcon, &pending, 21),
    );
    let newest: String = q!(&mut rcon, "LINDEX", &pending, 0);
    assert_eq!(newest, "after-failover");
    assert_eq!(echomq_stat(&mut rcon, "echomq_auto_promoted"), 1);
}

/// Resharding: a queue whose jobs fall due every few ms moves to
/// another primary while every node runs the timer. The source stops moving
/// once the slot is migrating, the target does not move while importing, so
/// MIGRATE never finds its target key busy; afterwards the target promotes
/// the rest, and every job ends in pending exactly once.
#[test]
fn resharding_a_queue_while_the_timer_runs_keeps_every_job_once() {
    let cluster = Cluster::start();
    let (schedule, pending) = ("{moving}:schedule", "{moving}:pending");
    let slot = cluster.keyslot(schedule);
    let a = cluster.owner(slot);
    let primaries = cluster.primaries();
    let b = *primaries.iter().find(|&&i| i != a).unwrap();
    let (a_id, b_id) = (cluster.id(a), cluster.id(b));
    let mut on_a = cluster.conn(a);
    let mut on_b = cluster.conn(b);
    configure_everywhere(&cluster, &format!("{schedule} {pending}"));

    // 500 jobs, one due every 10 ms from now: about 5 s of steady work.
    let jobs = schedule_spread(&mut on_a, schedule, "job", 500, 0, 10);
    wait_until("A promotes", Duration::from_secs(10), || {
        let len: i64 = q!(&mut on_a, "LLEN", pending);
        (len >= 20).then_some(()).ok_or(format!("{len} pending"))
    });

    let setslot = |con: &mut Connection, args: &[&str]| {
        let _: () = q!(con, "CLUSTER", "SETSLOT", slot, args);
    };
    let migrate = |con: &mut Connection, key: &str| {
        let to_b = ("127.0.0.1", cluster.port(b), "", 0, 10_000);
        let reply: String = q!(con, "MIGRATE", to_b, "KEYS", key);
        assert_eq!(reply, "OK", "MIGRATE {key}");
    };
    setslot(&mut on_b, &["IMPORTING", &a_id]);
    setslot(&mut on_a, &["MIGRATING", &b_id]);
    // Jobs keep falling due, yet A no longer moves them.
    let card: i64 = q!(&mut on_a, "ZCARD", schedule);
    sleep(Duration::from_millis(300));
    let still: i64 = q!(&mut on_a, "ZCARD", schedule);
    assert_eq!(still, card, "A promoted in a migrating slot");

    migrate(&mut on_a, schedule);
    // B holds the schedule with due jobs but imports the slot: it must not
    // create pending, which MIGRATE is about to bring.
    sleep(Duration::from_millis(300));
    let on_b_keys: i64 = q!(&mut on_b, "CLUSTER", "COUNTKEYSINSLOT", slot);
    assert_eq!(on_b_keys, 1, "B promoted in an importing slot");
    migrate(&mut on_a, pending);

    let third = *primaries.iter().find(|&&i| i != a && i != b).unwrap();
    setslot(&mut on_b, &["NODE", &b_id]);
    setslot(&mut on_a, &["NODE", &b_id]);
    setslot(&mut cluster.conn(third), &["NODE", &b_id]);
    wait_until("the slot is B's", Duration::from_secs(30), || {
        cluster.check_stable()?;
        (cluster.owner(slot) == b)
            .then_some(())
            .ok_or("not yet".to_string())
    });

    wait_until("B promoted the rest", Duration::from_secs(30), || {
        let card: i64 = q!(&mut on_b, "ZCARD", schedule);
        (card == 0).then_some(()).ok_or(format!("{card} left"))
    });
    let got: Vec<String> = q!(&mut on_b, "LRANGE", pending, 0, -1);
    let unique: BTreeSet<&String> = got.iter().collect();
    assert_eq!(got.len(), jobs.len(), "lost or duplicated");
    assert_eq!(unique.len(), jobs.len(), "duplicated");
    let mut oldest_first: Vec<String> = got.iter().rev().cloned().collect();
    oldest_first.dedup();
    assert_eq!(oldest_first, jobs, "first due, first out across the move");
    assert!(echomq_stat(&mut on_b, "echomq_auto_promoted") > 0);
    assert!(echomq_stat(&mut on_a, "echomq_auto_promoted") >= 20);
    let left_on_a: i64 = q!(&mut on_a, "CLUSTER", "COUNTKEYSINSLOT", slot);
    assert_eq!(left_on_a, 0);
}

/// The major version of a Valkey node (0 for another server).
fn valkey_major(con: &mut Connection) -> u32 {
    try_info_field(con, "server", "valkey_version")
        .ok()
        .and_then(|v| v.split('.').next()?.parse().ok())
        .unwrap_or(0)
}

/// Valkey 9's atomic slot migration (`CLUSTER MIGRATESLOTS`) of a live queue,
/// there and back, while the timer promotes: every node with the module
/// declares `handle-atomic-slot-migration`, each migration succeeds, and
/// every job reaches pending exactly once, in fire-time order. The target
/// loads the keys before it owns the slot and must not promote them (a
/// promotion there would duplicate what the source's stream brings).
#[test]
fn an_atomic_slot_migration_moves_a_live_queue_there_and_back() {
    let test = "an_atomic_slot_migration_moves_a_live_queue_there_and_back";
    // On the server under test when it is Valkey 9+, else on a cached one.
    let Some((server, cli)) = versions::valkey_at_least_or_skip(9, test) else {
        return;
    };
    let cluster = Cluster::start_on(&server, &cli);
    let major = valkey_major(&mut cluster.conn(0));
    assert!(major >= 9, "{server} runs Valkey {major}");
    for i in 0..cluster.nodes.len() {
        let modules: String = q!(&mut cluster.conn(i), "INFO", "modules");
        let line = modules
            .lines()
            .find(|l| l.starts_with("module:name=echomq,"))
            .unwrap_or_else(|| panic!("no echomq in INFO modules: {modules}"));
        assert!(line.contains("handle-atomic-slot-migration"), "{line}");
    }
    let (schedule, pending) = ("{atomic}:schedule", "{atomic}:pending");
    let slot = cluster.keyslot(schedule);
    let a = cluster.owner(slot);
    let b = *cluster.primaries().iter().find(|&&i| i != a).unwrap();
    let mut on_a = cluster.conn(a);
    configure_everywhere(&cluster, &format!("{schedule} {pending}"));

    // 800 jobs, one due every 10 ms from now: about 8 s of steady work, so
    // both migrations happen while jobs fall due.
    let jobs = schedule_spread(&mut on_a, schedule, "job", 800, 0, 10);
    wait_until("A promotes", Duration::from_secs(10), || {
        let len: i64 = q!(&mut on_a, "LLEN", pending);
        (len >= 20).then_some(()).ok_or(format!("{len} pending"))
    });

    let mut moves = Vec::new();
    for (from, to) in [(a, b), (b, a)] {
        assert_eq!(cluster.owner(slot), from);
        let started = Instant::now();
        migrate_slot_atomically(&cluster, slot, to);
        moves.push(started.elapsed());
        // The target's timer takes over: it promotes from its next tick.
        let before = echomq_stat(&mut cluster.conn(to), "echomq_auto_promoted");
        let mut on_to = cluster.conn(to);
        wait_until("the new owner promotes", Duration::from_secs(30), || {
            let card: i64 = q!(&mut on_to, "ZCARD", schedule);
            let now = echomq_stat(&mut on_to, "echomq_auto_promoted");
            (card == 0 || now > before)
                .then_some(())
                .ok_or(format!("{card} left, none promoted"))
        });
    }
    eprintln!("MIGRATESLOTS there and back took {moves:?}");

    wait_until("every job promoted", Duration::from_secs(30), || {
        let card: i64 = q!(&mut on_a, "ZCARD", schedule);
        (card == 0).then_some(()).ok_or(format!("{card} left"))
    });
    let got: Vec<String> = q!(&mut on_a, "LRANGE", pending, 0, -1);
    let unique: BTreeSet<&String> = got.iter().collect();
    assert_eq!(unique.len(), got.len(), "duplicated");
    assert_eq!(got.len(), jobs.len(), "lost");
    let oldest_first: Vec<String> = got.iter().rev().cloned().collect();
    assert_eq!(oldest_first, jobs, "first due, first out across both moves");
    let left_on_b: i64 = q!(&mut cluster.conn(b), "CLUSTER", "COUNTKEYSINSLOT", slot);
    assert_eq!(left_on_b, 0);
}

/// A stream queue (`pending` a stream with the group `workers`, the same
/// `echomq.auto-promote` on every node) is promoted by the primary that owns
/// it and nowhere else: its entries (`job <member>`, first due first) are
/// appended on the owner alone, no key appears on another primary, and the
/// owner's replica holds the same entries with the same IDs. (The same
/// queue resharded under the client libraries' workers, on plain
/// connections that lose it: clients/tests/failover.rs.)
#[test]
fn a_stream_queue_is_promoted_by_its_owner_and_nowhere_else() {
    let cluster = Cluster::start();
    let (schedule, pending) = ("{sq}:schedule", "{sq}:pending");
    let slot = cluster.keyslot(schedule);
    let a = cluster.owner(slot);
    let primaries = cluster.primaries();
    let b = *primaries.iter().find(|&&i| i != a).unwrap();
    let third = *primaries.iter().find(|&&i| i != a && i != b).unwrap();
    let mut on_a = cluster.conn(a);
    let _: () = q!(&mut on_a, "XGROUP", "CREATE", pending, "workers", "0", "MKSTREAM");
    configure_everywhere(&cluster, &format!("{schedule} {pending}"));

    // 20 jobs due at once: the owner appends them, in fire-time order.
    let first: Vec<String> = (0..20).map(|i| format!("job-{i}")).collect();
    let now_ms = server_time_ms(&mut on_a);
    let mut zadd = cmd!("ZADD", schedule);
    for (i, job) in first.iter().enumerate() {
        zadd.arg(now_ms + i as i64).arg(job);
    }
    let _: i64 = run(&mut on_a, &zadd);
    wait_until("promoted by the owner", Duration::from_secs(20), || {
        let len: i64 = q!(&mut on_a, "XLEN", pending);
        (len == 20).then_some(()).ok_or(format!("XLEN {len}"))
    });
    let raw: Vec<(String, Vec<String>)> = q!(&mut on_a, "XRANGE", pending, "-", "+");
    let appended: Vec<String> = raw
        .iter()
        .map(|(id, fields)| {
            assert_eq!(fields.len(), 2, "{id}: {fields:?}");
            assert_eq!(fields[0], "job", "{id}: {fields:?}");
            fields[1].clone()
        })
        .collect();
    assert_eq!(appended, first, "entries job <member>, first due first");
    for i in 0..cluster.nodes.len() {
        let mut con = cluster.conn(i);
        let moved = echomq_stat(&mut con, "echomq_auto_promoted");
        assert_eq!(
            moved,
            if i == a { 20 } else { 0 },
            "node {}",
            cluster.port(i)
        );
        assert_eq!(echomq_stat(&mut con, "echomq_auto_promote_errors"), 0);
    }
    for other in [b, third] {
        let keys: i64 = q!(&mut cluster.conn(other), "DBSIZE");
        assert_eq!(keys, 0, "a key appeared on {}", cluster.port(other));
    }
    // The owner's replica holds the entries (the XADDs replicated).
    let mut a_replica = cluster.conn(cluster.replica_of(a));
    wait_replica_synced(&mut on_a, &mut a_replica);
    let _: () = q!(&mut a_replica, "READONLY");
    let on_replica: Vec<(String, Vec<String>)> = q!(&mut a_replica, "XRANGE", pending, "-", "+");
    assert_eq!(on_replica, raw, "same entries, same IDs on the replica");
}

/// `ECHO.HOLD` names the schedule as its key and is flagged a write: a
/// primary that does not own the slot answers MOVED to the owner, and so does
/// the owner's replica (in a cluster a replica redirects writes, also after
/// READONLY, which admits only reads); the cluster client follows the
/// redirect, and the hold is a key in the schedule's slot on the owner,
/// replicated: ECHO.LIMITS shows it there and on the replica (reading with
/// READONLY), so a failover keeps it. A name whose hold key could not share
/// its slot is refused.
#[test]
fn echo_hold_is_routed_to_the_slot_owner_and_replicated() {
    let cluster = Cluster::start();
    let schedule = "{hold}:schedule";
    let slot = cluster.keyslot(schedule);
    let owner = cluster.owner(slot);
    let replica = cluster.replica_of(owner);
    let other = *cluster.primaries().iter().find(|&&i| i != owner).unwrap();
    let at_owner = format!("MOVED {slot} 127.0.0.1:{}", cluster.port(owner));

    let moved = err!(&mut cluster.conn(other), "ECHO.HOLD", schedule, 60_000);
    assert_eq!(moved, at_owner, "a primary that does not own the slot");
    let mut on_replica = cluster.conn(replica);
    let moved = err!(&mut on_replica, "ECHO.HOLD", schedule, 60_000);
    assert_eq!(moved, at_owner, "the owner's replica");
    let _: () = q!(&mut on_replica, "READONLY");
    let moved = err!(&mut on_replica, "ECHO.HOLD", schedule, 60_000);
    assert_eq!(moved, at_owner, "the owner's replica after READONLY");
    let limits = limits_of(&mut cluster.conn(owner), schedule);
    assert_eq!(
        limits.get("held-until-ms"),
        Some(&0),
        "a refused hold took effect: {limits:?}"
    );

    // Through the cluster client: routed to the owner, which replies the end.
    let mut client = cluster.client();
    let now_ms = server_time_ms(&mut cluster.conn(owner));
    let until: i64 = q!(&mut client, "ECHO.HOLD", schedule, 60_000);
    assert!(until >= now_ms + 60_000, "{until} vs {now_ms}");
    let on_owner = limits_of(&mut cluster.conn(owner), schedule);
    assert_eq!(on_owner.get("held-until-ms"), Some(&until), "{on_owner:?}");
    let via_client: Vec<Value> = q!(&mut client, "ECHO.LIMITS", schedule);
    assert_eq!(limits_from(&via_client).get("held-until-ms"), Some(&until));
    // Replicated: the replica, reading its slot, holds the same hold key.
    // (WAIT would not do: it waits for the writes of its own connection.)
    wait_until(
        "the replica holds the hold",
        Duration::from_secs(30),
        || {
            let on_replica_limits = limits_of(&mut on_replica, schedule);
            match on_replica_limits.get("held-until-ms") {
                Some(&held) if held == until => Ok(()),
                _ => Err(format!("{on_replica_limits:?}")),
            }
        },
    );
    let keys: Vec<String> = q!(&mut cluster.conn(owner), "KEYS", "*");
    assert_eq!(keys, vec![format!("{schedule}:echomq-hold")]);
    let e = err!(&mut client, "ECHO.HOLD", "no}tag", 60_000);
    assert_eq!(
        e,
        "ERR a schedule held in a cluster needs a {hash tag} when its name holds a '}'"
    );
    // The hold stops a release on the owner: a due member stays.
    let mut on_owner_con = cluster.conn(owner);
    let _ = retry(&mut on_owner_con, schedule, "job-1", "fixed:0", 1);
    assert_eq!(promote(&mut on_owner_con, schedule, "{hold}:pending"), 0);
    let card: i64 = q!(&mut on_owner_con, "ZCARD", schedule);
    assert_eq!(card, 1, "released while held");
    // Lifted through the client: released at once.
    let lifted: i64 = q!(&mut client, "ECHO.HOLD", schedule, 0);
    assert_eq!(lifted, 0);
    assert_eq!(promote(&mut on_owner_con, schedule, "{hold}:pending"), 1);
}

/// `rate-in-force` of an `ECHO.LIMITS` reply, as the server wrote it.
fn rate_in_force(con: &mut Connection, schedule: &str) -> String {
    let reply: Vec<Value> = q!(con, "ECHO.LIMITS", schedule);
    let at = reply
        .iter()
        .position(|v| *v == Value::BulkString(b"rate-in-force".to_vec()))
        .unwrap_or_else(|| panic!("{reply:?}"));
    match &reply[at + 1] {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        other => format!("{other:?}"),
    }
}

/// `CLUSTER FAILOVER [FORCE]` run by `replica` until the cluster agrees it
/// owns `slot`. A manual failover the replica cannot finish in time (it did
/// not catch up with its primary on a loaded machine) is given up by the
/// server, so the command is sent again, at most five times.
fn take_over(cluster: &Cluster, replica: usize, slot: u16, force: bool) {
    let mut con = cluster.conn(replica);
    for attempt in 1..=5 {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("FAILOVER");
        if force {
            cmd.arg("FORCE");
        }
        let _: () = cmd.query(&mut con).expect("CLUSTER FAILOVER");
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if cluster.check_stable().is_ok() && cluster.owner(slot) == replica {
                return;
            }
            sleep(Duration::from_millis(50));
        }
        eprintln!("CLUSTER FAILOVER attempt {attempt} did not finish; again");
    }
    panic!("the replica did not take over\n{}", cluster.logs());
}

/// A limit's state, a hold and a grouped schedule's rotation (cursor, ring,
/// index, its groups' buckets) are keys in their schedule's slot, so they go
/// where the slot goes: through a CLUSTER FAILOVER, a CLUSTER FAILOVER FORCE
/// back and a legacy migration of the slot to a third primary
/// ([`limits_state_through`]). (The atomic migration of a limited queue
/// under workers: clients/tests/failover.rs.)
#[test]
fn a_limits_state_and_a_hold_go_with_their_slot() {
    let cluster = Cluster::start();
    limits_state_through(
        &cluster,
        &[Switch::Failover, Switch::FailoverForce, Switch::Migrate],
    );
}

/// The same state through Valkey 9's atomic slot migration
/// (`CLUSTER MIGRATESLOTS`), which carries the slot's keys its own way, not
/// by `MIGRATE`.
#[test]
fn a_limits_state_and_a_hold_go_with_an_atomic_slot_migration() {
    let test = "a_limits_state_and_a_hold_go_with_an_atomic_slot_migration";
    let Some((server, cli)) = versions::valkey_at_least_or_skip(9, test) else {
        return;
    };
    let cluster = Cluster::start_on(&server, &cli);
    let major = valkey_major(&mut cluster.conn(0));
    assert!(major >= 9, "{server} runs Valkey {major}");
    limits_state_through(&cluster, &[Switch::MigrateAtomically]);
}

/// How a slot changes owner in [`limits_state_through`].
#[derive(Clone, Copy, Debug)]
enum Switch {
    /// `CLUSTER FAILOVER` by the owner's replica.
    Failover,
    /// `CLUSTER FAILOVER FORCE` by the owner's replica.
    FailoverForce,
    /// `SETSLOT IMPORTING/MIGRATING`, `MIGRATE` of every key, `SETSLOT NODE`
    /// to another primary.
    Migrate,
    /// `CLUSTER MIGRATESLOTS` to another primary (Valkey 9).
    MigrateAtomically,
}

/// Moves `slot` as `how` says; returns its new owner.
fn switch(cluster: &Cluster, slot: u16, how: Switch) -> usize {
    let owner = cluster.owner(slot);
    let other = || *cluster.primaries().iter().find(|&&i| i != owner).unwrap();
    match how {
        Switch::Failover | Switch::FailoverForce => {
            let r = cluster.replica_of(owner);
            take_over(cluster, r, slot, matches!(how, Switch::FailoverForce));
            r
        }
        Switch::Migrate => {
            let to = other();
            migrate_slot(cluster, slot, to);
            to
        }
        Switch::MigrateAtomically => {
            let to = other();
            migrate_slot_atomically(cluster, slot, to);
            to
        }
    }
}

/// A legacy migration of `slot` (every key in one `MIGRATE`) from its owner
/// to the primary `to`, told to every primary.
fn migrate_slot(cluster: &Cluster, slot: u16, to: usize) {
    let from = cluster.owner(slot);
    let (from_id, to_id) = (cluster.id(from), cluster.id(to));
    let (mut on_from, mut on_to) = (cluster.conn(from), cluster.conn(to));
    // Right after a failover the two may not yet see each other as
    // primaries (SETSLOT IMPORTING then answers "Target node is not a
    // master"): wait until each node's own view says so.
    let deadline = Instant::now() + Duration::from_secs(15);
    let sees_primary = |con: &mut Connection, id: &str| {
        cluster_nodes(con)
            .map(|nodes| nodes.iter().any(|n| n.id == id && n.has_flag("master")))
            .unwrap_or(false)
    };
    while !(sees_primary(&mut on_to, &from_id) && sees_primary(&mut on_from, &to_id)) {
        assert!(
            Instant::now() < deadline,
            "the two primaries never saw each other as primaries\n{}",
            cluster.logs()
        );
        sleep(Duration::from_millis(50));
    }
    let _: () = q!(
        &mut on_to,
        "CLUSTER",
        "SETSLOT",
        slot,
        "IMPORTING",
        &from_id
    );
    let _: () = q!(
        &mut on_from,
        "CLUSTER",
        "SETSLOT",
        slot,
        "MIGRATING",
        &to_id
    );
    let keys: Vec<String> = q!(&mut on_from, "CLUSTER", "GETKEYSINSLOT", slot, 1000);
    let target = ("127.0.0.1", cluster.port(to), "", 0, 10_000);
    let reply: String = q!(&mut on_from, "MIGRATE", target, "KEYS", &keys);
    assert_eq!(reply, "OK");
    for primary in cluster.primaries() {
        let _: () = q!(
            &mut cluster.conn(primary),
            "CLUSTER",
            "SETSLOT",
            slot,
            "NODE",
            &to_id
        );
    }
    wait_owner(cluster, slot, to);
}

/// Valkey 9's `CLUSTER MIGRATESLOTS` of `slot` from its owner to `to`.
fn migrate_slot_atomically(cluster: &Cluster, slot: u16, to: usize) {
    cluster.start_atomic_migration(slot, cluster.owner(slot), to);
    wait_owner(cluster, slot, to);
}

fn wait_owner(cluster: &Cluster, slot: u16, to: usize) {
    wait_until("the slot moved", Duration::from_secs(60), || {
        cluster.check_stable()?;
        (cluster.owner(slot) == to)
            .then_some(())
            .ok_or("not yet".to_string())
    });
}

/// ZADDs `n` members `job-00000`.. due 10 s ago.
fn due_now(con: &mut Connection, schedule: &str, n: usize) {
    let now_ms = server_time_ms(con);
    let mut zadd = redis::cmd("ZADD");
    zadd.arg(schedule);
    for i in 0..n {
        zadd.arg(now_ms - 10_000 + i as i64)
            .arg(format!("job-{i:05}"));
    }
    let _: () = zadd.query(con).expect("ZADD");
}

/// A fixed limit of 1/s with its burst of 20 spent (20 s to refill), an
/// adaptive one whose failing windows lowered its rate, a hold of 10
/// minutes and a grouped schedule stopped mid-rotation, then each switch of
/// `switches` in turn: each new owner holds the same state keys (the same
/// values, their TTLs running on from where they were), shows the same rate
/// in force and hold, releases no fresh burst, and its first grouped
/// release is from the group after the cursor.
fn limits_state_through(cluster: &Cluster, switches: &[Switch]) {
    let (fixed, adaptive, held) = ("{lst}:fixed", "{lst}:adaptive", "{lst}:held");
    let pending = "{lst}:pending";
    let slot = cluster.keyslot(fixed);
    let limits = format!("{fixed} 1/s 20 {adaptive} adaptive:1000/s 50");
    for i in 0..cluster.nodes.len() {
        let mut con = cluster.conn(i);
        let _: () = q!(&mut con, "CONFIG", "SET", "echomq.release-limits", &limits);
        let _: () = q!(&mut con, "CONFIG", "SET", "echomq.adaptive-window-ms", 50);
        let _: () = q!(
            &mut con,
            "CONFIG",
            "SET",
            "echomq.group-limits",
            format!("{GROUPED} 1/m 3")
        );
    }
    let mut con = cluster.conn(cluster.owner(slot));
    due_now(&mut con, fixed, 500);
    due_now(&mut con, adaptive, 5000);
    due_now(&mut con, held, 10);
    // Three groups of ten, four released: the rotation stops after `a`.
    for group in ["a", "b", "c"] {
        for i in 0..10 {
            let _: i64 = q!(
                &mut con,
                "ECHO.ADD",
                GROUPED,
                pending,
                format!("{group}-{i}"),
                "GROUP",
                group
            );
        }
    }
    let moved: i64 = q!(&mut con, "ECHO.PROMOTE", GROUPED, pending, "LIMIT", 4);
    assert_eq!(moved, 4);
    assert_eq!(grouped_state(&mut con).cursor.as_deref(), Some("a"));
    assert_eq!(promote(&mut con, fixed, pending), 20, "the burst");
    let burst_spent = Instant::now();
    assert_eq!(promote(&mut con, adaptive, pending), 50);
    for round in 0..3 {
        sleep(Duration::from_millis(60));
        for i in 0..30 {
            let job = format!("failed-{round}-{i}");
            retry(&mut con, adaptive, &job, "fixed:600000", 1);
        }
        promote(&mut con, adaptive, pending);
    }
    sleep(Duration::from_millis(60));
    promote(&mut con, adaptive, pending);
    let rate = rate_in_force(&mut con, adaptive);
    assert!(rate.parse::<f64>().unwrap() < 1000.0, "lowered: {rate}");
    let until: i64 = q!(&mut con, "ECHO.HOLD", held, 600_000);
    let state_keys = [
        format!("{fixed}:echomq-limit"),
        format!("{adaptive}:echomq-limit"),
        format!("{held}:echomq-hold"),
    ];
    let states: Vec<String> = q!(&mut con, "MGET", &state_keys);
    println!("on the first owner: {states:?}");
    let pttls = |con: &mut Connection| -> Vec<i64> {
        let mut pipe = redis::pipe();
        for key in &state_keys {
            pipe.cmd("PTTL").arg(key);
        }
        pipe.query(con).expect("PTTL")
    };

    let check = |owner: usize, what: &str, before: &GroupedState, ttls: &[i64], read: Instant| {
        let mut con = cluster.conn(owner);
        let now: Vec<String> = q!(&mut con, "MGET", &state_keys);
        assert_eq!(now, states, "{what}: the state keys");
        // The same expiry, not a fresh one: at most what ran since it was
        // read less, never more (one clock, one machine).
        let since_ms = read.elapsed().as_millis() as i64;
        let is_now = pttls(&mut con);
        println!("{what}: PTTL {is_now:?} ms, {ttls:?} {since_ms} ms before");
        for ((key, was), is) in state_keys.iter().zip(ttls).zip(is_now) {
            assert!(
                is > 0 && is <= *was && is >= was - since_ms - 100,
                "{what}: PTTL {key} {is}, was {was} {since_ms} ms before"
            );
        }
        assert_eq!(&grouped_state(&mut con), before, "{what}: the groups' keys");
        // The rotation goes on from the cursor that came along.
        let next = before
            .ring
            .iter()
            .find(|g| Some(g.as_str()) > before.cursor.as_deref())
            .or(before.ring.first())
            .cloned();
        let moved: i64 = q!(&mut con, "ECHO.PROMOTE", GROUPED, pending, "LIMIT", 1);
        assert_eq!(moved, 1, "{what}");
        let first: String = q!(&mut con, "LINDEX", pending, 0);
        assert_eq!(
            first.split('-').next(),
            next.as_deref(),
            "{what}: {before:?}"
        );
        // Within one window's change: the window a node counted before it
        // lost the slot is closed, and applied, when the slot comes back.
        let (was, is) = (
            rate.parse::<f64>().unwrap(),
            rate_in_force(&mut con, adaptive),
        );
        let is = is.parse::<f64>().unwrap();
        assert!(
            is == was || is == was + 20.0 || is == was / 2.0,
            "{what}: the rate in force {is}, was {was}"
        );
        let limits = limits_of(&mut con, held);
        assert_eq!(limits.get("held-until-ms"), Some(&until), "{what}");
        assert_eq!(promote(&mut con, held, pending), 0, "{what}: held");
        // 1/s: what the bucket refilled since the burst left, no more.
        let refilled = burst_spent.elapsed().as_secs() as i64 + 1;
        let available = limits_of(&mut con, fixed)["available"];
        assert!(available <= refilled, "{what}: {available} available");
        println!("{what}: {available} of the fixed limit available, {refilled} s after its burst");
    };
    for &how in switches {
        let mut on_owner = cluster.conn(cluster.owner(slot));
        let before = grouped_state(&mut on_owner);
        let (ttls, read) = (pttls(&mut on_owner), Instant::now());
        let owner = switch(cluster, slot, how);
        check(owner, &format!("after {how:?}"), &before, &ttls, read);
    }
}

/// The grouped schedule of [`limits_state_through`].
const GROUPED: &str = "{lst}:grouped";

/// What a grouped schedule's release goes on from: its cursor, its ring, its
/// index and its groups' buckets.
#[derive(Debug, PartialEq)]
struct GroupedState {
    cursor: Option<String>,
    ring: Vec<String>,
    index: Vec<(String, String)>,
    buckets: Vec<Option<String>>,
}

fn grouped_state(con: &mut Connection) -> GroupedState {
    let cursor: Option<String> = q!(con, "GET", format!("{GROUPED}:echomq-gcur"));
    let ring: Vec<String> = q!(con, "ZRANGE", format!("{GROUPED}:echomq-gring"), 0, -1);
    let index: Vec<(String, String)> = q!(
        con,
        "ZRANGE",
        format!("{GROUPED}:echomq-gidx"),
        0,
        -1,
        "WITHSCORES"
    );
    let names: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|g| format!("{GROUPED}:echomq-gtat:{g}"))
        .collect();
    let buckets: Vec<Option<String>> = q!(con, "MGET", &names);
    GroupedState {
        cursor,
        ring,
        index,
        buckets,
    }
}

/// On Valkey 9 with `cluster-databases 2`, one schedule's name in db 0 and
/// in db 1 is two limits: each database has its own `echomq-limit` key, the
/// burst db 0 spent leaves db 1's whole, and after a CLUSTER FAILOVER the
/// new primary goes on from each database's own state.
#[test]
fn two_databases_keep_their_limits_apart() {
    let test = "two_databases_keep_their_limits_apart";
    let Some((server, cli)) = versions::valkey_at_least_or_skip(9, test) else {
        return;
    };
    let cluster = Cluster::start_on_with(&server, &cli, &[("cluster-databases", "2")]);
    let (schedule, pending) = ("{dbs}:schedule", "{dbs}:pending");
    let state = format!("{schedule}:echomq-limit");
    let slot = cluster.keyslot(schedule);
    // 1/m: a token a minute, so within the test each count is exact.
    limit_everywhere(&cluster, &format!("{schedule} 1/m 5"));
    let in_db = |node: usize, db: i64| {
        let mut con = cluster.conn(node);
        let _: () = q!(&mut con, "SELECT", db);
        con
    };
    let a = cluster.owner(slot);
    let (mut db0, mut db1) = (in_db(a, 0), in_db(a, 1));
    due_now(&mut db0, schedule, 20);
    due_now(&mut db1, schedule, 20);
    assert_eq!(promote(&mut db0, schedule, pending), 5, "db 0's burst");
    let spent = Instant::now();
    assert_eq!(
        promote(&mut db0, schedule, pending),
        0,
        "db 0's burst spent"
    );
    let in_db1: i64 = q!(&mut db1, "EXISTS", &state);
    assert_eq!(in_db1, 0, "db 0's release wrote a state into db 1");
    assert_eq!(limits_of(&mut db1, schedule)["available"], 5, "db 1");
    let moved: i64 = q!(&mut db1, "ECHO.PROMOTE", schedule, pending, "LIMIT", 3);
    assert_eq!(moved, 3, "db 1's own burst");
    let states = |db0: &mut Connection, db1: &mut Connection| -> (String, String) {
        let s0: String = q!(db0, "GET", &state);
        let s1: String = q!(db1, "GET", &state);
        (s0, s1)
    };
    let before = states(&mut db0, &mut db1);
    println!("db 0 and db 1: {before:?}");
    assert_ne!(before.0, before.1, "one state for two databases");
    let check = |db0: &mut Connection, db1: &mut Connection, what: &str| {
        let refilled = spent.elapsed().as_secs() as i64 / 60;
        assert_eq!(states(db0, db1), before, "{what}: the state keys");
        let available = |con: &mut Connection| limits_of(con, schedule)["available"];
        assert_eq!(available(db0), refilled, "{what}: db 0");
        assert_eq!(available(db1), (2 + refilled).min(5), "{what}: db 1");
        let queued = |con: &mut Connection| -> i64 { q!(con, "LLEN", pending) };
        assert_eq!((queued(db0), queued(db1)), (5, 3), "{what}: released");
    };
    check(&mut db0, &mut db1, "on the first primary");

    let r = cluster.replica_of(a);
    take_over(&cluster, r, slot, false);
    let (mut db0, mut db1) = (in_db(r, 0), in_db(r, 1));
    check(&mut db0, &mut db1, "after CLUSTER FAILOVER");
    let refilled = spent.elapsed().as_secs() as i64 / 60;
    assert_eq!(promote(&mut db0, schedule, pending), refilled, "db 0");
    assert_eq!(
        promote(&mut db1, schedule, pending),
        (2 + refilled).min(5),
        "db 1"
    );
}

/// A recurring definition released by the timer of whichever node owns its
/// slot, through `how` one after the other: the definition and its armed
/// occurrence are keys, so each new owner goes on from them; no occurrence
/// runs twice, and at most one per switch is skipped (a switch that takes
/// longer than the second it falls in leaves that second's occurrence to
/// the catch-up, which runs the missed stretch once).
fn recurring_through(cluster: &Cluster, switches: &[Switch]) {
    let (schedule, pending, jobs) = ("{rc}:s", "{rc}:p", "{rc}:jobs");
    let slot = cluster.keyslot(schedule);
    configure_everywhere(cluster, &format!("{schedule} {pending}"));
    let mut con = cluster.conn(cluster.owner(slot));
    let _: i64 = q!(
        &mut con,
        "ECHO.REPEAT",
        schedule,
        "sec",
        "every:1000",
        "PAYLOAD",
        jobs,
        "x"
    );
    sleep(Duration::from_millis(2500));
    for &how in switches {
        switch(cluster, slot, how);
        sleep(Duration::from_millis(2500));
    }
    let owner = cluster.owner(slot);
    let mut con = cluster.conn(owner);
    configure_everywhere(cluster, "");
    let runs: Vec<String> = q!(&mut con, "LRANGE", pending, 0, -1);
    let mut nominals: Vec<i64> = runs
        .iter()
        .map(|r| r.strip_prefix("sec@").unwrap().parse().unwrap())
        .collect();
    nominals.sort();
    let unique: BTreeSet<i64> = nominals.iter().copied().collect();
    assert_eq!(unique.len(), nominals.len(), "run twice: {nominals:?}");
    let skipped: i64 = nominals.windows(2).map(|w| (w[1] - w[0]) / 1000 - 1).sum();
    assert!(
        skipped <= switches.len() as i64,
        "{skipped} skipped over {} switches: {nominals:?}",
        switches.len()
    );
    assert!(nominals.len() >= 2 + 2 * switches.len(), "{nominals:?}");
    // One occurrence armed on the owner, with its payload; the definition
    // is there.
    let armed: Vec<String> = q!(&mut con, "ZRANGE", schedule, 0, -1);
    assert_eq!(armed.len(), 1, "{armed:?}");
    let payload: String = q!(&mut con, "HGET", jobs, &armed[0]);
    assert_eq!(payload, "x");
    let listed: Vec<Vec<redis::Value>> = q!(&mut con, "ECHO.REPEATS", schedule);
    assert_eq!(listed.len(), 1);
    eprintln!(
        "{} occurrences, {skipped} skipped, through {switches:?}",
        nominals.len()
    );
}

#[test]
fn a_recurring_definition_goes_on_through_failovers_and_a_migration() {
    let cluster = Cluster::start();
    recurring_through(
        &cluster,
        &[Switch::Failover, Switch::FailoverForce, Switch::Migrate],
    );
}

#[test]
fn a_recurring_definition_goes_on_through_an_atomic_slot_migration() {
    let test = "a_recurring_definition_goes_on_through_an_atomic_slot_migration";
    let Some((server, cli)) = versions::valkey_at_least_or_skip(9, test) else {
        return;
    };
    let cluster = Cluster::start_on(&server, &cli);
    recurring_through(&cluster, &[Switch::MigrateAtomically]);
}

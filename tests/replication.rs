//! Effects, never commands: replicas and AOF replays hold the primary's exact
//! data without the module, because only ZADD/ZREM/LPUSH ever leave it.

mod common;

use common::*;

/// A mixed workload: jittered and plain retries, some inside MULTI, some
/// conditional (NX, XX, GT, LT) and some dead-lettered, and promotions with
/// and without LIMIT.
fn mixed_workload(con: &mut Connection, rounds: usize) {
    let policies = [
        "jitter:exponential:1:50",
        "fixed:0",
        "jitter:fixed:20",
        "exponential:1:8",
        "jitter:jitter:fixed:30",
        "equal-jitter:exponential:1:40",
        "jitter:equal-jitter:fixed:25",
    ];
    let conditions: [&[&str]; 8] = [
        &["NX"],
        &["XX"],
        &["GT"],
        &["LT"],
        &["XX", "GT"],
        &["lt", "xx"],
        &["MAXATTEMPTS", "4", "DEAD", "{q1}:dead"],
        &["DEAD", "{q1}:dead", "GT", "maxattempts", "3"],
    ];
    for round in 0..rounds {
        let mut pipe = redis::pipe();
        for i in 0..20 {
            let policy = policies[(round + i) % policies.len()];
            let job = format!("job-{}", (round * 7 + i * 13) % 997);
            let schedule = format!("{{q{}}}:s", i % 3);
            let retry = cmd!("ECHO.RETRY", schedule, job, policy, 1 + (i % 6));
            pipe.add_command(retry).ignore();
        }
        let _: () = pipe.query(con).expect("retries");
        // Conditional and dead-lettering retries on {q1}: jobs reused across
        // rounds, so every condition meets both present and missing jobs.
        let mut pipe = redis::pipe();
        for i in 0..12 {
            let policy = policies[(round + i) % policies.len()];
            let job = format!("job-{}", (round * 5 + i * 11) % 97);
            let retry = cmd!(
                "ECHO.RETRY",
                "{q1}:s",
                job,
                policy,
                1 + (round + i) % 5,
                conditions[(round * 3 + i) % conditions.len()]
            );
            pipe.add_command(retry).ignore();
        }
        let _: () = pipe.query(con).expect("conditional retries");
        let mut multi = redis::pipe();
        multi.atomic();
        for i in 0..10 {
            let job = format!("cohort-{round}-{i}");
            let retry = cmd!("ECHO.RETRY", "{q0}:s", job, "jitter:fixed:5", 3);
            multi.add_command(retry).ignore();
        }
        let promote = cmd!("ECHO.PROMOTE", "{q0}:s", "{q0}:p");
        multi.add_command(promote).ignore();
        let _: () = multi.query(con).expect("MULTI");
        for q in 0..3 {
            let mut cmd = redis::cmd("ECHO.PROMOTE");
            cmd.arg(format!("{{q{q}}}:s")).arg(format!("{{q{q}}}:p"));
            if round % 2 == 0 {
                cmd.arg("LIMIT").arg(7);
            }
            let _: i64 = cmd.query(con).expect("promote");
        }
    }
}

#[test]
fn a_replica_without_the_module_ends_identical() {
    let (_primary, replica, mut p, mut r) = primary_and_replica(Options::without_module());
    // Counted before the workload: a client library's own handshake (CLIENT
    // SETINFO, unknown to Redis 7.0) can add errors that are not the stream's.
    let errors_before = info_field(&mut r, "stats", "total_error_replies");

    mixed_workload(&mut p, 150); // 150 * (20 + 12 + 10) = 6300 retries, 600 promotes
    wait_replica_synced(&mut p, &mut r);

    let dead: i64 = q!(&mut p, "ZCARD", "{q1}:dead");
    assert!(dead > 0, "the workload dead-lettered something");
    let dead_lettered: u64 = info_field(&mut p, "echomq", "echomq_dead_lettered")
        .parse()
        .unwrap();
    assert!(dead_lettered >= dead as u64);

    let moved: i64 = (0..3)
        .map(|q| -> i64 { q!(&mut p, "LLEN", format!("{{q{q}}}:p")) })
        .sum();
    assert!(moved > 0, "the workload promoted something");
    let scheduled: i64 = q!(&mut p, "ZCARD", "{q1}:s");
    assert!(scheduled > 0, "and left something scheduled");
    assert_eq!(
        digest(&mut p),
        digest(&mut r),
        "replica digest differs from the primary's"
    );

    let stats: String = q!(&mut r, "INFO", "commandstats");
    assert!(!stats.to_lowercase().contains("cmdstat_echo."), "{stats}");
    for native in ["cmdstat_zadd:", "cmdstat_zrem:", "cmdstat_lpush:"] {
        assert!(
            stats.contains(native),
            "replica never ran {native}\n{stats}"
        );
    }
    let errors = info_field(&mut r, "stats", "total_error_replies");
    let errorstats: String = q!(&mut r, "INFO", "errorstats");
    assert_eq!(
        errors,
        errors_before,
        "the replica hit errors replaying the stream: {errorstats}\n{}",
        replica.log()
    );
    let log = replica.log();
    assert!(!log.contains("unknown command"), "{log}");
}

#[test]
fn a_replica_with_the_module_ends_identical_too() {
    let (_primary, _replica, mut p, mut r) = primary_and_replica(Options::default());
    mixed_workload(&mut p, 40);
    wait_replica_synced(&mut p, &mut r);
    assert_eq!(digest(&mut p), digest(&mut r));
    let stats: String = q!(&mut r, "INFO", "commandstats");
    assert!(!stats.to_lowercase().contains("cmdstat_echo."), "{stats}");
}

#[test]
fn aof_reload_restart_and_replay_without_the_module_keep_the_data() {
    let dir = TempDir::new("aof");
    let aof = Options::aof_replay();
    let mut server = Server::start_in(aof.clone(), &dir.0);
    let mut con = server.conn();
    mixed_workload(&mut con, 40);
    let want = digest(&mut con);
    assert_ne!(want, "0000000000000000000000000000000000000000");

    // DEBUG RELOAD: save and load an RDB in place.
    let _: () = q!(&mut con, "DEBUG", "RELOAD");
    assert_eq!(digest(&mut con), want, "after DEBUG RELOAD");
    // DEBUG LOADAOF: flush and replay the AOF in place.
    let _: () = q!(&mut con, "DEBUG", "LOADAOF");
    assert_eq!(digest(&mut con), want, "after DEBUG LOADAOF");

    // The AOF holds only native commands.
    let mut aof_text = Vec::new();
    for entry in walk(&dir.0.join("appendonlydir")) {
        aof_text.extend(std::fs::read(entry).unwrap());
    }
    let aof_text = String::from_utf8_lossy(&aof_text).to_lowercase();
    assert!(aof_text.contains("zadd"), "AOF has the ZADDs");
    assert!(
        !aof_text.contains("echo."),
        "AOF must not hold module commands"
    );

    // A restart from the AOF.
    server.shutdown();
    let mut server = Server::start_in(aof.clone(), &dir.0);
    assert_eq!(
        digest(&mut server.conn()),
        want,
        "after a restart from the AOF"
    );
    server.shutdown();

    // A server without the module replays the same AOF.
    let mut bare = aof;
    bare.load_module = false;
    let server = Server::start_in(bare, &dir.0);
    let mut con = server.conn();
    assert_eq!(
        digest(&mut con),
        want,
        "replayed by a server without the module"
    );
    let modules = module_names(&mut con);
    assert!(!modules.iter().any(|m| m == "echomq"), "{modules:?}");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            files.push(path);
        }
    }
    files
}

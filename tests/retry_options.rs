//! ECHO.RETRY's options against a real server: dead-lettering after the last
//! attempt (`MAXATTEMPTS n DEAD dead`), ZADD's conditions (`NX`, `XX`, `GT`,
//! `LT`), and equal jitter.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;

/// `ECHO.RETRY schedule job policy attempts options...`: the integer reply.
fn retry_with(
    con: &mut Connection,
    schedule: &str,
    job: &str,
    policy: &str,
    attempts: u64,
    options: &[&str],
) -> i64 {
    q!(con, "ECHO.RETRY", schedule, job, policy, attempts, options)
}

fn score(con: &mut Connection, key: &str, member: &str) -> Option<f64> {
    q!(con, "ZSCORE", key, member)
}

fn counter(con: &mut Connection, name: &str) -> u64 {
    info_field(con, "echomq", name)
        .parse()
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn a_job_dies_at_max_attempts_and_only_then() {
    let server = Server::start();
    let mut con = server.conn();
    let dead_opts = ["MAXATTEMPTS", "3", "DEAD", "d"];
    // attempts 1 and 2 of 3 schedule as usual, and the dead set stays missing
    for attempts in 1..=2 {
        let t0 = server_time_ms(&mut con);
        let fire = retry_with(&mut con, "s", "job", "fixed:60000", attempts, &dead_opts);
        let t1 = server_time_ms(&mut con);
        assert!(
            (t0 + 60_000..=t1 + 60_000).contains(&fire),
            "{t0} {fire} {t1}"
        );
        assert_eq!(score(&mut con, "s", "job"), Some(fire as f64));
        let dead: i64 = q!(&mut con, "EXISTS", "d");
        assert_eq!(dead, 0, "attempt {attempts} must not dead-letter");
    }
    assert_eq!(counter(&mut con, "echomq_dead_lettered"), 0);

    // attempt 3 of 3: the job leaves the schedule (emptied, so deleted) and
    // enters the dead set at the server's time of death
    let t0 = server_time_ms(&mut con);
    let reply = retry_with(&mut con, "s", "job", "fixed:60000", 3, &dead_opts);
    let t1 = server_time_ms(&mut con);
    assert_eq!(reply, -1);
    let schedule_exists: i64 = q!(&mut con, "EXISTS", "s");
    assert_eq!(schedule_exists, 0, "an emptied schedule is deleted");
    let died = score(&mut con, "d", "job").expect("job in the dead set") as i64;
    assert!((t0..=t1).contains(&died), "{t0} {died} {t1}");
    assert_eq!(counter(&mut con, "echomq_dead_lettered"), 1);

    // attempts past n die too, in any order and case of the options; a job
    // already dead gets the new time of death; other jobs stay scheduled
    retry(&mut con, "s", "other", "fixed:60000", 1);
    retry(&mut con, "s", "job", "fixed:60000", 1);
    std::thread::sleep(Duration::from_millis(5));
    for options in [
        &["dead", "d", "maxattempts", "3"][..],
        &["Dead", "d", "NX", "MaxAttempts", "2"],
        &["xx", "GT", "MAXATTEMPTS", "1", "DEAD", "d"],
    ] {
        let reply = retry_with(&mut con, "s", "job", "jitter:fixed:60000", 7, options);
        assert_eq!(reply, -1, "{options:?}");
    }
    let again = score(&mut con, "d", "job").unwrap() as i64;
    assert!(again > died, "time of death updated: {died} -> {again}");
    let scheduled: Vec<String> = q!(&mut con, "ZRANGE", "s", 0, -1);
    assert_eq!(scheduled, ["other"]);
    let dead: i64 = q!(&mut con, "ZCARD", "d");
    assert_eq!(dead, 1);
    assert_eq!(counter(&mut con, "echomq_dead_lettered"), 4);

    // a job never scheduled dies straight away: the schedule is untouched
    assert_eq!(
        retry_with(
            &mut con,
            "s2",
            "fresh",
            "fixed:1",
            1,
            &["MAXATTEMPTS", "1", "DEAD", "d"]
        ),
        -1
    );
    let s2: i64 = q!(&mut con, "EXISTS", "s2");
    assert_eq!(s2, 0);
    assert!(score(&mut con, "d", "fresh").is_some());

    // dead-lettering is not a retry: echomq_retries counts the 4 scheduling calls only
    assert_eq!(counter(&mut con, "echomq_retries"), 4);
}

#[test]
fn dead_lettering_sends_the_events_of_zrem_then_zadd() {
    let server = Server::start();
    let native = events(&server, "n:", |con| {
        let _: () = q!(con, "ZADD", "n:s", 9e15, "job");
        let _: () = q!(con, "ZREM", "n:s", "job");
        let _: () = q!(con, "ZADD", "n:d", 1, "job");
    });
    let module = events(&server, "m:", |con| {
        let _: () = q!(con, "ZADD", "m:s", 9e15, "job");
        let reply = retry_with(
            con,
            "m:s",
            "job",
            "fixed:1",
            5,
            &["MAXATTEMPTS", "5", "DEAD", "m:d"],
        );
        assert_eq!(reply, -1);
    });
    // zadd (new), zrem, del, zadd (new) on the dead set; keyspace and keyevent
    assert!(native.iter().any(|e| e.ends_with("del")), "{native:?}");
    assert_eq!(native.len(), 12, "{native:?}");
    assert_eq!(module, native);
}

#[test]
fn the_dead_key_is_type_checked_before_any_write() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = q!(&mut con, "SET", "str", "x");
    let _: () = q!(&mut con, "ZADD", "s", 5, "job");
    let before = digest(&mut con);
    // dying or not, a dead key of another type is refused and nothing moves
    for attempts in [1u64, 3, 9] {
        for job in ["job", "new"] {
            let e = err!(
                &mut con,
                "ECHO.RETRY",
                "s",
                job,
                "fixed:1",
                attempts,
                "MAXATTEMPTS",
                3,
                "DEAD",
                "str"
            );
            assert!(e.starts_with("WRONGTYPE"), "{e}");
            assert_eq!(digest(&mut con), before, "attempts {attempts} {job}");
        }
    }
    // a missing schedule with a wrong dead key: nothing created
    let e = err!(
        &mut con,
        "ECHO.RETRY",
        "missing",
        "job",
        "fixed:1",
        1,
        "MAXATTEMPTS",
        3,
        "DEAD",
        "str"
    );
    assert!(e.starts_with("WRONGTYPE"), "{e}");
    assert_eq!(digest(&mut con), before);
    let e = err!(
        &mut con,
        "ECHO.RETRY",
        "s",
        "job",
        "fixed:1",
        1,
        "MAXATTEMPTS",
        3,
        "DEAD",
        "s"
    );
    assert_eq!(e, "ERR schedule and dead must be different keys");
    assert_eq!(digest(&mut con), before);
}

#[test]
fn nx_xx_gt_lt_each_keep_or_write() {
    let server = Server::start();
    let mut con = server.conn();
    let now = server_time_ms(&mut con);
    let near = "fixed:1000";
    let far = "fixed:1000000";

    // NX: written for a new job, kept (and replied) for one already there
    let written = retry_with(&mut con, "s", "a", near, 1, &["NX"]);
    assert!(written >= now + 1000);
    let kept = retry_with(&mut con, "s", "a", far, 1, &["nx"]);
    assert_eq!(kept, written);
    assert_eq!(score(&mut con, "s", "a"), Some(written as f64));

    // XX: -2 for a job (or a schedule) that is not there, nothing created
    assert_eq!(retry_with(&mut con, "s", "b", near, 1, &["XX"]), -2);
    assert_eq!(score(&mut con, "s", "b"), None);
    assert_eq!(retry_with(&mut con, "nothing", "b", near, 1, &["XX"]), -2);
    let exists: i64 = q!(&mut con, "EXISTS", "nothing");
    assert_eq!(exists, 0);
    // ... and written for a job that is
    let moved = retry_with(&mut con, "s", "a", far, 1, &["XX"]);
    assert!(moved >= now + 1_000_000);
    assert_eq!(score(&mut con, "s", "a"), Some(moved as f64));

    // GT: a later fire time replaces, an earlier one is kept; a new job is added
    let kept = retry_with(&mut con, "s", "a", near, 1, &["GT"]);
    assert_eq!(kept, moved);
    let later = retry_with(&mut con, "s", "a", "fixed:2000000", 1, &["GT"]);
    assert!(later > moved);
    assert_eq!(score(&mut con, "s", "a"), Some(later as f64));
    let added = retry_with(&mut con, "s", "c", near, 1, &["GT"]);
    assert_eq!(score(&mut con, "s", "c"), Some(added as f64));

    // LT: an earlier fire time replaces, a later one is kept
    let kept = retry_with(&mut con, "s", "a", "fixed:3000000", 1, &["LT"]);
    assert_eq!(kept, later);
    let earlier = retry_with(&mut con, "s", "a", near, 1, &["lt"]);
    assert!(earlier < later);
    assert_eq!(score(&mut con, "s", "a"), Some(earlier as f64));

    // XX with GT / LT: both conditions apply
    assert_eq!(retry_with(&mut con, "s", "zz", far, 1, &["XX", "GT"]), -2);
    assert_eq!(retry_with(&mut con, "s", "zz", near, 1, &["LT", "XX"]), -2);
    assert_eq!(score(&mut con, "s", "zz"), None);
    let raised = retry_with(&mut con, "s", "a", far, 1, &["XX", "GT"]);
    assert!(raised > earlier);

    // a kept score written by hand as a fraction is replied rounded down
    let _: () = q!(&mut con, "ZADD", "s", "1234.75", "frac");
    assert_eq!(retry_with(&mut con, "s", "frac", near, 1, &["NX"]), 1234);
    assert_eq!(
        retry_with(&mut con, "s", "frac", "fixed:0", 1, &["LT"]),
        1234
    );
    let _: () = q!(&mut con, "ZADD", "s", "+inf", "inf");
    assert_eq!(retry_with(&mut con, "s", "inf", near, 1, &["GT"]), i64::MAX);

    // MAXATTEMPTS below the limit behaves exactly as without it
    let _: () = q!(&mut con, "ZADD", "s", 5, "m");
    assert_eq!(
        retry_with(
            &mut con,
            "s",
            "m",
            near,
            1,
            &["NX", "MAXATTEMPTS", "2", "DEAD", "d"]
        ),
        5
    );
    assert_eq!(
        retry_with(
            &mut con,
            "s",
            "nope",
            near,
            1,
            &["XX", "MAXATTEMPTS", "2", "DEAD", "d"]
        ),
        -2
    );
    let dead: i64 = q!(&mut con, "EXISTS", "d");
    assert_eq!(dead, 0);
    // every one of the 18 calls above counts as a retry
    assert_eq!(counter(&mut con, "echomq_retries"), 18);
}

#[test]
fn a_kept_score_fails_no_watch_sends_no_event_and_replicates_nothing() {
    let (primary, _replica, mut p, mut r) = primary_and_replica(Options::without_module());
    // no replica pings moving the offset while we look at it
    let _: () = q!(&mut p, "CONFIG", "SET", "repl-ping-replica-period", 3600);
    let _: () = q!(
        &mut p,
        "ZADD",
        "s",
        10_000_000_000_000i64,
        "late",
        5,
        "early"
    );
    wait_replica_synced(&mut p, &mut r);
    // each keeps the score it finds (now + 1000 is after 5 and before 10^13)
    let kept_calls: [(&str, &[&str], i64); 4] = [
        ("early", &["NX"], 5),
        ("missing", &["XX"], -2),
        ("late", &["GT"], 10_000_000_000_000),
        ("early", &["LT"], 5),
    ];
    let offset = |con: &mut Connection| info_field(con, "replication", "master_repl_offset");
    let offset_before = offset(&mut p);
    for (job, opts, want) in kept_calls {
        let mut watcher = primary.conn();
        let _: () = q!(&mut watcher, "WATCH", "s");
        assert_eq!(
            retry_with(&mut p, "s", job, "fixed:1000", 1, opts),
            want,
            "{job} {opts:?}"
        );
        let _: () = q!(&mut watcher, "MULTI");
        let _: () = q!(&mut watcher, "PING");
        let exec: Option<Vec<String>> = q!(&mut watcher, "EXEC");
        assert!(
            exec.is_some(),
            "{job} {opts:?}: a kept score must not fail WATCH"
        );
    }
    assert_eq!(
        offset(&mut p),
        offset_before,
        "a kept score replicates nothing"
    );
    // (events() publishes a marker, which itself replicates: checked after)
    let seen = events(&primary, "", |con| {
        for (job, opts, want) in kept_calls {
            assert_eq!(retry_with(con, "s", job, "fixed:1000", 1, opts), want);
        }
    });
    assert_eq!(seen, Vec::<String>::new(), "a kept score sends no event");

    // the control: a written score fails WATCH, sends events and replicates
    let mut watcher = primary.conn();
    let _: () = q!(&mut watcher, "WATCH", "s");
    let seen = events(&primary, "", |con| {
        retry_with(con, "s", "early", "fixed:1000", 1, &["GT"]);
    });
    assert_eq!(seen.len(), 2, "{seen:?}");
    let _: () = q!(&mut watcher, "MULTI");
    let _: () = q!(&mut watcher, "PING");
    let exec: Option<Vec<String>> = q!(&mut watcher, "EXEC");
    assert!(exec.is_none(), "a written score fails WATCH");
    wait_replica_synced(&mut p, &mut r);
    assert_eq!(digest(&mut p), digest(&mut r));
}

#[test]
fn equal_jitter_spans_half_to_all_of_the_delay() {
    let server = Server::start();
    let mut con = server.conn();
    let draws = |con: &mut Connection, policy: &str, n: usize| -> Vec<i64> {
        let mut pipe = redis::pipe();
        for _ in 0..n {
            pipe.add_command(cmd!("ECHO.DELAY", policy, 1));
        }
        pipe.query(con).unwrap()
    };
    // exact ranges for d = 0, 1, 2, 3, and nesting both ways
    for (policy, want) in [
        ("equal-jitter:fixed:0", 0..=0),
        ("equal-jitter:fixed:1", 1..=1),
        ("equal-jitter:fixed:2", 1..=2),
        ("EQUAL-JITTER:fixed:3", 2..=3),
        ("equal-jitter:equal-jitter:fixed:4", 1..=4),
        ("jitter:equal-jitter:fixed:4", 0..=4),
        ("equal-jitter:jitter:fixed:4", 0..=4),
    ] {
        let seen: BTreeSet<i64> = draws(&mut con, policy, 2000).into_iter().collect();
        let want: BTreeSet<i64> = want.collect();
        assert_eq!(seen, want, "{policy}");
    }

    // uniform over 500..=1000: chi-square over 501 values, 100 draws each.
    // 500 degrees of freedom: the 0.99999 quantile is about 643.
    let n = 50_100;
    let mut counts = vec![0u64; 501];
    for d in draws(&mut con, "equal-jitter:fixed:1000", n) {
        assert!((500..=1000).contains(&d), "{d}");
        counts[(d - 500) as usize] += 1;
    }
    assert!(counts[0] > 0 && counts[500] > 0, "both ends reached");
    let expected = n as f64 / 501.0;
    let chi2: f64 = counts
        .iter()
        .map(|&c| (c as f64 - expected).powi(2) / expected)
        .sum();
    assert!(
        chi2 < 643.0,
        "chi-square {chi2:.1} over 500 degrees of freedom"
    );

    // ECHO.RETRY draws the same way and counts as jittered
    let before = counter(&mut con, "echomq_retries_jittered");
    for i in 0..200 {
        let t0 = server_time_ms(&mut con);
        let fire = retry(
            &mut con,
            "s",
            format!("j{i}"),
            "equal-jitter:exponential:100:10000",
            3,
        );
        let t1 = server_time_ms(&mut con);
        assert!((t0 + 200..=t1 + 400).contains(&fire), "{t0} {fire} {t1}");
    }
    assert_eq!(counter(&mut con, "echomq_retries_jittered"), before + 200);
}

#[test]
fn command_getkeys_names_the_dead_key_only_with_the_option() {
    let server = Server::start();
    let mut con = server.conn();
    let keys = |con: &mut Connection, args: &[&str]| -> Vec<String> {
        q!(con, "COMMAND", "GETKEYS", "ECHO.RETRY", args)
    };
    assert_eq!(keys(&mut con, &["s", "j", "fixed:1", "1"]), ["s"]);
    assert_eq!(keys(&mut con, &["s", "j", "fixed:1", "1", "NX"]), ["s"]);
    assert_eq!(
        keys(
            &mut con,
            &["s", "j", "fixed:1", "1", "MAXATTEMPTS", "3", "DEAD", "d"]
        ),
        ["s", "d"]
    );
    assert_eq!(
        keys(
            &mut con,
            &[
                "s",
                "j",
                "fixed:1",
                "1",
                "dead",
                "d",
                "GT",
                "maxattempts",
                "3"
            ]
        ),
        ["s", "d"]
    );
    // a job or policy spelled DEAD is not the keyword
    assert_eq!(keys(&mut con, &["s", "DEAD", "DEAD", "1", "NX"]), ["s"]);
    assert_eq!(
        keys(
            &mut con,
            &[
                "s",
                "DEAD",
                "fixed:1",
                "1",
                "DEAD",
                "DEAD",
                "MAXATTEMPTS",
                "2"
            ]
        ),
        ["s", "DEAD"]
    );
}

#[test]
fn acl_key_patterns_apply_to_the_dead_key() {
    let server = Server::start();
    let mut admin = server.conn();
    let _: () = q!(&mut admin, "ACL", "SETUSER", "worker", "on", "nopass", "~q:*", "+@all");
    let mut con = server.conn();
    let _: () = q!(&mut con, "AUTH", "worker", "any");
    let opts = |dead: &str| ["MAXATTEMPTS", "1", "DEAD", dead].map(String::from);
    let e = err!(
        &mut con,
        "ECHO.RETRY",
        "q:s",
        "j",
        "fixed:1",
        1,
        &opts("elsewhere")
    );
    assert!(e.starts_with("NOPERM"), "{e}");
    let keys: i64 = q!(&mut admin, "DBSIZE");
    assert_eq!(keys, 0, "a refused call writes nothing");
    let died: i64 = q!(
        &mut con,
        "ECHO.RETRY",
        "q:s",
        "j",
        "fixed:1",
        1,
        &opts("q:dead")
    );
    assert_eq!(died, -1);
}

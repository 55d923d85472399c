//! ECHO.ADD: a run due now of a schedule with no limit and no hold goes
//! straight into pending with the producer's own write (LPUSH, or XADD into
//! a stream); any other run goes into the schedule as ECHO.SCHEDULE writes
//! it, so the release limit and the hold govern it. Types are checked before
//! any write, and only the effects (LPUSH, XADD, ZADD) are replicated.

mod common;

use std::time::Duration;

use common::*;

/// `ECHO.ADD` with `args` after the command name: its integer reply.
fn add(con: &mut Connection, args: &[&str]) -> i64 {
    q!(con, "ECHO.ADD", args)
}

fn list(con: &mut Connection, key: &str) -> Vec<String> {
    q!(con, "LRANGE", key, 0, -1)
}

fn score(con: &mut Connection, schedule: &str, job: &str) -> Option<i64> {
    q!(con, "ZSCORE", schedule, job)
}

fn stat(con: &mut Connection, field: &str) -> u64 {
    info_field(con, "echomq", &format!("echomq_{field}"))
        .parse()
        .unwrap_or_else(|e| panic!("echomq_{field}: {e}"))
}

fn key_type(con: &mut Connection, key: &str) -> String {
    q!(con, "TYPE", key)
}

#[test]
fn an_ungoverned_run_due_now_is_lpushed_into_a_list_as_a_producer_would() {
    let server = Server::start();
    let mut con = server.conn();
    // A missing pending becomes a list, as ECHO.PROMOTE makes it.
    assert_eq!(add(&mut con, &["{m}:schedule", "{m}:pending", "job-1"]), 1);
    assert_eq!(key_type(&mut con, "{m}:pending"), "list");
    // At the head, so the oldest pending work is taken first by RPOP;
    // DELAY 0 is the same as no DELAY.
    assert_eq!(
        add(
            &mut con,
            &["{m}:schedule", "{m}:pending", "job-2", "DELAY", "0"]
        ),
        1
    );
    assert_eq!(
        add(
            &mut con,
            &["{m}:schedule", "{m}:pending", "job-3", "delay", "0"]
        ),
        1
    );
    assert_eq!(list(&mut con, "{m}:pending"), ["job-3", "job-2", "job-1"]);
    let schedule_exists: i64 = q!(&mut con, "EXISTS", "{m}:schedule");
    assert_eq!(schedule_exists, 0, "the schedule is not touched");
    let first: String = q!(&mut con, "RPOP", "{m}:pending");
    assert_eq!(first, "job-1");

    // Exactly a producer's LPUSH: the same value and the same events.
    let _: () = q!(&mut con, "LPUSH", "{n}:pending", "old");
    let _: () = q!(&mut con, "LPUSH", "{a}:pending", "old");
    let native = events(&server, "{n}", |con| {
        let _: i64 = q!(con, "LPUSH", "{n}:pending", "job");
        let _: i64 = q!(con, "LPUSH", "{n}:fresh", "job");
    });
    let module = events(&server, "{a}", |con| {
        assert_eq!(add(con, &["{a}:schedule", "{a}:pending", "job"]), 1);
        assert_eq!(add(con, &["{a}:schedule", "{a}:fresh", "job"]), 1);
    });
    assert!(native.iter().any(|e| e.ends_with("lpush")), "{native:?}");
    assert_eq!(module, native);
    for key in ["pending", "fresh"] {
        let want: Vec<String> = q!(&mut con, "DEBUG", "DIGEST-VALUE", format!("{{n}}:{key}"));
        let got: Vec<String> = q!(&mut con, "DEBUG", "DIGEST-VALUE", format!("{{a}}:{key}"));
        assert_eq!(got, want, "{key}");
    }
    assert_eq!(stat(&mut con, "added_direct"), 5);
    assert_eq!(stat(&mut con, "scheduled"), 0);
}

#[test]
fn an_ungoverned_run_due_now_is_xadded_into_a_stream_as_a_producer_would() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = q!(
        &mut con,
        "XGROUP",
        "CREATE",
        "{s}:pending",
        "workers",
        "0",
        "MKSTREAM"
    );
    let t0 = server_time_ms(&mut con);
    assert_eq!(add(&mut con, &["{s}:schedule", "{s}:pending", "inv-1"]), 1);
    assert_eq!(add(&mut con, &["{s}:schedule", "{s}:pending", "inv-2"]), 1);
    let t1 = server_time_ms(&mut con);
    let got = entries(&mut con, "{s}:pending");
    let jobs: Vec<&str> = got.iter().map(|(_, job)| job.as_str()).collect();
    assert_eq!(jobs, ["inv-1", "inv-2"]);
    for (id, _) in &got {
        let ms: i64 = id.split_once('-').unwrap().0.parse().unwrap();
        assert!((t0..=t1).contains(&ms), "an ID the server chose now: {id}");
    }
    // A consumer group delivers them, oldest first.
    let read: Value = q!(
        &mut con,
        "XREADGROUP",
        "GROUP",
        "workers",
        "w1",
        "COUNT",
        10,
        "STREAMS",
        "{s}:pending",
        ">"
    );
    let text = format!("{read:?}");
    let (one, two) = (text.find("inv-1").unwrap(), text.find("inv-2").unwrap());
    assert!(one < two, "{text}");

    // The same events as a producer's XADD.
    for prefix in ["{n}", "{a}"] {
        let _: String = q!(
            &mut con,
            "XADD",
            format!("{prefix}:pending"),
            "*",
            "job",
            "old"
        );
    }
    let native = events(&server, "{n}", |con| {
        let _: String = q!(con, "XADD", "{n}:pending", "*", "job", "x");
    });
    let module = events(&server, "{a}", |con| {
        assert_eq!(add(con, &["{a}:schedule", "{a}:pending", "x"]), 1);
    });
    assert!(native.iter().any(|e| e.ends_with("xadd")), "{native:?}");
    assert_eq!(module, native);
}

#[test]
fn clients_blocked_on_pending_wake_for_an_add() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = q!(
        &mut con,
        "XGROUP",
        "CREATE",
        "{s}:pending",
        "workers",
        "0",
        "MKSTREAM"
    );
    let (url_list, url_stream) = (server.url(), server.url());
    let popper = std::thread::spawn(move || {
        let mut con = redis::Client::open(url_list)
            .unwrap()
            .get_connection()
            .unwrap();
        let got: Option<(String, String)> = q!(&mut con, "BRPOP", "{l}:pending", 10);
        got
    });
    let reader = std::thread::spawn(move || {
        let mut con = redis::Client::open(url_stream)
            .unwrap()
            .get_connection()
            .unwrap();
        let read: Value = q!(
            &mut con,
            "XREADGROUP",
            "GROUP",
            "workers",
            "c",
            "BLOCK",
            10_000,
            "STREAMS",
            "{s}:pending",
            ">"
        );
        read
    });
    wait_blocked_clients(&mut con, 2);
    assert_eq!(add(&mut con, &["{l}:schedule", "{l}:pending", "job-l"]), 1);
    assert_eq!(add(&mut con, &["{s}:schedule", "{s}:pending", "job-s"]), 1);
    assert_eq!(
        popper.join().unwrap(),
        Some(("{l}:pending".to_string(), "job-l".to_string()))
    );
    let read = reader.join().unwrap();
    assert!(format!("{read:?}").contains("job-s"), "{read:?}");
}

#[test]
fn a_delayed_run_goes_into_the_schedule_at_now_plus_the_delay_as_echo_schedule_writes_it() {
    let server = Server::start();
    let mut con = server.conn();
    let t0 = server_time_ms(&mut con);
    let fire = add(
        &mut con,
        &["{d}:schedule", "{d}:pending", "job", "DELAY", "5000"],
    );
    let t1 = server_time_ms(&mut con);
    assert!((t0 + 5000..=t1 + 5000).contains(&fire), "{t0} {fire} {t1}");
    assert_eq!(score(&mut con, "{d}:schedule", "job"), Some(fire));
    let pending: i64 = q!(&mut con, "EXISTS", "{d}:pending");
    assert_eq!(pending, 0, "nothing pending");
    // The largest delay ECHO.SCHEDULE takes.
    let far = add(
        &mut con,
        &[
            "{d}:schedule",
            "{d}:pending",
            "far",
            "DELAY",
            "10000000000000",
        ],
    );
    assert!(far >= t0 + 10_000_000_000_000, "{far}");
    // Without NX a job already scheduled is rescheduled, as by ECHO.SCHEDULE.
    let again = add(
        &mut con,
        &["{d}:schedule", "{d}:pending", "job", "DELAY", "60000"],
    );
    assert!(again >= fire + 55_000, "{fire} {again}");
    assert_eq!(score(&mut con, "{d}:schedule", "job"), Some(again));

    // ECHO.SCHEDULE's write: the same value and the same events.
    let _: () = q!(&mut con, "ZADD", "{n}:schedule", 1, "old");
    let _: () = q!(&mut con, "ZADD", "{a}:schedule", 1, "old");
    let native = events(&server, "{n}", |con| {
        let _: i64 = q!(con, "ECHO.SCHEDULE", "{n}:schedule", "j", 3_600_000);
    });
    let module = events(&server, "{a}", |con| {
        let _ = add(
            con,
            &["{a}:schedule", "{a}:pending", "j", "DELAY", "3600000"],
        );
    });
    assert!(native.iter().any(|e| e.ends_with("zadd")), "{native:?}");
    assert_eq!(module, native);
    assert_eq!(stat(&mut con, "scheduled"), 5, "4 adds and 1 ECHO.SCHEDULE");
    assert_eq!(stat(&mut con, "added_direct"), 0);
}

#[test]
fn a_limited_schedule_takes_every_run_and_its_limit_releases_them() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = q!(
        &mut con,
        "CONFIG",
        "SET",
        "echomq.release-limits",
        "{l}:schedule 1/h 5"
    );
    let t0 = server_time_ms(&mut con);
    let mut fires = Vec::new();
    for i in 0..8 {
        fires.push(add(
            &mut con,
            &["{l}:schedule", "{l}:pending", &format!("job-{i}")],
        ));
    }
    let t1 = server_time_ms(&mut con);
    for (i, &fire) in fires.iter().enumerate() {
        assert!((t0..=t1).contains(&fire), "job-{i}: {t0} {fire} {t1}");
        assert_eq!(
            score(&mut con, "{l}:schedule", &format!("job-{i}")),
            Some(fire)
        );
    }
    let pending: i64 = q!(&mut con, "EXISTS", "{l}:pending");
    assert_eq!(pending, 0, "nothing skipped the limit");
    // The limit governs them as it governs retries: the burst of 5 leaves.
    std::thread::sleep(Duration::from_millis(2));
    assert_eq!(promote(&mut con, "{l}:schedule", "{l}:pending"), 5);
    assert_eq!(promote(&mut con, "{l}:schedule", "{l}:pending"), 0);
    let left: i64 = q!(&mut con, "ZCARD", "{l}:schedule");
    assert_eq!(left, 3);
    // Even a limit that would allow a release now: the run is scheduled.
    let _: () = q!(
        &mut con,
        "CONFIG",
        "SET",
        "echomq.release-limits",
        "{l}:schedule 1/h 5 {fresh}:schedule 1000/s 1000"
    );
    let fire = add(&mut con, &["{fresh}:schedule", "{fresh}:pending", "j"]);
    assert!(fire > 1, "{fire}");
    // A limit on another schedule does not govern this one.
    assert_eq!(add(&mut con, &["{o}:schedule", "{o}:pending", "j"]), 1);
    // Once the limit is gone, runs go straight to pending again.
    let _: () = q!(&mut con, "CONFIG", "SET", "echomq.release-limits", "");
    assert_eq!(add(&mut con, &["{l}:schedule", "{l}:pending", "job-8"]), 1);
    assert_eq!(stat(&mut con, "scheduled"), 9);
    assert_eq!(stat(&mut con, "added_direct"), 2);
}

/// 5,000 first runs added with ECHO.ADD to a stream queue limited to
/// 1000/s burst 50, released by the server's own timer: every run passes
/// the limit (in every stretch of `t` ms at most `50 + floor(t * 1000/s)`
/// leave, by the entries' ids), in fire-time order (ties in the sorted
/// set's order), each once.
#[test]
fn five_thousand_first_runs_leave_within_the_limit_in_order() {
    const N: usize = 5000;
    const BURST: i64 = 50;
    const RATE_PER_S: i64 = 1000;
    let server = Server::start();
    let mut con = server.conn();
    let (schedule, pending) = ("{first}:schedule", "{first}:pending");
    let _: () = q!(&mut con, "XGROUP", "CREATE", pending, "workers", "0", "MKSTREAM");
    let limit = format!("{schedule} {RATE_PER_S}/s {BURST}");
    let _: () = q!(&mut con, "CONFIG", "SET", "echomq.release-limits", &limit);
    let mut pipe = redis::pipe();
    for i in 0..N {
        pipe.cmd("ECHO.ADD")
            .arg(schedule)
            .arg(pending)
            .arg(format!("job-{i}"));
    }
    let fires: Vec<i64> = pipe.query(&mut con).expect("the adds");
    assert!(
        fires.iter().all(|&f| f > 1),
        "every run went to the schedule"
    );
    let pair = format!("{schedule} {pending}");
    let _: () = q!(&mut con, "CONFIG", "SET", "echomq.auto-promote", &pair);
    wait_until("every run released", Duration::from_secs(60), || {
        let len: usize = q!(&mut con, "XLEN", pending);
        (len == N).then_some(()).ok_or(format!("{len} released"))
    });
    let _: () = q!(&mut con, "CONFIG", "SET", "echomq.auto-promote", "");
    let released = entries(&mut con, pending);
    // Fire-time order, ties as the sorted set orders them (by member).
    let mut want: Vec<(i64, String)> = (0..N).map(|i| (fires[i], format!("job-{i}"))).collect();
    want.sort();
    let got: Vec<&str> = released.iter().map(|(_, job)| job.as_str()).collect();
    let want: Vec<&str> = want.iter().map(|(_, job)| job.as_str()).collect();
    assert_eq!(got, want, "released in fire-time order, each once");
    let at_ms: Vec<i64> = released
        .iter()
        .map(|(id, _)| {
            id.split('-')
                .next()
                .and_then(|ms| ms.parse().ok())
                .expect("an entry id")
        })
        .collect();
    // The entry ids' clock can read up to 1 ms past the limit's.
    for t_ms in [0i64, 10, 100, 1000, 3000] {
        let bound = BURST + (t_ms + 1) * RATE_PER_S / 1000;
        let mut most = 0;
        let mut end = 0;
        for (start, &from) in at_ms.iter().enumerate() {
            while end < at_ms.len() && at_ms[end] <= from + t_ms {
                end += 1;
            }
            most = most.max(end - start);
        }
        assert!(
            most as i64 <= bound,
            "{most} released within {t_ms} ms; the limit allows {bound}"
        );
    }
}

#[test]
fn a_held_schedule_takes_every_run_until_the_hold_ends() {
    let server = Server::start();
    let mut con = server.conn();
    let until: i64 = q!(&mut con, "ECHO.HOLD", "{h}:schedule", 60_000);
    assert!(until > 0);
    let fire = add(&mut con, &["{h}:schedule", "{h}:pending", "held"]);
    assert!(fire > 1 && fire < until, "{fire} {until}");
    let pending: i64 = q!(&mut con, "EXISTS", "{h}:pending");
    assert_eq!(pending, 0);
    std::thread::sleep(Duration::from_millis(2));
    assert_eq!(promote(&mut con, "{h}:schedule", "{h}:pending"), 0, "held");
    // A hold of another schedule does not govern this one.
    assert_eq!(add(&mut con, &["{o}:schedule", "{o}:pending", "j"]), 1);
    // Lifted: the next run goes straight in, the held one is released.
    let lifted: i64 = q!(&mut con, "ECHO.HOLD", "{h}:schedule", 0);
    assert_eq!(lifted, 0);
    assert_eq!(add(&mut con, &["{h}:schedule", "{h}:pending", "after"]), 1);
    assert_eq!(promote(&mut con, "{h}:schedule", "{h}:pending"), 1);
    assert_eq!(list(&mut con, "{h}:pending"), ["held", "after"]);
    // A hold that expired holds nothing either.
    let _: i64 = q!(&mut con, "ECHO.HOLD", "{e}:schedule", 50);
    assert!(add(&mut con, &["{e}:schedule", "{e}:pending", "early"]) > 1);
    std::thread::sleep(Duration::from_millis(80));
    assert_eq!(add(&mut con, &["{e}:schedule", "{e}:pending", "late"]), 1);
}

#[test]
fn a_hold_arriving_as_a_plain_key_governs_the_very_next_run() {
    // Holds arrive by replication and migration as a plain `SET ... PXAT`:
    // the hold key's name, which ECHO.ADD keeps from one call to the next,
    // never stands for what the key holds.
    let server = Server::start();
    let mut con = server.conn();
    assert_eq!(add(&mut con, &["{k}:schedule", "{k}:pending", "a"]), 1);
    let (hold, far) = ("{k}:schedule:echomq-hold", "9999999999999");
    let _: String = q!(&mut con, "SET", hold, far, "PXAT", far);
    assert!(add(&mut con, &["{k}:schedule", "{k}:pending", "b"]) > 1);
    // Another schedule in between, then the held one again.
    assert_eq!(add(&mut con, &["{o}:schedule", "{o}:pending", "o"]), 1);
    assert!(add(&mut con, &["{k}:schedule", "{k}:pending", "c"]) > 1);
    // The same names in another database are other keys.
    let _: String = q!(&mut con, "SELECT", 1);
    assert_eq!(add(&mut con, &["{k}:schedule", "{k}:pending", "d"]), 1);
    let _: String = q!(&mut con, "SELECT", 0);
    let deleted: i64 = q!(&mut con, "DEL", hold);
    assert_eq!(deleted, 1);
    assert_eq!(add(&mut con, &["{k}:schedule", "{k}:pending", "e"]), 1);
    assert_eq!(list(&mut con, "{k}:pending"), ["e", "a"]);
}

#[test]
fn nx_writes_nothing_when_the_job_is_scheduled_whichever_way_it_would_go() {
    let server = Server::start();
    let mut con = server.conn();
    let at: i64 = q!(&mut con, "ECHO.SCHEDULE", "{x}:schedule", "job", 600_000);
    let before = digest(&mut con);
    let errors = stat(&mut con, "errors");
    // due now and ungoverned (would go to pending), delayed, in any case
    for options in [&["NX"][..], &["NX", "DELAY", "5"], &["DELAY", "0", "nx"]] {
        let mut args = vec!["{x}:schedule", "{x}:pending", "job"];
        args.extend_from_slice(options);
        assert_eq!(add(&mut con, &args), 0, "{options:?}");
        assert_eq!(digest(&mut con), before, "{options:?} wrote");
    }
    assert_eq!(score(&mut con, "{x}:schedule", "job"), Some(at));
    // A held schedule too.
    let _: i64 = q!(&mut con, "ECHO.HOLD", "{x}:schedule", 60_000);
    assert_eq!(
        add(&mut con, &["{x}:schedule", "{x}:pending", "job", "NX"]),
        0
    );
    assert_eq!(score(&mut con, "{x}:schedule", "job"), Some(at));
    let _: i64 = q!(&mut con, "ECHO.HOLD", "{x}:schedule", 0);
    assert_eq!(stat(&mut con, "errors"), errors, "0 is not an error");
    assert_eq!(stat(&mut con, "added_direct"), 0);
    assert_eq!(stat(&mut con, "scheduled"), 1, "the ECHO.SCHEDULE alone");
    // A job that is not scheduled is added as without NX; one already
    // pending (not in the schedule) is pushed again: NX looks at the
    // schedule only.
    assert_eq!(
        add(&mut con, &["{x}:schedule", "{x}:pending", "new", "NX"]),
        1
    );
    assert_eq!(
        add(&mut con, &["{x}:schedule", "{x}:pending", "new", "NX"]),
        1
    );
    assert_eq!(list(&mut con, "{x}:pending"), ["new", "new"]);
    let fire = add(
        &mut con,
        &[
            "{x}:schedule",
            "{x}:pending",
            "later",
            "NX",
            "DELAY",
            "1000",
        ],
    );
    assert_eq!(score(&mut con, "{x}:schedule", "later"), Some(fire));
}

#[test]
fn wrong_types_and_bad_input_write_nothing_whichever_way_the_job_would_go() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = q!(&mut con, "SET", "{t}:str", "x");
    let _: () = q!(&mut con, "ZADD", "{t}:zset", 1, "x");
    let _: () = q!(&mut con, "HSET", "{t}:hash", "f", "v");
    let _: () = q!(&mut con, "ZADD", "{t}:schedule", 9e15, "scheduled");
    let _: () = q!(&mut con, "LPUSH", "{t}:pending", "old");
    let _: String = q!(
        &mut con,
        "XADD",
        "{t}:full",
        "18446744073709551615-18446744073709551615",
        "job",
        "by-hand"
    );
    let _: i64 = q!(&mut con, "ECHO.HOLD", "{t}:held", 60_000);
    let _: () = q!(&mut con, "SET", "{t}:held-str", "x");
    let _: i64 = q!(&mut con, "ECHO.HOLD", "{t}:held-str", 60_000);
    let wrongtype = "WRONGTYPE Operation against a key holding the wrong kind of value";
    let cases: &[(&[&str], &str)] = &[
        // schedule of another type: on the fast path, delayed, with NX
        (&["{t}:str", "{t}:pending", "j"], wrongtype),
        (&["{t}:hash", "{t}:pending", "j", "DELAY", "10"], wrongtype),
        (&["{t}:pending", "{t}:schedule", "j", "NX"], wrongtype),
        // pending of another type, also when the job would be scheduled
        (&["{t}:schedule", "{t}:str", "j"], wrongtype),
        (&["{t}:schedule", "{t}:zset", "j", "DELAY", "10"], wrongtype),
        (&["{t}:schedule", "{t}:hash", "scheduled", "NX"], wrongtype),
        (&["{t}:held", "{t}:hash", "j"], wrongtype),
        (&["{t}:missing", "{t}:str", "j"], wrongtype),
        // a held schedule of another type
        (&["{t}:held-str", "{t}:pending", "j"], wrongtype),
        // a stream whose IDs are used up
        (
            &["{t}:schedule", "{t}:full", "j"],
            "ERR The stream has exhausted the last possible ID, unable to add more items",
        ),
        // arguments
        (
            &["{t}:schedule", "{t}:schedule", "j"],
            "ERR schedule and pending must be different keys",
        ),
        (
            &["{t}:schedule", "{t}:pending", "j", "DELAY", "-1"],
            "ERR DELAY is not an integer or out of range (0..=10000000000000)",
        ),
        (
            &[
                "{t}:schedule",
                "{t}:pending",
                "j",
                "DELAY",
                "10000000000001",
            ],
            "ERR DELAY is not an integer or out of range (0..=10000000000000)",
        ),
        (
            &["{t}:schedule", "{t}:pending", "j", "DELAY"],
            "ERR syntax error",
        ),
        (
            &["{t}:schedule", "{t}:pending", "j", "NX", "NX"],
            "ERR syntax error",
        ),
        (
            &["{t}:schedule", "{t}:pending", "j", "XX"],
            "ERR syntax error",
        ),
        (
            &["schedule", "pending", "j", "GROUP", "tenant-1"],
            "ERR a grouped schedule needs a {hash tag}",
        ),
        (
            &["{t}:schedule", "{t}:pending", "j", "GROUP", ""],
            "ERR group must be 1..=1024 bytes",
        ),
        (
            &[
                "{t}:schedule",
                "{t}:pending",
                "j",
                "NX",
                "GROUP",
                "g",
                "GROUP",
                "5",
            ],
            "ERR syntax error",
        ),
        (
            &[
                "{t}:schedule",
                "{t}:pending",
                "j",
                "DELAY",
                "1",
                "GROUP",
                "g",
                "NX",
                "x",
            ],
            "ERR syntax error",
        ),
        (
            &["{t}:schedule", "{t}:pending"],
            "ERR wrong number of arguments",
        ),
    ];
    let before = digest(&mut con);
    let errors = stat(&mut con, "errors");
    for (args, want) in cases {
        let got = err!(&mut con, "ECHO.ADD", *args);
        assert!(
            got.starts_with(want),
            "{args:?}: got {got:?}, want {want:?}"
        );
        assert_eq!(digest(&mut con), before, "{args:?} wrote something");
    }
    // Every refusal but the server's own arity error is the module's.
    assert_eq!(stat(&mut con, "errors"), errors + cases.len() as u64 - 1);
    assert_eq!(stat(&mut con, "added_direct"), 0);
    assert_eq!(stat(&mut con, "scheduled"), 0);
}

#[test]
fn keys_must_share_a_slot_in_a_cluster() {
    let node = cluster::Node::start();
    let mut con = node.conn();
    let _: () = q!(&mut con, "CLUSTER", "ADDSLOTSRANGE", 0, 16383);
    wait_until(
        "the one-node cluster is ok",
        Duration::from_secs(30),
        || match cluster::cluster_state(&mut con)?.as_str() {
            "ok" => Ok(()),
            state => Err(state.to_string()),
        },
    );
    let e = err!(&mut con, "ECHO.ADD", "{a}:schedule", "{b}:pending", "j");
    assert!(e.starts_with("CROSSSLOT"), "{e}");
    let e = err!(
        &mut con,
        "ECHO.ADD",
        "{a}:schedule",
        "{b}:pending",
        "j",
        "DELAY",
        "5"
    );
    assert!(e.starts_with("CROSSSLOT"), "{e}");
    let keys: i64 = q!(&mut con, "DBSIZE");
    assert_eq!(keys, 0);
    // One hash tag: the fast path, and the hold (a key beside the schedule)
    // read in the schedule's slot.
    assert_eq!(add(&mut con, &["{q}:schedule", "{q}:pending", "j"]), 1);
    let _: i64 = q!(&mut con, "ECHO.HOLD", "{q}:schedule", 60_000);
    assert!(add(&mut con, &["{q}:schedule", "{q}:pending", "k"]) > 1);
}

/// ECHO.ADD down every branch, plainly, in MULTI/EXEC and from Lua: lists,
/// a stream, a limited and a held schedule, delays, NX.
fn add_workload(con: &mut Connection) {
    let _: () = q!(
        con,
        "XGROUP",
        "CREATE",
        "{s}:pending",
        "workers",
        "0",
        "MKSTREAM"
    );
    let _: () = q!(
        con,
        "CONFIG",
        "SET",
        "echomq.release-limits",
        "{l}:schedule 1/h 10"
    );
    let _: i64 = q!(con, "ECHO.HOLD", "{h}:schedule", 600_000);
    for round in 0..20 {
        let mut pipe = redis::pipe();
        for (i, queue) in ["{p}", "{s}", "{l}", "{h}", "{d}"].iter().enumerate() {
            let job = format!("job-{}", (round * 7 + i * 3) % 31);
            let schedule = format!("{queue}:schedule");
            let pending = format!("{queue}:pending");
            let mut call = cmd!("ECHO.ADD", &schedule, &pending, &job);
            if *queue == "{d}" {
                call.arg("DELAY").arg(1 + (round * 13 + i) % 40);
            }
            if round % 3 == 0 {
                call.arg("NX");
            }
            pipe.add_command(call).ignore();
        }
        let _: () = pipe.query(con).expect("adds");
        let mut multi = redis::pipe();
        multi.atomic();
        for i in 0..5 {
            let job = format!("multi-{round}-{i}");
            multi
                .add_command(cmd!("ECHO.ADD", "{p}:schedule", "{p}:pending", &job))
                .ignore()
                .add_command(cmd!(
                    "ECHO.ADD",
                    "{d}:schedule",
                    "{d}:pending",
                    &job,
                    "DELAY",
                    3
                ))
                .ignore();
        }
        let _: () = multi.query(con).expect("MULTI");
        let script = "return redis.call('ECHO.ADD', KEYS[1], KEYS[2], ARGV[1], 'DELAY', ARGV[2])";
        let job = format!("lua-{round}");
        let _: i64 = q!(
            con,
            "EVAL",
            script,
            2,
            "{s}:schedule",
            "{s}:pending",
            &job,
            round % 2
        );
        std::thread::sleep(Duration::from_millis(3));
        for queue in ["{l}", "{d}", "{s}"] {
            promote(
                con,
                &format!("{queue}:schedule"),
                &format!("{queue}:pending"),
            );
        }
    }
}

/// What the workload must have gone through, so a test of its replication
/// cannot pass on a workload that took one branch only.
fn assert_every_branch_taken(con: &mut Connection) {
    for key in ["{p}:pending", "{l}:pending", "{d}:pending"] {
        assert_eq!(key_type(con, key), "list", "{key}");
    }
    assert_eq!(key_type(con, "{s}:pending"), "stream");
    let held: i64 = q!(con, "ZCARD", "{h}:schedule");
    assert!(held > 0, "the held schedule took runs");
    let limited: i64 = q!(con, "ZCARD", "{l}:schedule");
    assert!(limited > 0, "the limit kept runs scheduled");
    let direct = stat(con, "added_direct");
    let scheduled = stat(con, "scheduled");
    assert!(direct > 100 && scheduled > 100, "{direct} {scheduled}");
}

#[test]
fn a_replica_without_the_module_ends_identical_and_gets_only_native_commands() {
    let (_primary, replica, mut p, mut r) = primary_and_replica(Options::without_module());
    // Counted before the workload: a client's own handshake (CLIENT SETINFO,
    // unknown to Redis 7.0) can add errors that are not the stream's.
    let errors_before = info_field(&mut r, "stats", "total_error_replies");
    add_workload(&mut p);
    wait_replica_synced(&mut p, &mut r);
    assert_every_branch_taken(&mut p);
    assert_eq!(digest(&mut r), digest(&mut p), "replica digest differs");
    assert_eq!(
        entries(&mut r, "{s}:pending"),
        entries(&mut p, "{s}:pending"),
        "the same stream IDs"
    );
    let stats: String = q!(&mut r, "INFO", "commandstats");
    assert!(!stats.to_lowercase().contains("cmdstat_echo."), "{stats}");
    for native in ["cmdstat_lpush:", "cmdstat_xadd:", "cmdstat_zadd:"] {
        assert!(
            stats.contains(native),
            "replica never ran {native}\n{stats}"
        );
    }
    let errorstats: String = q!(&mut r, "INFO", "errorstats");
    assert_eq!(
        info_field(&mut r, "stats", "total_error_replies"),
        errors_before,
        "the replica hit errors replaying the stream: {errorstats}\n{}",
        replica.log()
    );
}

#[test]
fn an_aof_holds_only_native_commands_and_replays_to_the_same_data() {
    let dir = TempDir::new("add-aof");
    let aof = Options::aof_replay();
    let mut server = Server::start_in(aof.clone(), &dir.0);
    let mut con = server.conn();
    add_workload(&mut con);
    assert_every_branch_taken(&mut con);
    let want = digest(&mut con);
    let want_entries = entries(&mut con, "{s}:pending");
    let _: () = q!(&mut con, "DEBUG", "LOADAOF");
    assert_eq!(digest(&mut con), want, "after DEBUG LOADAOF");

    let mut text = Vec::new();
    for entry in std::fs::read_dir(dir.0.join("appendonlydir")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            text.extend(std::fs::read(path).unwrap());
        }
    }
    let text = String::from_utf8_lossy(&text).to_lowercase();
    for native in ["lpush", "xadd", "zadd"] {
        assert!(text.contains(native), "the AOF has no {native}");
    }
    assert!(!text.contains("echo."), "the AOF holds a module command");
    server.shutdown();

    // Replayed at a restart, with the module and without it.
    for with_module in [true, false] {
        let mut options = aof.clone();
        options.load_module = with_module;
        let mut server = Server::start_in(options, &dir.0);
        let mut con = server.conn();
        assert_eq!(digest(&mut con), want, "module loaded: {with_module}");
        assert_eq!(entries(&mut con, "{s}:pending"), want_entries);
        server.shutdown();
    }
}

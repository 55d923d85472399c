//! Recurring jobs (docs/clients.md, Recurring jobs): `Queue::repeat`
//! declares a definition the server keeps and arms, one occurrence
//! `<id>@<nominal_ms>` at a time; a worker runs each occurrence as a job with
//! the definition's payload, and no outcome of a run touches the definition;
//! `Queue::unrepeat` ends it. Arguments the server would refuse for their
//! form are refused here, with nothing sent.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{calls, eventually, queue_name, server_ms_async, start_worker, stop, Server};
use echomq_client::{
    Counts, Job, JobError, Queue, QueueConnection, Repeat, RepeatOptions, Worker, WorkerOptions,
};
use redis::AsyncCommands;

const PAYLOAD: &[u8] = b"the report's payload \x00\xff";
const WAIT: Duration = Duration::from_secs(15);

async fn open(tag: &str) -> (Server, String, Queue, QueueConnection) {
    let server = Server::start();
    let name = queue_name(tag);
    let queue = Queue::new(server.client(), &name).await.unwrap();
    let conn = queue.connection();
    (server, name, queue, conn)
}

async fn queue_keys(conn: &mut QueueConnection, name: &str) -> Vec<String> {
    let mut keys: Vec<String> = conn.keys(format!("{{{name}}}:*")).await.unwrap();
    keys.sort();
    keys
}

fn ids(listed: &[Repeat]) -> Vec<&str> {
    listed.iter().map(|r| r.id.as_str()).collect()
}

fn nominal(occurrence: &str, id: &str) -> i64 {
    let (head, ms) = occurrence.rsplit_once('@').expect(occurrence);
    assert_eq!(head, id, "{occurrence}");
    ms.parse().expect(occurrence)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeat_repeats_and_unrepeat_round_trip() {
    let (_server, name, queue, mut conn) = open("repeat").await;
    let (schedule, jobs) = (format!("{{{name}}}:schedule"), format!("{{{name}}}:jobs"));
    let before = server_ms_async(&mut conn).await;
    let fire = queue
        .repeat("minutely", "every:60000", PAYLOAD, RepeatOptions::default())
        .await
        .unwrap();
    let after = server_ms_async(&mut conn).await;
    // every: from the call, the first occurrence one interval later, no
    // jitter: fired at it
    assert!((before + 60_000..=after + 60_000).contains(&fire));
    let until = before + 30 * 86_400_000;
    let options = RepeatOptions {
        jitter_ms: 60_000,
        tz: Some("America/New_York".into()),
        from_ms: Some(before),
        until_ms: Some(until),
    };
    let report = queue
        .repeat("report", "cron:0 9 * * MON-FRI", "text payload", options)
        .await
        .unwrap();
    let listed = queue.repeats().await.unwrap();
    assert_eq!(ids(&listed), ["minutely", "report"]);
    assert_eq!(
        listed[0],
        Repeat {
            id: "minutely".into(),
            spec: "every:60000".into(),
            jitter_ms: 0,
            tz: "UTC".into(),
            from_ms: None,
            until_ms: None,
            next_ms: fire,
            fire_at_ms: Some(fire),
        }
    );
    let daily = &listed[1];
    assert_eq!(
        Repeat {
            next_ms: 0,
            ..daily.clone()
        },
        Repeat {
            id: "report".into(),
            spec: "cron:0 9 * * MON-FRI".into(),
            jitter_ms: 60_000,
            tz: "America/New_York".into(),
            from_ms: Some(before),
            until_ms: Some(until),
            next_ms: 0,
            fire_at_ms: Some(report),
        }
    );
    // A weekday's 9:00 in New York (13:00 or 14:00 UTC, by daylight saving
    // time), after now, within the next week; fired within its jitter.
    let of_day = daily.next_ms.rem_euclid(86_400_000);
    assert!(
        of_day == 13 * 3_600_000 || of_day == 14 * 3_600_000,
        "{of_day}"
    );
    assert!(before < daily.next_ms && daily.next_ms <= before + 7 * 86_400_000);
    assert!((daily.next_ms..=daily.next_ms + 60_000).contains(&report));
    // Each armed occurrence is a job of the queue: in the schedule by its
    // fire time, its payload in the jobs hash as add stores one.
    let (one, two) = (
        format!("minutely@{fire}"),
        format!("report@{}", daily.next_ms),
    );
    let scheduled: BTreeMap<String, i64> = conn.zrange_withscores(&schedule, 0, -1).await.unwrap();
    assert_eq!(
        scheduled,
        BTreeMap::from([(one.clone(), fire), (two.clone(), report)])
    );
    let payloads: BTreeMap<String, Vec<u8>> = conn.hgetall(&jobs).await.unwrap();
    assert_eq!(
        payloads,
        BTreeMap::from([
            (one.clone(), PAYLOAD.to_vec()),
            (two, b"text payload".to_vec())
        ])
    );
    assert!(queue.unrepeat("report").await.unwrap());
    assert!(!queue.unrepeat("report").await.unwrap());
    assert_eq!(ids(&queue.repeats().await.unwrap()), ["minutely"]);
    let members: Vec<String> = conn.zrange(&schedule, 0, -1).await.unwrap();
    assert_eq!(members, std::slice::from_ref(&one));
    let fields: Vec<String> = conn.hkeys(&jobs).await.unwrap();
    assert_eq!(fields, [one]);
    assert!(queue.unrepeat("minutely").await.unwrap());
    assert_eq!(queue.repeats().await.unwrap(), []);
    // Only the stream the workers read is left (made by repeat, see below).
    assert_eq!(
        queue_keys(&mut conn, &name).await,
        [format!("{{{name}}}:pending")]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_definition_again_changes_nothing() {
    let (server, name, queue, mut conn) = open("repeat-same").await;
    let (schedule, jobs) = (format!("{{{name}}}:schedule"), format!("{{{name}}}:jobs"));
    let jittered = || RepeatOptions {
        jitter_ms: 30_000,
        ..RepeatOptions::default()
    };
    let first = queue
        .repeat("tick", "every:60000", PAYLOAD, jittered())
        .await
        .unwrap();
    // Another instance of the application declaring it at its start:
    // nothing moves.
    let again = queue
        .repeat("tick", "every:60000", PAYLOAD.to_vec(), jittered())
        .await
        .unwrap();
    assert_eq!(again, first);
    let other = Queue::new(server.client(), &name).await.unwrap();
    let third = other
        .repeat("tick", "every:60000", PAYLOAD, jittered())
        .await
        .unwrap();
    assert_eq!(third, first);
    let listed = queue.repeats().await.unwrap();
    assert_eq!(
        listed.iter().map(|r| r.fire_at_ms).collect::<Vec<_>>(),
        [Some(first)]
    );
    let n: u64 = conn.zcard(&schedule).await.unwrap();
    assert_eq!(n, 1);
    // A payload that starts like a group's envelope is stored as add stores
    // it (wrapped with no group), the same every time: the same definition.
    let tricky = b"\x00echomq-group:4:acmepayload";
    let at = queue
        .repeat("tricky", "every:60000", tricky, RepeatOptions::default())
        .await
        .unwrap();
    let again = queue
        .repeat("tricky", "every:60000", tricky, RepeatOptions::default())
        .await
        .unwrap();
    assert_eq!(again, at);
    let stored: Vec<u8> = conn.hget(&jobs, format!("tricky@{at}")).await.unwrap();
    assert_eq!(stored, [&b"\x00echomq-group:0:"[..], tricky].concat());
    // A different definition replaces it: one occurrence still, with the
    // new payload.
    queue
        .repeat("tick", "every:60000", b"new", jittered())
        .await
        .unwrap();
    let tick = queue
        .repeats()
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.id == "tick")
        .unwrap();
    let members: BTreeSet<String> = conn.zrange(&schedule, 0, -1).await.unwrap();
    assert_eq!(
        members,
        BTreeSet::from([format!("tick@{}", tick.next_ms), format!("tricky@{at}")])
    );
    let payload: Vec<u8> = conn
        .hget(&jobs, format!("tick@{}", tick.next_ms))
        .await
        .unwrap();
    assert_eq!(payload, b"new");
    let n: u64 = conn.hlen(&jobs).await.unwrap();
    assert_eq!(n, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_arguments_are_refused_before_anything_is_sent() {
    let (_server, name, queue, mut conn) = open("repeat-bad").await;
    let jitter = |jitter_ms| RepeatOptions {
        jitter_ms,
        ..RepeatOptions::default()
    };
    let bounds = |from_ms, until_ms| RepeatOptions {
        from_ms: Some(from_ms),
        until_ms: Some(until_ms),
        ..RepeatOptions::default()
    };
    let bad: Vec<(String, &str, RepeatOptions)> = vec![
        (String::new(), "every:1000", RepeatOptions::default()),
        ("x".repeat(1025), "every:1000", RepeatOptions::default()),
        ("é".repeat(513), "every:1000", RepeatOptions::default()),
        ("id".into(), "every:999", RepeatOptions::default()),
        (
            "id".into(),
            "every:10000000000001",
            RepeatOptions::default(),
        ),
        (
            "id".into(),
            "every:99999999999999999999999",
            RepeatOptions::default(),
        ),
        ("id".into(), "every:01000", RepeatOptions::default()),
        ("id".into(), "every:+1000", RepeatOptions::default()),
        ("id".into(), "every:1e3", RepeatOptions::default()),
        ("id".into(), "every: 1000", RepeatOptions::default()),
        ("id".into(), "every:", RepeatOptions::default()),
        ("id".into(), "hourly", RepeatOptions::default()),
        ("id".into(), "", RepeatOptions::default()),
        ("id".into(), "cron:", RepeatOptions::default()),
        ("id".into(), "cron:   ", RepeatOptions::default()),
        ("id".into(), "every:1000", jitter(1001)),
        ("id".into(), "cron:* * * * *", jitter(10_000_000_000_001)),
        (
            "id".into(),
            "every:1000",
            RepeatOptions {
                tz: Some(String::new()),
                ..RepeatOptions::default()
            },
        ),
        ("id".into(), "every:1000", bounds(10, 9)),
    ];
    let sent = calls(&mut conn, "ECHO.REPEAT").await;
    for (id, spec, options) in bad {
        let shown = format!("{id:?} {spec:?} {options:?}");
        let error = queue.repeat(&id, spec, b"p", options).await.unwrap_err();
        assert_eq!(error.kind(), redis::ErrorKind::Client, "{shown}: {error}");
    }
    let error = queue.unrepeat("").await.unwrap_err();
    assert_eq!(error.kind(), redis::ErrorKind::Client, "{error}");
    assert_eq!(calls(&mut conn, "ECHO.REPEAT").await, sent);
    assert_eq!(queue_keys(&mut conn, &name).await, Vec::<String>::new());
    // The bounds are the server's: it refuses just past them too, and
    // takes them.
    let schedule = format!("{{{name}}}:schedule");
    for words in [
        &["x".repeat(1025), "every:1000".into()][..],
        &["id".into(), "every:999".into()],
        &[
            "id".into(),
            "every:1000".into(),
            "JITTER".into(),
            "1001".into(),
        ],
    ] {
        let refused: redis::RedisResult<i64> = redis::cmd("ECHO.REPEAT")
            .arg(&schedule)
            .arg(words)
            .query_async(&mut conn)
            .await;
        assert!(refused.unwrap_err().code() == Some("ERR"), "{words:?}");
    }
    queue
        .repeat(&"x".repeat(1024), "every:1000", b"p", jitter(1000))
        .await
        .unwrap();
    assert_eq!(
        calls(&mut conn, "ECHO.REPEAT").await,
        sent + 4,
        "the count sees what is sent"
    );
    queue
        .repeat(
            &"é".repeat(512),
            "every:10000000000000",
            b"p",
            jitter(10_000_000_000_000),
        )
        .await
        .unwrap();
    let everything = RepeatOptions {
        jitter_ms: 60_000,
        tz: Some("Europe/Berlin".into()),
        from_ms: Some(i64::MIN),
        until_ms: Some(i64::MAX),
    };
    queue
        .repeat("cron", "cron:0 0 1 1 *", b"p", everything)
        .await
        .unwrap();
    assert_eq!(queue.repeats().await.unwrap().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_only_the_server_knows_is_refused_with_nothing_written() {
    let (_server, name, queue, mut conn) = open("repeat-refused").await;
    let zone = |tz: &str| RepeatOptions {
        tz: Some(tz.into()),
        ..RepeatOptions::default()
    };
    let until = RepeatOptions {
        until_ms: Some(1),
        ..RepeatOptions::default()
    };
    for (spec, options, wording) in [
        ("cron:61 * * * *", RepeatOptions::default(), "invalid spec"),
        ("cron:* * * *", RepeatOptions::default(), "invalid spec"),
        ("cron:0 0 30 2 *", RepeatOptions::default(), "invalid spec"),
        ("every:60000", zone("Mars/Olympus"), "invalid TZ"),
        ("every:60000", until, "no occurrence still to come"),
    ] {
        let error = queue.repeat("id", spec, b"p", options).await.unwrap_err();
        assert!(error.to_string().contains(wording), "{spec}: {error}");
        assert_eq!(queue.repeats().await.unwrap(), []);
        let n: u64 = redis::cmd("EXISTS")
            .arg(format!("{{{name}}}:schedule"))
            .arg(format!("{{{name}}}:jobs"))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(n, 0, "{spec}");
    }
}

type Runs = Arc<Mutex<Vec<(String, Vec<u8>, u64)>>>;

/// every:1000 on the server's timer and one Worker (max_attempts 2): the
/// first occurrence succeeds, the second fails once and is retried, the
/// third fails twice and is dead, the later ones succeed; the definition is
/// there after each, every occurrence ran with the payload and its own id,
/// no nominal second was skipped, none ran twice; unrepeat stops it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_runs_each_occurrence_once_and_no_outcome_ends_the_definition() {
    let (_server, name, queue, mut conn) = open("repeat-run").await;
    let (schedule, pending, jobs) = (
        format!("{{{name}}}:schedule"),
        format!("{{{name}}}:pending"),
        format!("{{{name}}}:jobs"),
    );
    let timer = |pair: String| {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("echomq.auto-promote")
            .arg(pair)
            .clone()
    };
    let _: () = timer(format!("{schedule} {pending}"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let first = queue
        .repeat("tick", "every:1000", PAYLOAD, RepeatOptions::default())
        .await
        .unwrap();
    // The timer releases the first occurrence with no worker started: into
    // the workers' stream, which repeat made (a release into a missing
    // pending would make it a list).
    eventually("the first release", WAIT, || {
        let (mut conn, pending) = (conn.clone(), pending.clone());
        async move { conn.xlen::<_, u64>(&pending).await.unwrap() == 1 }
    })
    .await;
    let kind: String = redis::cmd("TYPE")
        .arg(&pending)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(kind, "stream");
    let runs = Runs::default();
    let recorded = runs.clone();
    let handler = move |job: Job| {
        let runs = recorded.clone();
        async move {
            let n = (nominal(&job.id, "tick") - first) / 1000;
            runs.lock()
                .unwrap()
                .push((job.id.clone(), job.payload.clone(), job.attempt));
            if (n == 1 && job.attempt == 1) || n == 2 {
                return Err(JobError::msg(format!(
                    "occurrence {n}, attempt {}",
                    job.attempt
                )));
            }
            Ok(())
        }
    };
    let options = WorkerOptions {
        max_attempts: 2,
        backoff: "fixed:100".into(),
        ..WorkerOptions::default()
    };
    let (handle, task) = start_worker(Worker::new(queue.clone(), handler, options));
    let ran = |n: i64, attempt: u64| {
        let id = format!("tick@{}", first + 1000 * n);
        runs.lock()
            .unwrap()
            .iter()
            .any(|(i, _, a)| *i == id && *a == attempt)
    };
    let still_there = || async { ids(&queue.repeats().await.unwrap()) == ["tick"] };
    eventually("the first success", WAIT, || {
        let (mut conn, jobs) = (conn.clone(), jobs.clone());
        async move {
            !conn
                .hexists::<_, _, bool>(&jobs, format!("tick@{first}"))
                .await
                .unwrap()
        }
    })
    .await;
    assert!(still_there().await);
    eventually("the retry", WAIT, || async { ran(1, 2) }).await;
    assert!(still_there().await);
    eventually("the dead occurrence", WAIT, || async {
        queue.counts().await.unwrap().dead == 1
    })
    .await;
    assert!(still_there().await);
    eventually("the occurrences after the dead one", WAIT, || async {
        ran(3, 1) && ran(4, 1)
    })
    .await;
    assert!(queue.unrepeat("tick").await.unwrap());
    let settled = Counts {
        dead: 1,
        ..Counts::default()
    };
    eventually("the released occurrences to be done", WAIT, || async {
        queue.counts().await.unwrap() == settled
    })
    .await;
    let count = runs.lock().unwrap().len();
    // Two intervals: an occurrence still armed would have run.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(runs.lock().unwrap().len(), count);
    stop(handle, task).await;
    let _: () = timer(String::new()).query_async(&mut conn).await.unwrap();
    assert_eq!(queue.repeats().await.unwrap(), []);
    let n: u64 = conn.zcard(&schedule).await.unwrap();
    assert_eq!(n, 0);
    // Every occurrence from the first to the last released, each run once
    // (the failing ones once per attempt), with the definition's payload
    // and its own id.
    let runs = runs.lock().unwrap().clone();
    let nominals: BTreeSet<i64> = runs.iter().map(|(id, _, _)| nominal(id, "tick")).collect();
    let last = *nominals.last().unwrap();
    assert_eq!(
        nominals,
        (first..=last).step_by(1000).collect::<BTreeSet<_>>()
    );
    assert!(nominals.len() >= 5, "{nominals:?}");
    assert!(runs.iter().all(|(_, payload, _)| payload == PAYLOAD));
    let mut attempts: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (id, _, attempt) in &runs {
        attempts.entry(id.clone()).or_default().push(*attempt);
    }
    attempts.retain(|_, a| *a != [1]);
    assert_eq!(
        attempts,
        BTreeMap::from([
            (format!("tick@{}", first + 1000), vec![1, 2]),
            (format!("tick@{}", first + 2000), vec![1, 2]),
        ])
    );
    // The dead occurrence is kept like any dead job, with its payload.
    let dead = queue.dead(0, 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(
        (
            dead[0].id.as_str(),
            dead[0].payload.as_deref(),
            dead[0].attempts,
            dead[0].error.as_deref()
        ),
        (
            format!("tick@{}", first + 2000).as_str(),
            Some(PAYLOAD),
            2,
            Some("occurrence 2, attempt 2")
        )
    );
}

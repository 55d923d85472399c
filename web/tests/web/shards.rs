//! Sharded queues (`--sharded NAME=N`): one queue in the API, /metrics and
//! the page, its shards' figures summed, each shard's on request; on one
//! server and on a cluster, where each shard is read on the primary owning
//! its slot. The shards are written key by key, so what each one holds is
//! known exactly.

use std::collections::BTreeMap;
use std::process::Command;

use crate::common::cluster::Cluster;
use crate::common::*;
use crate::harness::*;
use crate::node;
use serde_json::{json, Value as Json};

const FIELDS: [&str; 5] = ["scheduled", "due", "pending", "in_flight", "dead"];

/// What one shard is built with.
#[derive(Debug, Clone, Copy)]
struct Want {
    due: i64,
    /// In the spread's window, at least 20 s away (none falls due while a
    /// test reads).
    soon: i64,
    /// Beyond the window.
    later: i64,
    pending: i64,
    /// Of `pending`, a stream: entries delivered to the group `workers`
    /// and not acknowledged; 0 for a list `pending`.
    in_flight: i64,
    dead: i64,
}

impl Want {
    fn of(i: usize) -> Want {
        let i = i as i64;
        Want {
            due: 1 + i,
            soon: 2 + 2 * i,
            later: 1 + (i % 2),
            pending: 3 + i,
            in_flight: if i % 2 == 1 { 1 + i / 2 } else { 0 },
            dead: i % 3,
        }
    }

    fn counts(&self) -> [i64; 5] {
        [
            self.due + self.soon + self.later,
            self.due,
            self.pending,
            self.in_flight,
            self.dead,
        ]
    }
}

/// Writes `w` into the six-key queue `{tag}` on `con` (its owner); the
/// fire times of its `soon` members are returned, for the spread.
fn write_shard(con: &mut Connection, tag: &str, w: Want) -> Vec<i64> {
    let (s, p, d) = (
        format!("{{{tag}}}:schedule"),
        format!("{{{tag}}}:pending"),
        format!("{{{tag}}}:dead"),
    );
    let now = server_time_ms(con);
    for i in 0..w.due {
        let _: i64 = q!(con, "ZADD", &s, now - 1000 * (i + 1), format!("due-{i}"));
    }
    let mut soon = Vec::new();
    for i in 0..w.soon {
        let at = now + 20_000 + 3_000 * i;
        let _: i64 = q!(con, "ZADD", &s, at, format!("soon-{i}"));
        soon.push(at);
    }
    for i in 0..w.later {
        let _: i64 = q!(con, "ZADD", &s, now + 900_000 + i, format!("later-{i}"));
    }
    if w.in_flight > 0 {
        let _: () = q!(con, "XGROUP", "CREATE", &p, "workers", "0", "MKSTREAM");
        for i in 0..w.pending {
            let _: String = q!(con, "XADD", &p, "*", "job", format!("{tag}-{i}"));
        }
        let _: redis::Value = q!(
            con,
            "XREADGROUP",
            "GROUP",
            "workers",
            "c1",
            "COUNT",
            w.in_flight,
            "STREAMS",
            &p,
            ">"
        );
    } else {
        for i in 0..w.pending {
            let _: i64 = q!(con, "LPUSH", &p, format!("p-{i}"));
        }
    }
    for i in 0..w.dead {
        let _: i64 = q!(con, "ZADD", &d, now - 5000 - i, format!("dead-{i}"));
    }
    soon
}

fn queue<'a>(api: &'a Json, name: &str) -> &'a Json {
    api["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .find(|q| q["name"] == json!(name))
        .unwrap_or_else(|| panic!("no queue {name}: {api}"))
}

fn names(api: &Json) -> Vec<String> {
    api["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .map(|q| q["name"].as_str().expect("name").to_string())
        .collect()
}

fn counts_of(q: &Json) -> [i64; 5] {
    FIELDS.map(|f| q[f].as_i64().unwrap_or_else(|| panic!("{f}: {q}")))
}

fn spread_of(q: &Json) -> Vec<i64> {
    serde_json::from_value(q["spread"].clone()).unwrap_or_else(|e| panic!("{e}: {q}"))
}

/// The sum of the shards' truths, field by field.
fn summed(wants: &[Want]) -> [i64; 5] {
    let mut out = [0; 5];
    for w in wants {
        for (o, v) in out.iter_mut().zip(w.counts()) {
            *o += v;
        }
    }
    out
}

/// The samples of a /metrics text: `name{labels}` to value.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// /metrics agrees with `api` on the sharded queue `name`: its summed
/// series, one series per shard labelled with its tag, and no series of a
/// shard as a queue of its own.
fn assert_metrics_equal_the_api(text: &str, api: &Json, name: &str) {
    let s = samples(text);
    let q = queue(api, name);
    for (f, want) in FIELDS.iter().zip(counts_of(q)) {
        let key = format!("echomq_queue_{f}{{queue=\"{name}\"}}");
        assert_eq!(s.get(&key), Some(&(want as f64)), "{key}\n{text}");
    }
    let shards = q["per_shard"].as_array().expect("per_shard");
    for sh in shards {
        let tag = sh["tag"].as_str().expect("tag");
        for (f, want) in FIELDS.iter().zip(counts_of(sh)) {
            let key = format!("echomq_shard_{f}{{queue=\"{name}\",shard=\"{tag}\"}}");
            assert_eq!(s.get(&key), Some(&(want as f64)), "{key}\n{text}");
        }
        if tag != name {
            let alone = format!("echomq_queue_due{{queue=\"{tag}\"}}");
            assert!(!s.contains_key(&alone), "{alone}\n{text}");
        }
    }
    let per_shard_series = s.keys().filter(|k| k.starts_with("echomq_shard_")).count();
    assert_eq!(per_shard_series, FIELDS.len() * shards.len(), "{text}");
}

#[test]
fn a_sharded_queue_is_one_queue_its_shards_summed_on_one_server() {
    let server = Server::start();
    let mut con = server.conn();
    // Started first: its start may wait for the workspace build, and no
    // member may fall due meanwhile.
    let web = Web::start(&server.url(), &["--queue", "solo", "--sharded", "mail=3"]);
    // The tags of `mail` over 3 shards (protocol/shards.json).
    let tags = ["mail", "mail#1", "mail#2"];
    let mut wants: Vec<Want> = (0..3).map(Want::of).collect();
    // A shard's tag in echomq.auto-promote (its shard has nothing due, so
    // the timer moves nothing): shown within the queue, not beside it.
    wants[2].due = 0;
    let mut soon: Vec<Vec<i64>> = Vec::new();
    for (tag, w) in tags.iter().zip(&wants) {
        soon.push(write_shard(&mut con, tag, *w));
    }
    let _: () = q!(
        &mut con,
        "CONFIG",
        "SET",
        "echomq.auto-promote",
        "{mail#2}:schedule {mail#2}:pending"
    );
    // Release limits of the two first shards, as a library's split leaves
    // them: shard 0's 1 due fits its burst, shard 1's 2 due do too.
    let _: () = q!(
        &mut con,
        "CONFIG",
        "SET",
        "echomq.release-limits",
        "{mail}:schedule 10/s 1 {mail#1}:schedule 10/s 1"
    );
    let _: i64 = q!(&mut con, "LPUSH", "{solo}:pending", "x");

    let (status, api) = web.api();
    assert_eq!(status, 200, "{api}");
    assert_eq!(names(&api), ["solo", "mail"], "{api}");
    // However many shards, the same three round trips.
    assert_eq!(api["round_trips"], json!(3), "{api}");
    let mail = queue(&api, "mail");
    assert_eq!(mail["shards"], json!(3), "{mail}");
    assert!(mail.get("per_shard").is_none(), "only on request: {mail}");
    assert_eq!(counts_of(mail), summed(&wants), "{mail}");
    assert!(queue(&api, "solo").get("shards").is_none(), "{api}");
    // The spread: bucket by bucket, the shards' members in the window.
    let (start, end) = (
        api["window"]["start_ms"].as_i64().expect("start"),
        api["window"]["end_ms"].as_i64().expect("end"),
    );
    let all: Vec<i64> = soon.iter().flatten().copied().collect();
    assert_eq!(spread_of(mail), buckets_of(&all, start, end, 60), "{mail}");
    // The summed limit: both limited shards' rates and bursts; each
    // shard's due beyond its own burst held back (1 of shard 1's 2).
    let r = &mail["release"];
    assert_eq!(
        (
            r["limited"].clone(),
            r["rate_per_second"].clone(),
            r["burst"].clone(),
            r["held_back"].clone()
        ),
        (json!(true), json!(20.0), json!(2), json!(1)),
        "{mail}"
    );

    let (status, body) = web.get("/api/queues?shards=1");
    assert_eq!(status, 200, "{body}");
    let api: Json = serde_json::from_str(&body).expect("JSON");
    let mail = queue(&api, "mail");
    let shards = mail["per_shard"].as_array().expect("per_shard");
    let got_tags: Vec<&str> = shards.iter().map(|s| s["tag"].as_str().unwrap()).collect();
    assert_eq!(got_tags, tags, "{mail}");
    for ((sh, w), at) in shards.iter().zip(&wants).zip(&soon) {
        assert_eq!(counts_of(sh), w.counts(), "{sh}");
        assert_eq!(spread_of(sh), buckets_of(at, start, end, 60), "{sh}");
        assert!(
            sh.get("node").is_none(),
            "a single server names no node: {sh}"
        );
    }
    assert_eq!(shards[1]["release"]["held_back"], json!(1), "{mail}");
    assert_eq!(shards[2]["release"]["limited"], json!(false), "{mail}");
    assert_eq!(counts_of(mail), summed(&wants), "{mail}");
    assert_eq!(api["round_trips"], json!(3), "{api}");

    let (status, text) = web.get("/metrics");
    assert_eq!(status, 200, "{text}");
    assert_metrics_equal_the_api(&text, &api, "mail");
    assert_eq!(
        samples(&text).get("echomq_release_rate_per_second{queue=\"mail\"}"),
        Some(&20.0),
        "{text}"
    );
    let test = "a_sharded_queue_is_one_queue_its_shards_summed_on_one_server";
    if let Some(tool) = node::or_skip(test, promtool()) {
        promtool_check(&tool, &text);
    }
}

#[test]
fn bad_sharded_arguments_are_refused_with_exit_code_2() {
    for (args, says) in [
        (&["--sharded", "mail"][..], "is not NAME=N"),
        (&["--sharded", "mail=0"], "not in 1..=1024"),
        (&["--sharded", "mail=1025"], "not in 1..=1024"),
        (&["--sharded", "mail=x"], "not in 1..=1024"),
        (&["--sharded", "=4"], "empty name"),
        (
            &["--sharded", "mail=2", "--sharded", "mail=3"],
            "with 2 and with 3",
        ),
        (
            &["--queue", "mail", "--sharded", "mail=2"],
            "both as --queue and as --sharded",
        ),
    ] {
        let out = Command::new(web_binary())
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .output()
            .expect("run echomq-web");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing listens");
    }
}

#[test]
fn on_a_cluster_each_shard_is_read_on_its_primary_and_summed() {
    let cluster = Cluster::start();
    let primaries = cluster.primaries();
    assert_eq!(primaries.len(), 3);
    let owner = |tag: &str| cluster.owner(cluster.keyslot(&format!("{{{tag}}}:schedule")));
    // A name whose 6 shards leave no primary without one, so that every
    // primary's reads are the full three round trips.
    let (name, tags) = (0..)
        .map(|i| format!("mail{i}"))
        .map(|n| {
            let tags = shard_tags(&cluster, &n, 6);
            (n, tags)
        })
        .find(|(_, tags)| {
            primaries
                .iter()
                .all(|p| tags.iter().any(|t| owner(t) == *p))
        })
        .expect("a name");
    let sharded = format!("{name}=6");
    // --url: a primary; the others are found from its slot map.
    let web = Web::start(&cluster.nodes[primaries[0]].url(), &["--sharded", &sharded]);
    let wants: Vec<Want> = (0..6).map(Want::of).collect();
    let mut soon = Vec::new();
    for (tag, w) in tags.iter().zip(&wants) {
        soon.push(write_shard(&mut cluster.conn(owner(tag)), tag, *w));
    }
    let (status, api) = web.api();
    assert_eq!(status, 200, "{api}");
    assert_eq!(names(&api), vec![name.as_str()], "{api}");
    let (status, body) = web.get("/api/queues?shards=1");
    assert_eq!(status, 200, "{body}");
    let api: Json = serde_json::from_str(&body).expect("JSON");
    // The slot map is not read again: each primary's three round trips.
    assert_eq!(api["round_trips"], json!(9), "{api}");
    let q = queue(&api, &name);
    assert_eq!(q["shards"], json!(6), "{q}");
    assert_eq!(counts_of(q), summed(&wants), "{q}");
    let (start, end) = (
        api["window"]["start_ms"].as_i64().expect("start"),
        api["window"]["end_ms"].as_i64().expect("end"),
    );
    let all: Vec<i64> = soon.iter().flatten().copied().collect();
    assert_eq!(spread_of(q), buckets_of(&all, start, end, 60), "{q}");
    let shards = q["per_shard"].as_array().expect("per_shard");
    assert_eq!(shards.len(), 6, "{q}");
    for ((sh, tag), w) in shards.iter().zip(&tags).zip(&wants) {
        assert_eq!(sh["tag"], json!(tag), "{sh}");
        // Read on the primary that owns its slot, not on the --url one.
        let on = format!("127.0.0.1:{}", cluster.port(owner(tag)));
        assert_eq!(sh["node"], json!(on), "{sh}");
        assert_eq!(counts_of(sh), w.counts(), "{sh}");
    }
    // Each primary counts the shards it serves.
    for n in api["nodes"].as_array().expect("nodes") {
        let p = primaries
            .iter()
            .find(|&&p| n["addr"] == json!(format!("127.0.0.1:{}", cluster.port(p))))
            .unwrap_or_else(|| panic!("{n}"));
        let served = tags.iter().filter(|t| owner(t) == *p).count();
        assert_eq!(n["queues"], json!(served), "{n}");
        assert_eq!(n["error"], Json::Null, "{n}");
    }

    let (status, text) = web.get("/metrics");
    assert_eq!(status, 200, "{text}");
    assert_metrics_equal_the_api(&text, &api, &name);
    let test = "on_a_cluster_each_shard_is_read_on_its_primary_and_summed";
    if let Some(tool) = node::or_skip(test, promtool()) {
        promtool_check(&tool, &text);
    }
}

/// The tags of `name` over `n` shards by the rule of docs/clients.md, the
/// slots asked of the cluster itself (CLUSTER KEYSLOT), so the test does not
/// share echomq-web's CRC16.
fn shard_tags(cluster: &Cluster, name: &str, n: usize) -> Vec<String> {
    let mut tags = vec![name.to_string()];
    let mut slots = vec![cluster.keyslot(name)];
    for i in 1..n {
        let mut tag = format!("{name}#{i}");
        let mut k = 0;
        while slots.contains(&cluster.keyslot(&tag)) {
            k += 1;
            tag = format!("{name}#{i}.{k}");
        }
        slots.push(cluster.keyslot(&tag));
        tags.push(tag);
    }
    tags
}

#[test]
fn the_page_shows_a_sharded_queue_once_with_its_shards_in_chromium() {
    let test = "the_page_shows_a_sharded_queue_once_with_its_shards_in_chromium";
    let Some(mut browser) = Browser::start(test) else {
        return;
    };
    let server = Server::start();
    let mut con = server.conn();
    let web = Web::start(&server.url(), &["--sharded", "mail=3", "--queue", "solo"]);
    let tags = ["mail", "mail#1", "mail#2"];
    let wants: Vec<Want> = (0..3).map(Want::of).collect();
    for (tag, w) in tags.iter().zip(&wants) {
        write_shard(&mut con, tag, *w);
    }
    browser.open(&format!("{}/", web.base));
    let got = browser.wait(
        &format!(
            "(() => {{ const v = {}; return v && v.scheduled > 0 && v; }})()",
            card_js("mail")
        ),
        "the mail card",
    );
    let sum = summed(&wants);
    for (f, want) in FIELDS.iter().zip(sum) {
        assert_eq!(got[*f], json!(want), "{f}: {got}");
    }
    // One card for the queue and one for solo: no card per shard.
    assert_eq!(got["cards"], json!(2), "{got}");
    const SHARDS_JS: &str = r#"(() => {
      const d = document.querySelector('section.queue[data-queue="mail"] details.shards');
      if (!d || d.hidden) return null;
      const rows = [...d.querySelectorAll("tbody tr")].map(tr => ({
        tag: tr.dataset.shard,
        counts: ["scheduled", "due", "pending", "in_flight", "dead"].map(
          f => +tr.querySelector(`[data-field="${f}"]`).textContent.replace(/[^0-9]/g, "")),
        visible: tr.checkVisibility() }));
      return { summary: d.querySelector("summary").textContent, open: d.open, rows,
               singles: document.querySelectorAll('section.queue details.shards:not([hidden])').length };
    })()"#;
    let closed = browser.wait(SHARDS_JS, "the shards of mail");
    assert_eq!(closed["summary"], json!("3 shards"), "{closed}");
    assert_eq!(closed["open"], json!(false), "{closed}");
    assert_eq!(closed["singles"], json!(1), "solo has no shards: {closed}");
    assert!(
        closed["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .all(|r| r["visible"] == json!(false)),
        "closed until asked: {closed}"
    );
    // Opened: each shard's tag and counts, and still open after the next polls.
    browser.call(json!({"op": "eval", "js":
        "document.querySelector('section.queue[data-queue=\"mail\"] details.shards summary').click()"}));
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let open = browser.wait(
        &format!("(() => {{ const v = {SHARDS_JS}; return v && v.open && v; }})()"),
        "the shards opened",
    );
    let rows = open["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 3, "{open}");
    for ((row, tag), w) in rows.iter().zip(tags).zip(&wants) {
        assert_eq!(row["tag"], json!(tag), "{open}");
        assert_eq!(row["counts"], json!(w.counts()), "{open}");
        assert_eq!(row["visible"], json!(true), "{open}");
    }
    browser.screenshot(&node::target_dir().join("web/echomq-web-shards.png"));
}

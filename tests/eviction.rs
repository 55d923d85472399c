//! The eviction guard: `echomq_eviction_policy_safe` follows maxmemory-policy
//! at once, and the log gets one warning line per change to an unsafe policy.

mod common;

use std::time::{Duration, Instant};

use common::*;

const POLICIES: [(&str, &str); 8] = [
    ("noeviction", "1"),
    ("allkeys-lru", "0"),
    ("allkeys-lfu", "0"),
    ("allkeys-random", "0"),
    ("volatile-lru", "1"),
    ("volatile-lfu", "1"),
    ("volatile-random", "1"),
    ("volatile-ttl", "1"),
];

fn field(con: &mut Connection) -> String {
    info_field(con, "echomq", "echomq_eviction_policy_safe")
}

/// The guard's warning lines in the server log so far, by policy named.
fn warnings(server: &Server) -> Vec<String> {
    server
        .log()
        .lines()
        .filter_map(|l| l.split("WARNING maxmemory-policy is ").nth(1))
        .map(|rest| rest.split(':').next().unwrap_or("").to_string())
        .collect()
}

/// The log is written by the server process: give it a moment to appear.
fn wait_for_warnings(server: &Server, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let seen = warnings(server);
        if seen.len() >= n || Instant::now() > deadline {
            return seen;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn every_policy_set_gives_the_field_its_value_at_once() {
    let server = Server::start();
    let mut con = server.conn();
    assert_eq!(field(&mut con), "1", "the default policy is noeviction");
    assert!(warnings(&server).is_empty());
    for round in 0..2 {
        for (policy, want) in POLICIES {
            let _: () = q!(&mut con, "CONFIG", "SET", "maxmemory-policy", policy);
            assert_eq!(field(&mut con), want, "{policy} (round {round})");
        }
    }
    // each change to an unsafe policy logged once: 3 per round
    let seen = wait_for_warnings(&server, 6);
    assert_eq!(
        seen,
        ["allkeys-lru", "allkeys-lfu", "allkeys-random"].repeat(2),
        "{}",
        server.log()
    );
}

#[test]
fn loading_into_an_unsafe_server_warns_once_and_each_change_once_more() {
    let server = Server::start_with(Options::default().arg("maxmemory-policy", "allkeys-lfu"));
    let mut con = server.conn();
    assert_eq!(field(&mut con), "0");
    assert_eq!(wait_for_warnings(&server, 1), ["allkeys-lfu"]);
    let line = server
        .log()
        .lines()
        .find(|l| l.contains("WARNING maxmemory-policy"))
        .unwrap_or_default()
        .to_string();
    assert!(
        line.contains("noeviction") && line.contains("evict"),
        "{line}"
    );

    // the same value again is no change: no new line
    let _: () = q!(&mut con, "CONFIG", "SET", "maxmemory-policy", "allkeys-lfu");
    // from one unsafe policy to another: one line each
    let _: () = q!(&mut con, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru");
    assert_eq!(field(&mut con), "0");
    let _: () = q!(
        &mut con,
        "CONFIG",
        "SET",
        "maxmemory-policy",
        "allkeys-random"
    );
    assert_eq!(
        wait_for_warnings(&server, 3),
        ["allkeys-lfu", "allkeys-lru", "allkeys-random"]
    );
    // to noeviction: safe, and no line
    let _: () = q!(&mut con, "CONFIG", "SET", "maxmemory-policy", "noeviction");
    assert_eq!(field(&mut con), "1");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(warnings(&server).len(), 3, "{}", server.log());

    // and back to an unsafe policy: a line again
    let _: () = q!(&mut con, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru");
    assert_eq!(wait_for_warnings(&server, 4).len(), 4);
}

#[test]
fn a_restart_reads_the_policy_the_config_file_kept() {
    let dir = TempDir::new("eviction");
    let conf = dir.0.join("valkey.conf");
    std::fs::write(&conf, format!("loadmodule {}\n", module_path().display())).unwrap();
    let options = Options {
        config: Some(conf.clone()),
        load_module: false,
        cwd: Some(dir.0.clone()),
        ..Options::default()
    };
    let mut server = Server::start_in(options.clone(), &dir.0);
    let mut con = server.conn();
    assert_eq!(field(&mut con), "1");
    let _: () = q!(
        &mut con,
        "CONFIG",
        "SET",
        "maxmemory-policy",
        "allkeys-random"
    );
    let _: () = q!(&mut con, "CONFIG", "REWRITE");
    server.shutdown();
    let text = std::fs::read_to_string(&conf).unwrap();
    assert!(text.contains("maxmemory-policy allkeys-random"), "{text}");
    let server = Server::start_in(options, &dir.0);
    let mut con = server.conn();
    assert_eq!(field(&mut con), "0");
    assert!(
        server
            .log()
            .contains("WARNING maxmemory-policy is allkeys-random"),
        "{}",
        server.log()
    );
}

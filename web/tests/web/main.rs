//! echomq-web against a real valkey-server with the module: the JSON of
//! /api/queues checked exactly against queues built with known counts, and
//! the page in headless Chromium (Debian's chromium-headless-shell, driven by
//! playwright-core from target/web-node): the numbers and the drawn histogram in
//! the rendered DOM, a screenshot, an outage shown and recovered from, and the
//! eviction warning; /metrics read by Prometheus's own `promtool check
//! metrics` and by the parser of the Python client `prometheus_client`; and
//! its security: no password shown anywhere, TLS, ACL users with only what
//! they need, and the HTTP bounds and headers.
//!
//! One test binary (`cargo test -p echomq-web --test web`), one module per area.

use echomq_testkit as common;

mod harness;
mod node;

mod api;
mod cluster;
mod groups;
mod metrics;
mod page;
mod repeats;
mod security;
mod shards;

#!/usr/bin/env bash
# The queues of docs/echomq-web.png, on the server at 127.0.0.1:PORT (default
# 6379, `make run`): "emails", a cohort of 100 retried without jitter (one
# instant), "orders", 100 retried with full jitter over 55 s, and "billing", a
# backlog with due and dead-lettered jobs. The picture then adds a worker:
#   bash scripts/web-scene.sh
#   w="cargo run -q --release -p echomq-client --example crossworker --"
#   $w add --url redis://127.0.0.1:6379/ --queue jobs --count 3000
#   $w work --url redis://127.0.0.1:6379/ --queue jobs --fail-first 2 \
#       --backoff jitter:exponential:4000:50000 --sleep-ms 20 &
#   make web WEB_QUEUES="orders emails billing jobs"
set -euo pipefail
port=${1:-6379}
c="valkey-cli -p $port"
{ echo MULTI; for i in $(seq 1 100); do echo "ECHO.RETRY {emails}:schedule mail-$i exponential:1000:30000 6"; done; echo EXEC; } | $c > /dev/null
{ echo MULTI; for i in $(seq 1 100); do echo "ECHO.RETRY {orders}:schedule order-$i jitter:exponential:1000:55000 7"; done; echo EXEC; } | $c > /dev/null
for i in $(seq 1 14); do $c LPUSH {billing}:pending inv-$i >/dev/null; done
now=$($c TIME | head -1)000
for i in $(seq 1 3); do $c ZADD {billing}:dead $(( now - i*60000 )) inv-dead-$i >/dev/null; done
for i in $(seq 1 6); do $c ZADD {billing}:schedule $(( now - 2000 )) inv-due-$i >/dev/null; done
$c ZADD {orders}:dead $now order-poison > /dev/null

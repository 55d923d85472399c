//! Release limits: how many due members may leave a schedule now. Pure, no
//! server types; the clock comes in as `now_ms`, so tests pin every rule.
//!
//! A fixed limit is the generic cell rate algorithm (GCRA): one theoretical
//! arrival time (TAT) per schedule; a release of `k` members at `t` is
//! allowed while `max(TAT, t) + k*T <= t + burst*T`, with `T` the emission
//! interval, and moves TAT to `max(TAT, t) + k*T`. Over any interval of `D`
//! ms at most `burst + floor(D * rate)` members leave.
//!
//! Exact integer arithmetic: a rate of `n` per `period_ms` has `T =
//! period_ms / n` ms, which is rarely an integer, so time is counted in ticks
//! of `1 / rate_scaled` ms, where `T` is `period_ms * SCALE` ticks exactly.
//! An adaptive limit changes the rate in force; TAT is then converted to the
//! new ticks, rounded up (the conversion never grants a release).
//!
//! An adaptive limit (AIMD) starts at its ceiling; every window it halves
//! when the failures exceed a share of the releases, and otherwise rises by
//! 2 % of the ceiling if the window released anything or left members held;
//! never above the ceiling, never below 1 % of it.

use std::collections::BTreeMap;

/// Rates are kept in units of `1 / SCALE` member per period, so halving and
/// the 1 % floor stay exact down to a ceiling of one member an hour.
pub const SCALE: u128 = 10_000;
/// The largest `n` of a rate `<n>/s` and the largest burst.
pub const MAX_RATE: u64 = 1_000_000;
pub const MAX_BURST: u64 = 1_000_000;
/// The longest `ECHO.HOLD`: a day.
pub const MAX_HOLD_MS: u64 = 86_400_000;

/// A configured rate: `n` members per `period_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    pub n: u64,
    pub period_ms: u64,
    pub kind: LimitKind,
}

/// The kinds of limit: how the rate in force follows the configured one. A
/// new algorithm is a new variant with its word in `prefix` and its rule in
/// `on_respec` and `after_window`; the limiter branches nowhere else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitKind {
    /// `<rate>`: the rate in force is the configured one, always.
    Fixed,
    /// `adaptive:<rate>`: `n / period` is the ceiling; the AIMD rule
    /// (`adapt`) moves the rate in force below it, window by window.
    Adaptive,
}

impl LimitKind {
    /// Every kind, in the order the grammar tries their prefixes (the empty
    /// one last).
    pub const ALL: [LimitKind; 2] = [LimitKind::Adaptive, LimitKind::Fixed];

    /// The word that starts a rate of this kind in `echomq.release-limits`
    /// (any case).
    pub fn prefix(self) -> &'static str {
        match self {
            LimitKind::Fixed => "",
            LimitKind::Adaptive => "adaptive:",
        }
    }

    /// The rate in force when a limit of this kind takes a changed spec whose
    /// ceiling is `ceiling`, the limit having been of kind `before` with
    /// `in_force`: an adaptive limit that stays adaptive keeps what it had
    /// learnt (capped by the new ceiling); any other starts at the ceiling.
    fn on_respec(self, before: LimitKind, in_force: u128, ceiling: u128) -> u128 {
        match (self, before) {
            (LimitKind::Adaptive, LimitKind::Adaptive) => in_force.min(ceiling),
            _ => ceiling,
        }
    }

    /// The rate in force after a window that saw `window`, and whether it
    /// was a decrease: `None` when this kind never changes it.
    fn after_window(
        self,
        in_force: u128,
        ceiling: u128,
        window: Window,
        failure_percent: u64,
    ) -> Option<(u128, bool)> {
        match self {
            LimitKind::Fixed => None,
            LimitKind::Adaptive => Some(adapt(in_force, ceiling, window, failure_percent)),
        }
    }
}

impl Rate {
    /// Members per second, for display.
    pub fn per_second(self) -> f64 {
        self.n as f64 * 1000.0 / self.period_ms as f64
    }
}

/// One `schedule rate burst` entry of `echomq.release-limits`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitSpec {
    pub schedule: Vec<u8>,
    pub rate: Rate,
    pub burst: u64,
}

/// The adaptive rule's settings (`echomq.adaptive-*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Adaptive {
    pub window_ms: u64,
    pub failure_percent: u64,
}

impl Default for Adaptive {
    fn default() -> Self {
        Adaptive {
            window_ms: 200,
            failure_percent: 10,
        }
    }
}

/// What one window saw, for the adaptive rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
    pub failures: u64,
    pub releases: u64,
    /// A release left due members in the schedule because of the limit.
    pub held: bool,
}

/// The AIMD update: the rate in force after a window, both rates scaled by
/// `SCALE`, and whether it was a decrease.
pub fn adapt(in_force: u128, ceiling: u128, window: Window, failure_percent: u64) -> (u128, bool) {
    let floor = (ceiling / 100).max(1);
    let failing = u128::from(window.failures) * 100
        > u128::from(failure_percent) * u128::from(window.releases);
    if failing {
        ((in_force / 2).max(floor), true)
    } else if window.releases > 0 || window.held {
        ((in_force + ceiling * 2 / 100).min(ceiling), false)
    } else {
        (in_force, false)
    }
}

/// The arithmetic of one GCRA bucket, apart from where its theoretical
/// arrival time (TAT) is kept: `Limit` applies it to a schedule's TAT, the
/// fair release (`fairness`) to each group's. Time is counted in ticks of
/// `1 / in_force` ms, so the emission interval `T = period_ms / (in_force /
/// SCALE)` ms is exactly `period_ms * SCALE` ticks. Saturating maths: the
/// largest values (a clock of `i64::MAX` ms times a rate of 10^10) stay far
/// below `u128::MAX`, so saturation never changes a result in range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gcra {
    /// The rate in force, in members per period times SCALE.
    pub in_force: u128,
    pub period_ms: u64,
    pub burst: u64,
}

impl Gcra {
    /// A fixed rate's bucket: the rate in force is the configured one.
    pub fn fixed(rate: Rate, burst: u64) -> Gcra {
        Gcra {
            in_force: u128::from(rate.n).saturating_mul(SCALE),
            period_ms: rate.period_ms,
            burst,
        }
    }

    pub fn interval_ticks(self) -> u128 {
        u128::from(self.period_ms).saturating_mul(SCALE)
    }

    pub fn now_ticks(self, now_ms: i64) -> u128 {
        // Before 1970 counts as 0: a server clock is a Unix time.
        u128::try_from(now_ms)
            .unwrap_or(0)
            .saturating_mul(self.in_force)
    }

    /// How many members may leave at `now_ms` with `tat` (at most the burst).
    pub fn available(self, tat: u128, now_ms: i64) -> u64 {
        let t = self.interval_ticks();
        let now = self.now_ticks(now_ms);
        let base = tat.max(now);
        let room = now
            .saturating_add(u128::from(self.burst).saturating_mul(t))
            .saturating_sub(base);
        let whole = room.checked_div(t).unwrap_or(0);
        u64::try_from(whole).unwrap_or(u64::MAX).min(self.burst)
    }

    /// The TAT after `count` members left at `now_ms`.
    pub fn after(self, tat: u128, now_ms: i64, count: u64) -> u128 {
        tat.max(self.now_ticks(now_ms))
            .saturating_add(u128::from(count).saturating_mul(self.interval_ticks()))
    }

    /// `tat` counted in `to`'s ticks at `now_ms`, keeping the bucket's
    /// level: TAT stays as many emission intervals ahead of now as it was,
    /// counted in the new interval (rounded up, so the change never grants a
    /// release), and never more than an empty bucket of the new burst (a
    /// lowered burst must not leave the bucket owing releases it can never
    /// have had).
    pub fn rescale(self, tat: u128, to: Gcra, now_ms: i64) -> u128 {
        let ahead = tat.saturating_sub(self.now_ticks(now_ms));
        let ahead = ahead.saturating_mul(u128::from(to.period_ms));
        // A period is at least 1 ms (the grammar's); 0 would be no bucket.
        let ahead = match u128::from(self.period_ms) {
            0 => 0,
            period_ms => ahead.div_ceil(period_ms),
        };
        let ahead = ahead.min(u128::from(to.burst).saturating_mul(to.interval_ticks()));
        to.now_ticks(now_ms).saturating_add(ahead)
    }

    /// The first ms at which one member may leave with `tat` (in the past
    /// when one may already): `available >= 1` from then on. With a TAT
    /// ahead of now, one may leave once now reaches `tat - (burst - 1) * T`.
    pub fn room_at_ms(self, tat: u128) -> i64 {
        let slack = u128::from(self.burst.saturating_sub(1)).saturating_mul(self.interval_ticks());
        self.ms_at_or_after(tat.saturating_sub(slack))
    }

    /// The first whole ms at or after `ticks`.
    fn ms_at_or_after(self, ticks: u128) -> i64 {
        let ms = if self.in_force == 0 {
            0
        } else {
            ticks.div_ceil(self.in_force)
        };
        i64::try_from(ms).unwrap_or(i64::MAX)
    }

    /// The first ms at which `tat` no longer matters: from then on `tat <=
    /// now`, and a bucket with no TAT at all behaves the same, so a store
    /// may drop the TAT then (a key written with `PXAT` this value).
    pub fn matters_until_ms(self, tat: u128) -> i64 {
        self.ms_at_or_after(tat)
    }
}

/// The state of one limited schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limit {
    spec: LimitSpec,
    /// The rate in force, in members per period times SCALE.
    in_force: u128,
    /// The theoretical arrival time, in ticks of `1 / in_force` ms (so that
    /// `T = period_ms * SCALE` ticks).
    tat: u128,
    window_start_ms: i64,
    window: Window,
    /// Since the entry was set.
    released: u64,
    failures: u64,
}

impl Limit {
    pub fn new(spec: LimitSpec, now_ms: i64) -> Limit {
        let in_force = u128::from(spec.rate.n) * SCALE;
        Limit {
            spec,
            in_force,
            tat: 0,
            window_start_ms: now_ms,
            window: Window::default(),
            released: 0,
            failures: 0,
        }
    }

    pub fn spec(&self) -> &LimitSpec {
        &self.spec
    }

    /// Takes a changed spec at `now_ms`: the state goes on, so the bucket
    /// keeps its level (no fresh burst), and the new rate spaces releases
    /// from the next one on.
    pub fn respec(&mut self, spec: LimitSpec, now_ms: i64) {
        let ceiling = u128::from(spec.rate.n) * SCALE;
        let in_force = spec
            .rate
            .kind
            .on_respec(self.spec.rate.kind, self.in_force, ceiling);
        self.rescale(in_force, spec.rate.period_ms, spec.burst, now_ms);
        self.spec = spec;
    }

    /// The GCRA arithmetic at the rate in force.
    fn gcra(&self) -> Gcra {
        Gcra {
            in_force: self.in_force,
            period_ms: self.spec.rate.period_ms,
            burst: self.spec.burst,
        }
    }

    /// Moves to a new rate in force (and period) at `now_ms`, keeping the
    /// bucket's level (`Gcra::rescale`).
    fn rescale(&mut self, in_force: u128, period_ms: u64, burst: u64, now_ms: i64) {
        let to = Gcra {
            in_force,
            period_ms,
            burst,
        };
        self.tat = self.gcra().rescale(self.tat, to, now_ms);
        self.in_force = in_force;
    }

    /// How many members may leave at `now_ms` (at most the burst).
    pub fn available(&self, now_ms: i64) -> u64 {
        self.gcra().available(self.tat, now_ms)
    }

    /// Records `count` members released at `now_ms`; `held` when due
    /// members stayed because of the limit.
    pub fn release(&mut self, now_ms: i64, count: u64, held: bool, adaptive: Adaptive) -> bool {
        let decreased = self.roll(now_ms, adaptive);
        self.tat = self.gcra().after(self.tat, now_ms, count);
        self.released = self.released.saturating_add(count);
        self.window.releases = self.window.releases.saturating_add(count);
        self.window.held |= held;
        decreased
    }

    /// Records a failure (an ECHO.RETRY naming the schedule) at `now_ms`.
    pub fn fail(&mut self, now_ms: i64, adaptive: Adaptive) -> bool {
        let decreased = self.roll(now_ms, adaptive);
        self.failures = self.failures.saturating_add(1);
        self.window.failures = self.window.failures.saturating_add(1);
        decreased
    }

    /// Closes the window if it is over, applying the rule of the limit's
    /// kind (`LimitKind::after_window`: the AIMD rule for an adaptive one):
    /// whether the rate in force decreased.
    pub fn roll(&mut self, now_ms: i64, adaptive: Adaptive) -> bool {
        let window_ms = i64::try_from(adaptive.window_ms).unwrap_or(i64::MAX);
        if now_ms.saturating_sub(self.window_start_ms) < window_ms {
            return false;
        }
        let window = std::mem::take(&mut self.window);
        self.window_start_ms = now_ms;
        let ceiling = u128::from(self.spec.rate.n) * SCALE;
        let Some((in_force, decreased)) = self.spec.rate.kind.after_window(
            self.in_force,
            ceiling,
            window,
            adaptive.failure_percent,
        ) else {
            return false;
        };
        self.rescale(in_force, self.spec.rate.period_ms, self.spec.burst, now_ms);
        decreased
    }

    /// The rate in force, in members per second.
    pub fn in_force_per_second(&self) -> f64 {
        self.in_force as f64 / SCALE as f64 * 1000.0 / self.spec.rate.period_ms as f64
    }

    pub fn released(&self) -> u64 {
        self.released
    }

    pub fn failures(&self) -> u64 {
        self.failures
    }
}

/// `ECHO.HOLD`'s rule: the hold to write for a call of `ms` at `now_ms`
/// when `in_force` ends then (an ended hold is none): `None` keeps what is
/// there (a longer hold in force is kept, and `ms = 0` is the caller's lift).
pub fn hold_until(in_force: Option<i64>, ms: u64, now_ms: i64) -> Option<i64> {
    let until = now_ms.saturating_add(i64::try_from(ms).unwrap_or(i64::MAX));
    match in_force {
        Some(end) if end > now_ms && end >= until => None,
        _ => Some(until),
    }
}

/// Every limited schedule. A B-tree: its `new` is const, so the table can
/// start a static, and the table is as small as the config. (Holds live in
/// the keyspace, beside their schedule.)
#[derive(Debug, Default)]
pub struct Limits {
    limits: BTreeMap<Vec<u8>, Limit>,
}

impl Limits {
    pub const fn new() -> Limits {
        Limits {
            limits: BTreeMap::new(),
        }
    }

    /// Takes a new list of entries: an unchanged entry keeps its state, a
    /// changed one its arrival time, a removed one is dropped.
    pub fn configure(&mut self, specs: Vec<LimitSpec>, now_ms: i64) {
        let mut old = std::mem::take(&mut self.limits);
        for spec in specs {
            let limit = match old.remove(&spec.schedule) {
                Some(limit) if limit.spec == spec => limit,
                Some(mut limit) => {
                    limit.respec(spec.clone(), now_ms);
                    limit
                }
                None => Limit::new(spec.clone(), now_ms),
            };
            self.limits.insert(spec.schedule, limit);
        }
    }

    /// Drops every state (a module load starts afresh, an unload frees it).
    pub fn clear(&mut self) {
        self.limits = BTreeMap::new();
    }

    pub fn is_empty(&self) -> bool {
        self.limits.is_empty()
    }

    /// Whether `schedule` is listed (has a limit, whatever it allows now).
    pub fn contains(&self, schedule: &[u8]) -> bool {
        self.limits.contains_key(schedule)
    }

    pub fn get_mut(&mut self, schedule: &[u8]) -> Option<&mut Limit> {
        self.limits.get_mut(schedule)
    }

    /// How many members may leave `schedule` at `now_ms`: `None` when it is
    /// not limited.
    pub fn allowance(&self, schedule: &[u8], now_ms: i64) -> Option<u64> {
        self.limits.get(schedule).map(|l| l.available(now_ms))
    }

    /// Records a release from `schedule`: whether the adaptive rule decreased.
    pub fn released(
        &mut self,
        schedule: &[u8],
        now_ms: i64,
        count: u64,
        held: bool,
        adaptive: Adaptive,
    ) -> bool {
        self.limits
            .get_mut(schedule)
            .is_some_and(|l| l.release(now_ms, count, held, adaptive))
    }

    /// Records a failure of a job of `schedule`: whether the adaptive rule decreased.
    pub fn failed(&mut self, schedule: &[u8], now_ms: i64, adaptive: Adaptive) -> bool {
        self.limits
            .get_mut(schedule)
            .is_some_and(|l| l.fail(now_ms, adaptive))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(n: u64, period_ms: u64, burst: u64, adaptive: bool) -> LimitSpec {
        LimitSpec {
            schedule: b"s".to_vec(),
            rate: Rate {
                n,
                period_ms,
                kind: if adaptive {
                    LimitKind::Adaptive
                } else {
                    LimitKind::Fixed
                },
            },
            burst,
        }
    }

    /// Asks for `want` every `step_ms` from `start` to `end`, releasing what
    /// is allowed: the (time, count) of each release.
    fn drive(limit: &mut Limit, start: i64, end: i64, step_ms: i64, want: u64) -> Vec<(i64, u64)> {
        let mut out = Vec::new();
        let mut t = start;
        while t <= end {
            let k = limit.available(t).min(want);
            limit.release(t, k, k < want, Adaptive::default());
            if k > 0 {
                out.push((t, k));
            }
            t += step_ms;
        }
        out
    }

    #[test]
    fn a_fresh_limit_allows_its_burst_then_its_rate() {
        let t0 = 1_800_000_000_000;
        let mut limit = Limit::new(spec(100, 1000, 10, false), t0);
        assert_eq!(limit.available(t0), 10);
        limit.release(t0, 10, true, Adaptive::default());
        assert_eq!(limit.available(t0), 0);
        assert_eq!(limit.available(t0 + 9), 0);
        assert_eq!(limit.available(t0 + 10), 1);
        assert_eq!(limit.available(t0 + 95), 9);
        assert_eq!(limit.available(t0 + 100_000), 10, "at most the burst");
    }

    #[test]
    fn every_window_releases_at_most_burst_plus_rate_times_length() {
        let t0 = 1_800_000_000_000;
        for (n, period_ms, burst, step_ms) in [
            (100, 1000, 10, 1),
            (100, 1000, 10, 7),
            (3, 1000, 1, 1),
            (7, 60_000, 3, 500),
            (1_000_000, 1000, 1000, 1),
        ] {
            let mut limit = Limit::new(spec(n, period_ms, burst, false), t0);
            let end = t0 + 10_000;
            let releases = drive(&mut limit, t0, end, step_ms, u64::MAX);
            // Every window [a, b] of release instants.
            for (i, &(a, _)) in releases.iter().enumerate() {
                let mut sum = 0u128;
                for &(b, k) in &releases[i..] {
                    sum += u128::from(k);
                    let length = u128::try_from(b - a).unwrap();
                    let bound = u128::from(burst) + length * u128::from(n) / u128::from(period_ms);
                    assert!(
                        sum <= bound,
                        "{n}/{period_ms} burst {burst}: {sum} in [{a}, {b}]"
                    );
                }
            }
            let total: u64 = releases.iter().map(|r| r.1).sum();
            let ideal = burst + 10_000 * n / period_ms;
            assert!(
                total.abs_diff(ideal) <= 1,
                "{n}/{period_ms}: {total} vs {ideal}"
            );
        }
    }

    #[test]
    fn three_a_second_for_ten_minutes_does_not_drift() {
        let t0 = 1_800_000_000_000;
        // Asked every 1 ms or every 10 ms (a tick), releases land on the
        // exact multiples of 333.33 ms: the arrival time stays ahead of the
        // clock, so a late ask loses nothing.
        for step_ms in [1, 8, 10] {
            let mut limit = Limit::new(spec(3, 1000, 2, false), t0);
            let releases = drive(&mut limit, t0, t0 + 600_000, step_ms, u64::MAX);
            let total: u64 = releases.iter().map(|r| r.1).sum();
            assert_eq!(total, 2 + 1800, "asked every {step_ms} ms");
        }
        // A burst of 1 leaves no room for lateness: each release served
        // after its instant (here up to 9 ms late) starts the next interval
        // from the clock, as in any GCRA or token bucket.
        let mut limit = Limit::new(spec(3, 1000, 1, false), t0);
        let releases = drive(&mut limit, t0, t0 + 600_000, 10, u64::MAX);
        let total: u64 = releases.iter().map(|r| r.1).sum();
        assert!((1750..=1801).contains(&total), "{total}");
    }

    #[test]
    fn a_changed_rate_keeps_the_arrival_time_and_applies_from_the_next_release() {
        let t0 = 1_800_000_000_000;
        let mut limits = Limits::default();
        limits.configure(vec![spec(10, 1000, 5, false)], t0);
        let k = limits.allowance(b"s", t0).unwrap();
        assert_eq!(k, 5);
        limits.released(b"s", t0, k, true, Adaptive::default());
        // The same words again: no fresh burst.
        limits.configure(vec![spec(10, 1000, 5, false)], t0);
        assert_eq!(limits.allowance(b"s", t0), Some(0));
        // 100/s: T is now 10 ms; the bucket is still empty (5 intervals
        // ahead), so the first release comes one new interval later.
        limits.configure(vec![spec(100, 1000, 5, false)], t0);
        assert_eq!(limits.allowance(b"s", t0), Some(0));
        assert_eq!(limits.allowance(b"s", t0 + 9), Some(0));
        assert_eq!(limits.allowance(b"s", t0 + 10), Some(1));
        assert_eq!(limits.allowance(b"s", t0 + 50), Some(5));
        // A period change keeps the level too: 5 intervals of 1/m ahead.
        limits.released(b"s", t0 + 50, 5, true, Adaptive::default());
        limits.configure(vec![spec(1, 60_000, 5, false)], t0 + 50);
        assert_eq!(limits.allowance(b"s", t0 + 50 + 59_999), Some(0));
        assert_eq!(limits.allowance(b"s", t0 + 50 + 60_000), Some(1));
        // Removed: no limit at all.
        limits.configure(vec![], t0);
        assert_eq!(limits.allowance(b"s", t0), None);
    }

    #[test]
    fn a_hold_only_grows_while_in_force() {
        let t0 = 1_000;
        assert_eq!(hold_until(None, 500, t0), Some(1500));
        assert_eq!(
            hold_until(Some(1500), 100, t0),
            None,
            "a longer hold is kept"
        );
        assert_eq!(hold_until(Some(1500), 500, t0), None, "an equal one too");
        assert_eq!(hold_until(Some(1500), 600, t0), Some(1600));
        assert_eq!(
            hold_until(Some(1500), 100, 1600),
            Some(1700),
            "an ended hold is replaced"
        );
        assert_eq!(hold_until(Some(1500), 100, 1500), Some(1600));
        assert_eq!(hold_until(None, u64::MAX, i64::MAX - 1), Some(i64::MAX));
    }

    #[test]
    fn a_lowered_burst_does_not_leave_the_schedule_owing() {
        let t0 = 1_800_000_000_000;
        let mut limits = Limits::default();
        limits.configure(vec![spec(10, 1000, 1000, false)], t0);
        limits.released(b"s", t0, 1000, true, Adaptive::default());
        // 10/s burst 10: an empty bucket is 10 intervals, not 1000.
        limits.configure(vec![spec(10, 1000, 10, false)], t0);
        assert_eq!(limits.allowance(b"s", t0 + 99), Some(0));
        assert_eq!(limits.allowance(b"s", t0 + 100), Some(1));
        assert_eq!(limits.allowance(b"s", t0 + 1000), Some(10));
    }

    #[test]
    fn the_adaptive_rule() {
        let c = 4000 * SCALE;
        let w = |failures, releases, held| Window {
            failures,
            releases,
            held,
        };
        for (in_force, window, pct, want) in [
            // More than 10 % failed: halve.
            (c, w(11, 100, false), 10, (c / 2, true)),
            // Exactly 10 %: not more; released, so rise (capped at the ceiling).
            (c, w(10, 100, false), 10, (c, false)),
            (c / 2, w(10, 100, false), 10, (c / 2 + c / 50, false)),
            // Failures with no releases at all: halve.
            (c / 2, w(1, 0, false), 10, (c / 4, true)),
            // Nothing released but members held: rise.
            (c / 4, w(0, 0, true), 10, (c / 4 + c / 50, false)),
            // A quiet window: unchanged.
            (c / 4, w(0, 0, false), 10, (c / 4, false)),
            // Never below 1 % of the ceiling.
            (c / 100 + 1, w(5, 5, false), 10, (c / 100, true)),
            (c / 100, w(5, 5, false), 10, (c / 100, true)),
            // A threshold of 50 %.
            (c, w(50, 100, false), 50, (c, false)),
            (c, w(51, 100, false), 50, (c / 2, true)),
        ] {
            assert_eq!(
                adapt(in_force, c, window, pct),
                want,
                "{in_force} {window:?} {pct}"
            );
        }
    }

    #[test]
    fn an_adaptive_limit_falls_when_failing_and_climbs_back() {
        let t0 = 1_800_000_000_000;
        let adaptive = Adaptive::default();
        let mut limit = Limit::new(spec(4000, 1000, 100, true), t0);
        assert_eq!(limit.in_force_per_second(), 4000.0);
        let mut t = t0;
        // Failing windows: halves each window.
        for _ in 0..5 {
            limit.release(t, 10, true, adaptive);
            for _ in 0..5 {
                limit.fail(t, adaptive);
            }
            t += 200;
        }
        limit.roll(t, adaptive);
        assert_eq!(limit.in_force_per_second(), 125.0);
        // Healthy windows with releases: +80/s each, up to the ceiling.
        for _ in 0..100 {
            limit.release(t, 10, true, adaptive);
            t += 200;
        }
        limit.roll(t, adaptive);
        assert_eq!(limit.in_force_per_second(), 4000.0);
    }
}

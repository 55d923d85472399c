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
    /// The window whose closing decrease was counted already (a read-only
    /// view may close a window before a release books it).
    decrease_counted_ms: Option<i64>,
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
            decrease_counted_ms: None,
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
        // A release of nothing leaves TAT as it is: a TAT in the past means
        // the same as now, and an unchanged state needs no write.
        if count > 0 {
            self.tat = self.gcra().after(self.tat, now_ms, count);
        }
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

    /// When the window now counting began.
    pub fn window_start_ms(&self) -> i64 {
        self.window_start_ms
    }

    /// Whether the decrease that closed the window begun at
    /// `window_start_ms` is yet to be counted; it is counted from now on. A
    /// view (ECHO.LIMITS) and the release that then books the same window
    /// count it once between them.
    pub fn count_decrease_of(&mut self, window_start_ms: i64) -> bool {
        let first = self.decrease_counted_ms != Some(window_start_ms);
        self.decrease_counted_ms = Some(window_start_ms);
        first
    }

    /// The rate in force, in members per second.
    pub fn in_force_per_second(&self) -> f64 {
        self.in_force as f64 / SCALE as f64 * 1000.0 / self.spec.rate.period_ms as f64
    }

    pub fn released(&self) -> u64 {
        self.released
    }

    fn ceiling(&self) -> u128 {
        u128::from(self.spec.rate.n) * SCALE
    }

    /// The part of the state that lives in the keyspace.
    pub fn saved(&self) -> Saved {
        Saved {
            rate: self.spec.rate,
            burst: self.spec.burst,
            in_force: self.in_force,
            tat: self.tat,
        }
    }

    /// Takes the state saved in the keyspace, read at `now_ms`. `None` (no
    /// key: never written, or expired) is a full bucket at the ceiling. A
    /// state saved under another spec (the config changed since, or the node
    /// that saved it had another) goes over to this limit's spec as a
    /// `CONFIG SET` would take it. A value no limit could have (the key is an
    /// ordinary key a client may write) is brought within what one could:
    /// a rate in force between the floor and the ceiling, TAT at most an
    /// empty bucket ahead. Whether the state now differs from the saved one
    /// (and must be saved again, even if no release changes it: the key's
    /// expiry was reckoned under the former spec).
    pub fn restore(&mut self, saved: Option<Saved>, now_ms: i64) -> bool {
        let Some(saved) = saved else {
            self.in_force = self.ceiling();
            self.tat = 0;
            return false;
        };
        let spec = self.spec.clone();
        self.spec.rate = saved.rate;
        self.spec.burst = saved.burst;
        let ceiling = self.ceiling();
        self.in_force = match saved.rate.kind {
            LimitKind::Fixed => ceiling,
            LimitKind::Adaptive => saved.in_force.clamp((ceiling / 100).max(1), ceiling),
        };
        let gcra = self.gcra();
        let most = gcra
            .now_ticks(now_ms)
            .saturating_add(u128::from(saved.burst).saturating_mul(gcra.interval_ticks()));
        self.tat = saved.tat.min(most);
        if self.spec != spec {
            self.respec(spec, now_ms);
        }
        self.saved() != saved
    }

    /// What to do with the saved state's key after a change at `now_ms`.
    /// The key lives only while it says something a missing key does not: a
    /// TAT ahead of now, or an adaptive rate below its ceiling, which is
    /// remembered for `FORGET_AFTER_MS` after its last change (an idle
    /// dependency's rate then starts afresh at the ceiling, as TCP restarts
    /// a connection idle for long).
    pub fn persist(&self, now_ms: i64) -> Persist {
        let tat_ms = self.gcra().matters_until_ms(self.tat);
        let until_ms = if self.in_force >= self.ceiling() {
            tat_ms
        } else {
            tat_ms.max(now_ms.saturating_add(FORGET_AFTER_MS))
        };
        if until_ms <= now_ms {
            Persist::Forget
        } else {
            Persist::Keep {
                text: self.saved().encode(),
                until_ms,
            }
        }
    }

    pub fn failures(&self) -> u64 {
        self.failures
    }
}

/// How long an adaptive rate below its ceiling is kept after its last
/// change (see `Limit::persist`).
pub const FORGET_AFTER_MS: i64 = 600_000;

/// A limit's state as it lives in the keyspace: the spec it was reached
/// under, the rate in force and TAT. The window's counts stay in the
/// memory of the node that counts them: a failover loses at most one
/// window's change of the rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Saved {
    pub rate: Rate,
    pub burst: u64,
    pub in_force: u128,
    pub tat: u128,
}

/// The first word of a saved state: a later layout gets another.
const SAVED_LAYOUT: &str = "1";

impl Saved {
    /// `1 <fixed|adaptive> <n> <period_ms> <burst> <in_force> <tat>`, words
    /// of ASCII, so that `GET` shows it to an operator.
    pub fn encode(&self) -> String {
        let kind = match self.rate.kind {
            LimitKind::Fixed => "fixed",
            LimitKind::Adaptive => "adaptive",
        };
        format!(
            "{SAVED_LAYOUT} {kind} {} {} {} {} {}",
            self.rate.n, self.rate.period_ms, self.burst, self.in_force, self.tat
        )
    }

    /// The state `encode` wrote; `None` for anything else (read as no
    /// state: a full bucket).
    pub fn decode(bytes: &[u8]) -> Option<Saved> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut words = text.split(' ');
        if words.next()? != SAVED_LAYOUT {
            return None;
        }
        let kind = match words.next()? {
            "fixed" => LimitKind::Fixed,
            "adaptive" => LimitKind::Adaptive,
            _ => return None,
        };
        let n: u64 = canonical(words.next()?)?;
        let period_ms: u64 = canonical(words.next()?)?;
        let burst: u64 = canonical(words.next()?)?;
        let in_force: u128 = canonical(words.next()?)?;
        let tat: u128 = canonical(words.next()?)?;
        let known_period = [1000, 60_000, 3_600_000].contains(&period_ms);
        let valid = (1..=MAX_RATE).contains(&n)
            && known_period
            && (1..=MAX_BURST).contains(&burst)
            && words.next().is_none();
        valid.then_some(Saved {
            rate: Rate { n, period_ms, kind },
            burst,
            in_force,
            tat,
        })
    }
}

/// A decimal number written the one way `to_string` writes it.
pub fn canonical<T: std::str::FromStr + ToString>(word: &str) -> Option<T> {
    let value: T = word.parse().ok()?;
    (value.to_string() == word).then_some(value)
}

/// What a change of a limit's state does to its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Persist {
    /// The state is a full bucket at the ceiling: no key.
    Forget,
    /// `SET key <text> PXAT <until_ms>`.
    Keep { text: String, until_ms: i64 },
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

/// Every limited schedule, with one state per database that used it (a
/// schedule's name is the same key in every database, and each keeps its
/// own limit). B-trees: their `new` is const, so the table can start a
/// static, and the table is as small as the config and the databases used.
/// (The saved part of each state and the holds live in the keyspace.)
#[derive(Debug, Default)]
pub struct Limits {
    limits: BTreeMap<Vec<u8>, Entry>,
}

#[derive(Debug)]
struct Entry {
    spec: LimitSpec,
    by_db: BTreeMap<i32, Limit>,
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
            let by_db = match old.remove(&spec.schedule) {
                Some(entry) if entry.spec == spec => entry.by_db,
                Some(mut entry) => {
                    for limit in entry.by_db.values_mut() {
                        limit.respec(spec.clone(), now_ms);
                    }
                    entry.by_db
                }
                None => BTreeMap::new(),
            };
            self.limits
                .insert(spec.schedule.clone(), Entry { spec, by_db });
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

    /// The limit of `schedule` in database `db`, if the database used it.
    pub fn get(&self, schedule: &[u8], db: i32) -> Option<&Limit> {
        self.limits.get(schedule)?.by_db.get(&db)
    }

    /// The limit of `schedule` in database `db` (`None`: not listed),
    /// made at `now_ms` the first time the database uses it.
    pub fn get_mut(&mut self, schedule: &[u8], db: i32, now_ms: i64) -> Option<&mut Limit> {
        let entry = self.limits.get_mut(schedule)?;
        let spec = &entry.spec;
        Some(
            entry
                .by_db
                .entry(db)
                .or_insert_with(|| Limit::new(spec.clone(), now_ms)),
        )
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

    fn allowance(limits: &mut Limits, now_ms: i64) -> Option<u64> {
        limits.get_mut(b"s", 0, now_ms).map(|l| l.available(now_ms))
    }

    fn release(limits: &mut Limits, now_ms: i64, count: u64) {
        let limit = limits.get_mut(b"s", 0, now_ms).unwrap();
        limit.release(now_ms, count, true, Adaptive::default());
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
        let k = allowance(&mut limits, t0).unwrap();
        assert_eq!(k, 5);
        release(&mut limits, t0, k);
        // The same words again: no fresh burst.
        limits.configure(vec![spec(10, 1000, 5, false)], t0);
        assert_eq!(allowance(&mut limits, t0), Some(0));
        // 100/s: T is now 10 ms; the bucket is still empty (5 intervals
        // ahead), so the first release comes one new interval later.
        limits.configure(vec![spec(100, 1000, 5, false)], t0);
        assert_eq!(allowance(&mut limits, t0), Some(0));
        assert_eq!(allowance(&mut limits, t0 + 9), Some(0));
        assert_eq!(allowance(&mut limits, t0 + 10), Some(1));
        assert_eq!(allowance(&mut limits, t0 + 50), Some(5));
        // A period change keeps the level too: 5 intervals of 1/m ahead.
        release(&mut limits, t0 + 50, 5);
        limits.configure(vec![spec(1, 60_000, 5, false)], t0 + 50);
        assert_eq!(allowance(&mut limits, t0 + 50 + 59_999), Some(0));
        assert_eq!(allowance(&mut limits, t0 + 50 + 60_000), Some(1));
        // Removed: no limit at all.
        limits.configure(vec![], t0);
        assert_eq!(allowance(&mut limits, t0), None);
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
    fn a_saved_state_reads_back_as_written_and_nothing_else_reads() {
        let t0 = 1_800_000_000_000;
        let mut limit = Limit::new(spec(500, 1000, 50, true), t0);
        limit.release(t0, 30, true, Adaptive::default());
        let saved = limit.saved();
        let text = saved.encode();
        assert_eq!(
            text,
            format!("1 adaptive 500 1000 50 5000000 {}", saved.tat)
        );
        assert_eq!(Saved::decode(text.as_bytes()), Some(saved));
        for bad in [
            "",
            "1",
            "2 fixed 500 1000 50 5000000 0",
            "1 lazy 500 1000 50 5000000 0",
            "1 fixed 0 1000 50 5000000 0",
            "1 fixed 1000001 1000 50 5000000 0",
            "1 fixed 500 999 50 5000000 0",
            "1 fixed 500 1000 0 5000000 0",
            "1 fixed 500 1000 1000001 5000000 0",
            "1 fixed 500 1000 50 05000000 0",
            "1 fixed 500 1000 50 5000000 -1",
            "1 fixed 500 1000 50 5000000 0 0",
            "1 fixed 500 1000 50 5000000 0 ",
            "1  fixed 500 1000 50 5000000 0",
            "1 fixed 500 1000 50 5000000 340282366920938463463374607431768211456",
        ] {
            assert_eq!(Saved::decode(bad.as_bytes()), None, "{bad:?}");
        }
        assert_eq!(Saved::decode(b"1 fixed 5\xff0 1000 50 5000000 0"), None);
    }

    #[test]
    fn a_limit_restored_from_its_saved_state_goes_on_where_the_other_stopped() {
        let t0 = 1_800_000_000_000;
        let adaptive = Adaptive::default();
        // The old owner: a burst spent, then a failing window halves it.
        let mut old = Limit::new(spec(2000, 1000, 20, true), t0);
        old.release(t0, 20, true, adaptive);
        for _ in 0..50 {
            old.fail(t0 + 1, adaptive);
        }
        old.release(t0 + 200, 0, true, adaptive);
        assert_eq!(old.in_force_per_second(), 1000.0);
        // The new owner had its own fresh entry; the key's state replaces it.
        let mut new = Limit::new(spec(2000, 1000, 20, true), t0 + 200);
        new.restore(Some(old.saved()), t0 + 200);
        assert_eq!(new.in_force_per_second(), 1000.0, "no reset to the ceiling");
        for at in [t0 + 200, t0 + 201, t0 + 215, t0 + 300] {
            assert_eq!(
                new.available(at),
                old.available(at),
                "at {at}: no fresh burst"
            );
        }
        // No key: a full bucket at the ceiling.
        new.restore(None, t0 + 200);
        assert_eq!(new.in_force_per_second(), 2000.0);
        assert_eq!(new.available(t0 + 200), 20);
    }

    #[test]
    fn a_state_saved_under_another_spec_is_taken_as_a_config_change_would() {
        let t0 = 1_800_000_000_000;
        let mut before = Limit::new(spec(10, 1000, 5, false), t0);
        before.release(t0, 5, true, Adaptive::default());
        let mut changed = before.clone();
        changed.respec(spec(100, 1000, 5, false), t0);
        let mut restored = Limit::new(spec(100, 1000, 5, false), t0);
        assert!(
            restored.restore(Some(before.saved()), t0),
            "to be saved again under the new spec"
        );
        assert!(!changed.clone().restore(Some(changed.saved()), t0));
        assert_eq!(restored.saved(), changed.saved());
        assert_eq!(restored.available(t0 + 9), 0);
        assert_eq!(restored.available(t0 + 10), 1);
    }

    #[test]
    fn a_written_state_is_brought_within_what_a_limit_could_have() {
        let t0 = 1_800_000_000_000;
        let mut limit = Limit::new(spec(100, 1000, 10, true), t0);
        let far = Saved {
            in_force: u128::MAX,
            tat: u128::MAX,
            ..limit.saved()
        };
        limit.restore(Some(far), t0);
        assert_eq!(limit.in_force_per_second(), 100.0, "at most the ceiling");
        assert_eq!(limit.available(t0), 0);
        assert_eq!(
            limit.available(t0 + 100),
            10,
            "at most an empty bucket ahead"
        );
        let low = Saved {
            in_force: 0,
            ..limit.saved()
        };
        limit.restore(Some(low), t0);
        assert_eq!(limit.in_force_per_second(), 1.0, "at least the floor");
        // A fixed limit's rate in force is its rate.
        let mut fixed = Limit::new(spec(100, 1000, 10, false), t0);
        let slow = Saved {
            in_force: 1,
            ..fixed.saved()
        };
        fixed.restore(Some(slow), t0);
        assert_eq!(fixed.in_force_per_second(), 100.0);
    }

    #[test]
    fn the_key_lives_only_while_the_state_says_something() {
        let t0 = 1_800_000_000_000;
        let adaptive = Adaptive::default();
        let mut limit = Limit::new(spec(100, 1000, 10, false), t0);
        assert_eq!(limit.persist(t0), Persist::Forget, "a full bucket");
        limit.release(t0, 3, false, adaptive);
        let Persist::Keep { until_ms, .. } = limit.persist(t0) else {
            panic!("a spent part of the bucket is kept");
        };
        assert_eq!(until_ms, t0 + 30, "until the bucket is full again");
        assert_eq!(limit.available(until_ms), 10);
        assert_eq!(limit.persist(until_ms), Persist::Forget);
        // An adaptive rate below its ceiling is kept past a full bucket.
        let mut low = Limit::new(spec(100, 1000, 10, true), t0);
        low.fail(t0, adaptive);
        low.release(t0 + 200, 1, false, adaptive);
        assert_eq!(low.in_force_per_second(), 50.0);
        let Persist::Keep { until_ms, text } = low.persist(t0 + 200) else {
            panic!("a lowered rate is kept");
        };
        assert_eq!(until_ms, t0 + 200 + FORGET_AFTER_MS);
        assert_eq!(Saved::decode(text.as_bytes()), Some(low.saved()));
    }

    #[test]
    fn a_decrease_is_counted_once_by_a_view_and_the_release_that_books_it() {
        let t0 = 1_800_000_000_000;
        let adaptive = Adaptive::default();
        let mut limit = Limit::new(spec(100, 1000, 10, true), t0);
        limit.fail(t0, adaptive);
        let window = limit.window_start_ms();
        let mut view = limit.clone();
        assert!(
            view.roll(t0 + 200, adaptive),
            "the view closes the failing window"
        );
        assert!(limit.count_decrease_of(window));
        assert!(
            limit.release(t0 + 200, 0, false, adaptive),
            "the release books it"
        );
        assert!(!limit.count_decrease_of(window), "already counted");
        assert_eq!(limit.in_force_per_second(), 50.0);
    }

    #[test]
    fn each_database_has_its_own_limit() {
        let t0 = 1_800_000_000_000;
        let mut limits = Limits::default();
        limits.configure(vec![spec(10, 1000, 5, false)], t0);
        let zero = limits.get_mut(b"s", 0, t0).unwrap();
        zero.release(t0, 5, true, Adaptive::default());
        assert_eq!(zero.available(t0), 0);
        assert_eq!(limits.get_mut(b"s", 1, t0).unwrap().available(t0), 5);
        assert!(limits.get_mut(b"other", 0, t0).is_none());
    }

    #[test]
    fn a_lowered_burst_does_not_leave_the_schedule_owing() {
        let t0 = 1_800_000_000_000;
        let mut limits = Limits::default();
        limits.configure(vec![spec(10, 1000, 1000, false)], t0);
        release(&mut limits, t0, 1000);
        // 10/s burst 10: an empty bucket is 10 intervals, not 1000.
        limits.configure(vec![spec(10, 1000, 10, false)], t0);
        assert_eq!(allowance(&mut limits, t0 + 99), Some(0));
        assert_eq!(allowance(&mut limits, t0 + 100), Some(1));
        assert_eq!(allowance(&mut limits, t0 + 1000), Some(10));
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

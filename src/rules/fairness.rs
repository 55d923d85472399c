//! The fair release of a grouped schedule (issue 27): which due members
//! leave, in what order, so that one group's backlog never delays another
//! group's due member by more than a round, and each group keeps its own
//! GCRA limit. Pure, like `limiter`: the clock comes in as `now_ms` and the
//! keys come in as a `GroupStore`, so the algorithm is tested end to end on
//! the in-memory `MemoryStore` and wired to the server's keys later without
//! changing a line here.
//!
//! # The model
//!
//! A schedule's members are partitioned into groups (`Group`): a name of
//! 1..=1024 bytes, or the ungrouped members, which are the group with the
//! empty name. No `GROUP` argument can name it (names are non-empty), it
//! sorts before every named group, and a sorted set can hold it as a member
//! like any other name, so the store needs no special case.
//!
//! Every group with members is in exactly one of two places:
//!
//! - the **time index**, keyed by the first ms it may release: its earliest
//!   member's fire time, or, for a limited group, when its limit has room;
//! - the **ring**, ordered by name (lexicographic, wrapping), while it has a
//!   due member and room.
//!
//! # One release
//!
//! 1. **Admission.** Groups whose indexed fire time is `<= now_ms` move from
//!    the time index to the ring, earliest first, at most `want` of them
//!    before the walk (a release never needs more groups than members) and
//!    within half the budget (so visits always get the other half): O(log G)
//!    per group, never a scan of the index. A herd of more than `want` newly
//!    due groups enters over several releases, earliest due first.
//! 2. **First round.** The ring is walked in name order from the group after
//!    `cursor` (the last group the previous release visited), wrapping once:
//!    each group gives its earliest member if its limit has room. When the
//!    ring has been walked and `want` is not yet reached, further due groups
//!    are admitted and visited one at a time, so no group takes a second
//!    member in this release while a due group has had none.
//! 3. **Further rounds.** The groups that still have a due member and room
//!    are kept in memory, in ring order from `cursor`, and give one member
//!    each per round until `want`, the budget or the groups run out; the
//!    ring is not walked again.
//!
//! A group leaves the ring when it has no due member left: back into the
//! time index at its new earliest fire time, or nowhere when it is empty (an
//! emptied group leaves no entry behind). A group whose limit has no room
//! ("limited") leaves the ring too, into the time index at the first ms its
//! limit has room again (`Gcra::room_at_ms`): it drops out of the rotation
//! until it may release, and costs no visit in the releases meanwhile, so
//! 100,000 limited groups do not eat a release's budget.
//!
//! Limits: a group's limit is a fixed-rate GCRA with exactly
//! `limiter::Gcra`'s arithmetic; its room is computed once, at the group's
//! first visit (the clock does not move within a release), and the TAT after
//! the release is returned in `Release::tats` with the ms until which it
//! matters (`TatUpdate::until_ms`): after that the TAT is in the past and a
//! group with no TAT behaves the same, so the store may forget it then. A
//! TAT carries the limit it was counted under; read under another limit (a
//! changed config or override) it is converted keeping the bucket's level,
//! as `Limit::respec` does, and written back at that first visit even when
//! nothing leaves, so the new rate applies from the group's next visit.
//!
//! Cost: O(log G) per store call; per release one call per admission, two
//! or three per visit (limit, TAT, pop; a move out of the ring), one per
//! group leaving the ring, and one at the end to see whether the ring is
//! empty. `max_steps` caps the admissions plus visits (the tick's time
//! budget); what is left carries on at the next release from the cursor.
//!
//! # Key layout for the server wiring (recommended)
//!
//! Every key beside the schedule `S`, in its slot, named as the hold key is
//! (`slots::derived_key(S, suffix)`: `S` then the suffix when `S` has a hash
//! tag; grouped schedules must have one); `<g>` is the group's name bytes:
//!
//! - a group's members: sorted set `S:echomq-g:<g>` (the ungrouped members,
//!   the group `""`, stay in `S` itself), score = fire time in ms; ties in
//!   the sorted set's own order (score, then member bytes), which is the
//!   order `pop_due` must follow (`ZRANGE key 0 1 WITHSCORES`, `ZREM`);
//! - the time index: sorted set `S:echomq-gidx`, member = group name, score
//!   = the first ms it may release; `ECHO.ADD`/`SCHEDULE`/`RETRY ... GROUP
//!   g` write `ZADD S:echomq-gidx LT <fire_at_ms> g` unless `g` is in the
//!   ring (`LT` keeps the earliest; a score made too early that way, for a
//!   limited group, costs one visit that puts it back; one too late cannot
//!   arise but through `LT`'s absence, and is what `Pop::NotDue` repairs);
//! - the ring: sorted set `S:echomq-gring`, every score 0, walked with
//!   `ZRANGEBYLEX S:echomq-gring (<after> + LIMIT 0 1` (`-` for the start);
//! - the cursor: string `S:echomq-gcur` holding the last group visited,
//!   deleted when a release returns `cursor: None` (the ring is empty);
//! - a group's TAT: string `S:echomq-gtat:<g>` holding `Tat` (ticks and the
//!   limit they are counted under), written with `PXAT until_ms`, so it
//!   expires as soon as it stops mattering;
//! - a group's limit override (`ECHO.GROUPLIMIT`): string
//!   `S:echomq-glim:<g>` holding `GroupLimit::encode`, with no expiry;
//! - a group's hold (`ECHO.HOLD S ms GROUP g`): string `S:echomq-ghold:<g>`
//!   holding its end in ms, expiring then; the store's `pop_due` reports a
//!   held group's head as not due until then (`Pop::NotDue`), so the walk
//!   puts the group in the time index at the hold's end;
//! - the directory of named groups with members (`ECHO.GROUPS`): sorted set
//!   `S:echomq-gnames`, every score 0, walked by name from a cursor.
//!
//! Every emptied sorted set disappears as with `ZREM`, so a schedule whose
//! groups are all empty leaves no key but TATs until they expire (and an
//! override, which is configuration, not state).

use std::rc::Rc;

use crate::rules::limiter::{canonical, Gcra, LimitKind, Rate, MAX_BURST, MAX_RATE};

/// The longest group name, in bytes.
pub const MAX_GROUP_BYTES: usize = 1024;
/// The most groups one `ECHO.GROUPS` page shows, and its default.
pub const MAX_GROUPS_COUNT: u64 = 1000;
pub const DEFAULT_GROUPS_COUNT: u64 = 10;

/// A group of a schedule's members: a name of 1..=1024 bytes, or the
/// ungrouped members (the empty name, sorting first in the ring). Shared,
/// not copied, when cloned: a release names a member's group with each
/// member it takes, so the handle is one pointer (an `Rc<[u8]>` would be
/// two, and a released member's record a third larger).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Group(Rc<Vec<u8>>);

impl Group {
    /// The schedule's ungrouped members.
    pub fn ungrouped() -> Group {
        Group(Rc::new(Vec::new()))
    }

    /// A named group: `None` for a name that is empty or longer than
    /// `MAX_GROUP_BYTES` (no such group can exist).
    pub fn named(name: &[u8]) -> Option<Group> {
        (1..=MAX_GROUP_BYTES)
            .contains(&name.len())
            .then(|| Group(Rc::new(name.to_vec())))
    }

    /// The group as a store holds it: its name, empty for the ungrouped.
    pub fn from_stored(bytes: Vec<u8>) -> Option<Group> {
        (bytes.len() <= MAX_GROUP_BYTES).then(|| Group(Rc::new(bytes)))
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn is_ungrouped(&self) -> bool {
        self.0.is_empty()
    }
}

/// A group's limit: a fixed rate and a burst (`echomq.group-limits` or an
/// `ECHO.GROUPLIMIT` override). An adaptive kind is taken at its ceiling:
/// the grammar of group limits admits fixed rates only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupLimit {
    pub rate: Rate,
    pub burst: u64,
}

impl GroupLimit {
    /// A group limit of `rate` and `burst`: `None` for an adaptive rate,
    /// which group limits do not take.
    pub fn fixed(rate: Rate, burst: u64) -> Option<GroupLimit> {
        (rate.kind == LimitKind::Fixed).then_some(GroupLimit { rate, burst })
    }

    pub fn gcra(self) -> Gcra {
        Gcra::fixed(self.rate, self.burst)
    }

    /// `1 <n> <period_ms> <burst>`: an `ECHO.GROUPLIMIT` override as its
    /// key holds it, words of ASCII with the layout's version first, so
    /// `GET` shows it.
    pub fn encode(&self) -> String {
        format!("1 {} {} {}", self.rate.n, self.rate.period_ms, self.burst)
    }

    /// The override `encode` wrote; `None` for anything else (the group
    /// then has the config's limit).
    pub fn decode(bytes: &[u8]) -> Option<GroupLimit> {
        let mut words = versioned_words(bytes)?;
        let limit = GroupLimit::from_words(&mut words)?;
        words.next().is_none().then_some(limit)
    }

    /// `<n> <period_ms> <burst>`, each canonical and in range.
    fn from_words<'a>(words: &mut impl Iterator<Item = &'a str>) -> Option<GroupLimit> {
        let n: u64 = canonical(words.next()?)?;
        let period_ms: u64 = canonical(words.next()?)?;
        let burst: u64 = canonical(words.next()?)?;
        let valid = (1..=MAX_RATE).contains(&n)
            && [1000, 60_000, 3_600_000].contains(&period_ms)
            && (1..=MAX_BURST).contains(&burst);
        valid.then_some(GroupLimit {
            rate: Rate {
                n,
                period_ms,
                kind: LimitKind::Fixed,
            },
            burst,
        })
    }
}

/// The words after the layout version `1` of a stored state, if it is that
/// version's.
fn versioned_words(bytes: &[u8]) -> Option<std::str::Split<'_, char>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut words = text.split(' ');
    (words.next()? == "1").then_some(words)
}

/// A group's theoretical arrival time: `ticks` counted under the limit
/// `under` (a tick is `1 / (rate.n * SCALE)` ms), so a TAT read back after
/// the limit changed is converted as `limiter::Limit` converts its own,
/// keeping the bucket's level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tat {
    pub ticks: u128,
    pub under: GroupLimit,
}

impl Tat {
    /// `1 <n> <period_ms> <burst> <ticks>`: words of ASCII, as a release
    /// limit's saved state, so `GET` shows it (an override's words, then
    /// the ticks).
    pub fn encode(&self) -> String {
        format!("{} {}", self.under.encode(), self.ticks)
    }

    /// The TAT `encode` wrote; `None` for anything else (read as none).
    pub fn decode(bytes: &[u8]) -> Option<Tat> {
        let mut words = versioned_words(bytes)?;
        let under = GroupLimit::from_words(&mut words)?;
        let ticks: u128 = canonical(words.next()?)?;
        words.next().is_none().then_some(Tat { ticks, under })
    }
}

/// A TAT to write: the store keeps it until `until_ms` and may drop it
/// from then on (it no longer limits anything).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TatUpdate {
    pub group: Group,
    pub tat: Tat,
    pub until_ms: i64,
}

/// What `GroupStore::pop_due` found at the head of a group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pop<M = Vec<u8>> {
    /// The earliest member was due and is removed; `next_fire_at_ms` is the
    /// group's new earliest fire time (`None`: the group is now empty).
    Due {
        member: M,
        fire_at_ms: i64,
        next_fire_at_ms: Option<i64>,
    },
    /// The earliest member is not due; nothing is removed.
    NotDue { fire_at_ms: i64 },
    /// The group has no member.
    Empty,
}

/// The keys of a grouped schedule, as the algorithm needs them. Every
/// method is O(log G) (or O(log n) in one group) on sorted sets; none may
/// scan the groups.
pub trait GroupStore {
    /// A member as the store hands it out: its bytes, or whatever the store
    /// holds them in (the server's own strings, not copied).
    type Member;

    /// Moves the group of the time index with the lowest score (the first
    /// ms it may release) into the ring, if that score is `<= now_ms`, and
    /// returns it; `None` when no indexed group is due (nothing changes).
    fn admit_due(&mut self, now_ms: i64) -> Option<Group>;

    /// The lowest score in the time index (`None`: it is empty), changing
    /// nothing: whether a stopped release left due groups there.
    fn index_earliest_ms(&mut self) -> Option<i64>;

    /// The first group of the ring after `after` in name order, not
    /// wrapping (`None` for `after`: the first of all); `None` at the end.
    /// `after` need not be in the ring.
    fn ring_after(&mut self, after: Option<&Group>) -> Option<Group>;

    /// Removes and returns the group's earliest member (score, then member
    /// bytes) if it is due at `now_ms`.
    fn pop_due(&mut self, group: &Group, now_ms: i64) -> Pop<Self::Member>;

    /// Pops up to `max` (at least one) of the group's due members in a row,
    /// exactly as that many `pop_due` calls would while each left the next
    /// due, appending them to `out`: what the last pop told (`Pop::Due`
    /// without its member, which is in `out`). A store may do the run in
    /// one go: the release asks for one when only one group is left.
    fn pop_due_run(
        &mut self,
        group: &Group,
        now_ms: i64,
        max: u64,
        out: &mut Vec<Released<Self::Member>>,
    ) -> Pop<()> {
        let mut last = Pop::Empty;
        for _ in 0..max.max(1) {
            match self.pop_due(group, now_ms) {
                Pop::Due {
                    member,
                    fire_at_ms,
                    next_fire_at_ms,
                } => {
                    out.push(Released {
                        group: group.clone(),
                        member,
                        fire_at_ms,
                    });
                    last = Pop::Due {
                        member: (),
                        fire_at_ms,
                        next_fire_at_ms,
                    };
                    if next_fire_at_ms.is_none_or(|next| next > now_ms) {
                        break;
                    }
                }
                // After a due member only a store changed under the run
                // ends it so; the first pop's answer is the run's.
                Pop::NotDue { fire_at_ms } if matches!(last, Pop::Empty) => {
                    return Pop::NotDue { fire_at_ms };
                }
                Pop::NotDue { .. } | Pop::Empty => break,
            }
        }
        last
    }

    /// Takes `group` out of the ring: into the time index at `at_ms` (its
    /// next fire time, or when its limit has room again), or nowhere when
    /// `None` (the group is empty). The group need not be in the ring.
    fn leave_ring(&mut self, group: &Group, at_ms: Option<i64>);

    /// The group's limit in force (its override, else the schedule's
    /// default); `None` when the group is not limited.
    fn limit(&mut self, group: &Group) -> Option<GroupLimit>;

    /// The group's stored TAT, if any.
    fn tat(&mut self, group: &Group) -> Option<Tat>;
}

/// A member released, in release order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Released<M = Vec<u8>> {
    pub group: Group,
    pub member: M,
    pub fire_at_ms: i64,
}

/// Why due members may have stayed in the schedule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeftBehind {
    /// The release stopped at `want` with a due group still in reach.
    pub by_want: bool,
    /// A group visited in this release kept due members because its limit
    /// had no room (one already waiting out its limit in the time index is
    /// not visited, so not counted again).
    pub by_group_limit: bool,
    /// The release stopped at `max_steps` with a due group still in reach.
    pub by_budget: bool,
}

/// The outcome of one release; the store already reflects the removals and
/// the ring and index moves, the caller writes the rest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Release<M = Vec<u8>> {
    /// The members to push to `pending`, in this order.
    pub released: Vec<Released<M>>,
    /// The cursor to persist for the next release (`None`: the ring is
    /// empty, delete it).
    pub cursor: Option<Group>,
    /// The TATs to write: one per group with a limit that released
    /// members, or whose TAT was converted to a changed limit.
    pub tats: Vec<TatUpdate>,
    /// Groups visited (a group visited in several rounds counts each time).
    pub visits: usize,
    /// Groups moved from the time index into the ring.
    pub admitted: usize,
    /// Groups found limited in this release, each once: they kept due
    /// members and wait in the time index until their limit has room.
    pub limited: Vec<Group>,
    pub left: LeftBehind,
}

impl<M> Default for Release<M> {
    fn default() -> Release<M> {
        Release {
            released: Vec::new(),
            cursor: None,
            tats: Vec::new(),
            visits: 0,
            admitted: 0,
            limited: Vec::new(),
            left: LeftBehind::default(),
        }
    }
}

/// The most members a release makes room for before it takes the first.
const MAX_RESERVE: usize = 1024;

/// A group visited in this release, with what its limit still allows.
struct Visit {
    group: Group,
    /// The limit and the TAT (in its ticks) at the first visit.
    bucket: Option<(GroupLimit, u128)>,
    /// The stored TAT was counted under another limit and converted: it is
    /// written back even if nothing leaves, so the level is kept from this
    /// visit on rather than converted afresh (and drained at the old rate)
    /// at every visit.
    rescaled: bool,
    room: u64,
    taken: u64,
}

impl Visit {
    /// The first ms at which the group's limit has room again, counting
    /// what it gave in this release: a limited group waits in the time index
    /// until then instead of costing a visit in every release meanwhile.
    fn room_at_ms(&self, now_ms: i64) -> i64 {
        let Some((limit, ticks)) = self.bucket else {
            return now_ms;
        };
        let gcra = limit.gcra();
        let ticks = gcra.after(ticks, now_ms, self.taken);
        // Never now: the limit has no room now (a burst of 0, which no
        // config allows, would otherwise come straight back).
        gcra.room_at_ms(ticks).max(now_ms.saturating_add(1))
    }
}

/// The walk of one release: what it has done and what it may still do.
struct Walk<'a, S: GroupStore> {
    store: &'a mut S,
    now_ms: i64,
    want: u64,
    max_steps: usize,
    steps: usize,
    out: Release<S::Member>,
    visited: Vec<Visit>,
    /// Indices into `visited` of the groups that may give another member.
    active: Vec<usize>,
    /// What stopped the release early (`want` or the budget), if anything.
    stopped: Option<Stop>,
    /// Every ring group present at the start has been visited.
    ring_walked: bool,
    /// The time index had no due group left at the last admission.
    index_drained: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    Want,
    Budget,
}

impl<S: GroupStore> Walk<'_, S> {
    fn released(&self) -> u64 {
        u64::try_from(self.out.released.len()).unwrap_or(u64::MAX)
    }

    /// Whether the release may take another step, noting what stopped it.
    fn may_go_on(&mut self) -> bool {
        if self.released() >= self.want {
            self.stopped = Some(Stop::Want);
        } else if self.steps >= self.max_steps {
            self.stopped = Some(Stop::Budget);
        }
        self.stopped.is_none()
    }

    fn admit(&mut self) -> Option<Group> {
        let Some(group) = self.store.admit_due(self.now_ms) else {
            self.index_drained = true;
            return None;
        };
        self.steps = self.steps.saturating_add(1);
        self.out.admitted = self.out.admitted.saturating_add(1);
        Some(group)
    }

    /// The first visit of `group` in this release: reads its limit, then
    /// takes one member if there is room.
    fn first_visit(&mut self, group: Group) {
        let mut rescaled = false;
        let bucket = self.store.limit(&group).map(|limit| {
            let gcra = limit.gcra();
            let ticks = match self.store.tat(&group) {
                Some(tat) if tat.under == limit => tat.ticks,
                Some(tat) => {
                    rescaled = true;
                    tat.under.gcra().rescale(tat.ticks, gcra, self.now_ms)
                }
                None => 0,
            };
            (limit, ticks)
        });
        let room = match bucket {
            Some((limit, ticks)) => limit.gcra().available(ticks, self.now_ms),
            None => u64::MAX,
        };
        let index = self.visited.len();
        self.visited.push(Visit {
            group,
            bucket,
            rescaled,
            room,
            taken: 0,
        });
        self.visit(index);
    }

    /// Takes one member from the visited group `index`, moving the group
    /// out of the ring when it has no due member left, and keeps it active
    /// when it may give another.
    fn visit(&mut self, index: usize) {
        self.visit_run(index, 1);
    }

    /// Visits the group `index` up to `max` times in a row, as many calls of
    /// `visit` would when it is the only group left (each member a visit
    /// and a step), with one store call for the run.
    fn visit_run(&mut self, index: usize, max: u64) {
        self.steps = self.steps.saturating_add(1);
        self.out.visits = self.out.visits.saturating_add(1);
        let Some(visit) = self.visited.get_mut(index) else {
            return;
        };
        self.out.cursor = Some(visit.group.clone());
        if visit.room == 0 {
            let room_at_ms = visit.room_at_ms(self.now_ms);
            self.store.leave_ring(&visit.group, Some(room_at_ms));
            self.out.limited.push(visit.group.clone());
            self.out.left.by_group_limit = true;
            return;
        }
        if self.out.released.capacity() == 0 {
            // Room for the whole release (or a typical large one) at once,
            // not grown member by member.
            let want = usize::try_from(self.want).unwrap_or(usize::MAX);
            self.out.released.reserve(want.min(MAX_RESERVE));
        }
        let before = self.out.released.len();
        let max = max.min(visit.room).max(1);
        let pop = self
            .store
            .pop_due_run(&visit.group, self.now_ms, max, &mut self.out.released);
        let taken = u64::try_from(self.out.released.len().saturating_sub(before)).unwrap_or(0);
        // The members after the first were visits of their own.
        let more = usize::try_from(taken.saturating_sub(1)).unwrap_or(usize::MAX);
        self.steps = self.steps.saturating_add(more);
        self.out.visits = self.out.visits.saturating_add(more);
        let still_due = match pop {
            Pop::Due {
                next_fire_at_ms, ..
            } => {
                visit.room = visit.room.saturating_sub(taken);
                visit.taken = visit.taken.saturating_add(taken);
                match next_fire_at_ms {
                    Some(next) if next <= self.now_ms => true,
                    next => {
                        self.store.leave_ring(&visit.group, next);
                        false
                    }
                }
            }
            // The store changed under the ring (a member removed by hand):
            // put the group where it belongs now.
            Pop::NotDue { fire_at_ms } => {
                self.store.leave_ring(&visit.group, Some(fire_at_ms));
                false
            }
            Pop::Empty => {
                self.store.leave_ring(&visit.group, None);
                false
            }
        };
        if still_due && visit.room == 0 {
            // Its next member is due now, so the limit says when it may go.
            let room_at_ms = visit.room_at_ms(self.now_ms);
            self.store.leave_ring(&visit.group, Some(room_at_ms));
            self.out.limited.push(visit.group.clone());
            self.out.left.by_group_limit = true;
        } else if still_due {
            self.active.push(index);
        }
    }

    /// The first round: the ring from after `cursor`, wrapping once, then
    /// further due groups one at a time while `want` is not reached.
    fn first_round(&mut self, cursor: Option<&Group>) {
        // Before the cursor's wrap (`wrapped` false), groups after it; after
        // the wrap, groups up to and including it.
        let mut at: Option<Group> = cursor.cloned();
        let mut wrapped = cursor.is_none();
        loop {
            let next = self.store.ring_after(at.as_ref());
            let group = match next {
                Some(group) if wrapped && cursor.is_some_and(|c| group > *c) => break,
                Some(group) => group,
                None if wrapped => break,
                None => {
                    wrapped = true;
                    at = None;
                    continue;
                }
            };
            // Looked up first, so a stop here leaves a due group for sure.
            if !self.may_go_on() {
                return;
            }
            at = Some(group.clone());
            self.first_visit(group);
        }
        self.ring_walked = true;
        while self.may_go_on() {
            let Some(group) = self.admit() else {
                return;
            };
            self.first_visit(group);
        }
    }

    /// The later rounds, over the groups kept active, in ring order from
    /// `cursor` (admitted groups were visited last in the first round, so
    /// they are put back in their place).
    fn later_rounds(&mut self, cursor: Option<&Group>) {
        let visited = &self.visited;
        let ring_order = |&index: &usize| {
            visited
                .get(index)
                .map(|v| (cursor.is_some_and(|c| v.group <= *c), v.group.clone()))
        };
        self.active.sort_by_cached_key(ring_order);
        // Two lists swapped each round, not a new one a round: with one
        // group left a round is one member.
        let mut round = Vec::with_capacity(self.active.len());
        while !self.active.is_empty() {
            round.clear();
            std::mem::swap(&mut round, &mut self.active);
            for (i, &index) in round.iter().enumerate() {
                if !self.may_go_on() {
                    // Not visited this round: still active for the record.
                    self.active.extend(round.get(i..).unwrap_or_default());
                    return;
                }
                if round.len() == 1 {
                    // The only group left: its next rounds are a run, up to
                    // where `want` or the budget would stop it.
                    let left = self.want.saturating_sub(self.released());
                    let steps = self.max_steps.saturating_sub(self.steps);
                    let max = left.min(u64::try_from(steps).unwrap_or(u64::MAX));
                    self.visit_run(index, max);
                } else {
                    self.visit(index);
                }
            }
        }
    }

    fn finish(mut self) -> Release<S::Member> {
        // A stop left due members behind when a group could have given one
        // more: an active group, a ring group not yet visited, or a due
        // group not yet admitted (limited groups are counted apart).
        if let Some(stop) = self.stopped {
            let left = !self.active.is_empty()
                || !self.ring_walked
                || (!self.index_drained
                    && self
                        .store
                        .index_earliest_ms()
                        .is_some_and(|at_ms| at_ms <= self.now_ms));
            self.out.left.by_want = left && stop == Stop::Want;
            self.out.left.by_budget = left && stop == Stop::Budget;
        }
        if self.out.visits > 0 && self.store.ring_after(None).is_none() {
            self.out.cursor = None;
        }
        for visit in &self.visited {
            let Some((limit, ticks)) = visit.bucket else {
                continue;
            };
            if visit.taken == 0 && !visit.rescaled {
                continue;
            }
            let gcra = limit.gcra();
            let ticks = gcra.after(ticks, self.now_ms, visit.taken);
            self.out.tats.push(TatUpdate {
                group: visit.group.clone(),
                tat: Tat {
                    ticks,
                    under: limit,
                },
                until_ms: gcra.matters_until_ms(ticks),
            });
        }
        self.out
    }
}

/// One fair release at `now_ms` of at most `want` members (the caller's
/// `LIMIT` and the queue's own limit, whichever is less), starting after
/// `cursor`, in at most `max_steps` admissions plus visits.
pub fn release<S: GroupStore>(
    store: &mut S,
    now_ms: i64,
    want: u64,
    cursor: Option<&Group>,
    max_steps: usize,
) -> Release<S::Member> {
    let mut walk = Walk {
        store,
        now_ms,
        want,
        max_steps,
        steps: 0,
        out: Release {
            cursor: cursor.cloned(),
            ..Release::default()
        },
        visited: Vec::new(),
        active: Vec::new(),
        stopped: None,
        ring_walked: false,
        index_drained: false,
    };
    // Admission: a release takes at most `want` members, so it never needs
    // more than `want` new groups in the ring before the walk; and it keeps
    // half the budget for visits, so a release always moves members.
    let mut admitted: u64 = 0;
    let admission_steps = max_steps.div_ceil(2);
    while admitted < want && walk.steps < admission_steps && walk.admit().is_some() {
        admitted = admitted.saturating_add(1);
    }
    walk.first_round(cursor);
    walk.later_rounds(cursor);
    walk.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tat_reads_back_as_written_and_nothing_else_reads() {
        let tat = Tat {
            ticks: 123_456_789_000,
            under: GroupLimit {
                rate: Rate {
                    n: 10,
                    period_ms: 1000,
                    kind: LimitKind::Fixed,
                },
                burst: 2,
            },
        };
        assert_eq!(tat.encode(), "1 10 1000 2 123456789000");
        assert_eq!(Tat::decode(tat.encode().as_bytes()), Some(tat));
        for bad in [
            "",
            "1",
            "2 10 1000 2 5",
            "1 0 1000 2 5",
            "1 10 999 2 5",
            "1 10 1000 0 5",
            "1 10 1000 2 05",
            "1 10 1000 2 5 6",
            "1 10 1000 2 -5",
            "1  10 1000 2 5",
        ] {
            assert_eq!(Tat::decode(bad.as_bytes()), None, "{bad:?}");
        }
    }
    #[test]
    fn an_override_reads_back_as_written_and_nothing_else_reads() {
        let limit = GroupLimit {
            rate: Rate {
                n: 3,
                period_ms: 60_000,
                kind: LimitKind::Fixed,
            },
            burst: 7,
        };
        assert_eq!(limit.encode(), "1 3 60000 7");
        assert_eq!(GroupLimit::decode(limit.encode().as_bytes()), Some(limit));
        for bad in [
            "",
            "1 3 60000",
            "1 3 60000 7 1",
            "2 3 60000 7",
            "1 3 60000 07",
        ] {
            assert_eq!(GroupLimit::decode(bad.as_bytes()), None, "{bad:?}");
        }
        let adaptive = Rate {
            kind: LimitKind::Adaptive,
            ..limit.rate
        };
        assert_eq!(GroupLimit::fixed(adaptive, 7), None);
        assert_eq!(GroupLimit::fixed(limit.rate, 7), Some(limit));
    }
    use crate::rules::limiter::{Adaptive, Limit, LimitKind, LimitSpec};
    use std::collections::{BTreeMap, BTreeSet};
    use std::ops::Bound::{Excluded, Unbounded};

    /// The reference store: the server's keys as B-trees, with the same
    /// orders (a sorted set orders by score, then member bytes).
    #[derive(Debug, Default)]
    struct MemoryStore {
        /// One sorted set per group; an emptied group is removed.
        members: BTreeMap<Group, BTreeSet<(i64, Vec<u8>)>>,
        /// The time index, by earliest fire time, and each group's score.
        index: BTreeSet<(i64, Group)>,
        indexed: BTreeMap<Group, i64>,
        ring: BTreeSet<Group>,
        default_limit: Option<GroupLimit>,
        limits: BTreeMap<Group, GroupLimit>,
        /// Each TAT with the ms until which it matters (a `PXAT`).
        tats: BTreeMap<Group, (Tat, i64)>,
        /// Store calls, to show a release never scans the groups.
        calls: usize,
    }

    impl MemoryStore {
        /// What `ECHO.ADD ... GROUP g` does: the member into its group and,
        /// unless the group is in the ring, `ZADD index LT`.
        fn add(&mut self, group: &Group, member: &[u8], fire_at_ms: i64) {
            let set = self.members.entry(group.clone()).or_default();
            set.insert((fire_at_ms, member.to_vec()));
            if self.ring.contains(group) {
                return;
            }
            match self.indexed.get(group) {
                Some(&at_ms) if at_ms <= fire_at_ms => {}
                _ => self.index_at(group, fire_at_ms),
            }
        }

        /// `ZADD index at_ms group`: one entry per group.
        fn index_at(&mut self, group: &Group, at_ms: i64) {
            if let Some(old_ms) = self.indexed.get(group) {
                self.index.remove(&(*old_ms, group.clone()));
            }
            self.index.insert((at_ms, group.clone()));
            self.indexed.insert(group.clone(), at_ms);
        }

        /// What the caller writes after a release: the TATs, with their
        /// expiry; and the clock drops what expired.
        fn apply(&mut self, release: &Release, now_ms: i64) {
            for update in &release.tats {
                self.tats
                    .insert(update.group.clone(), (update.tat, update.until_ms));
            }
            self.tats.retain(|_, (_, until_ms)| *until_ms > now_ms);
        }

        fn remaining(&self) -> BTreeSet<(Group, i64, Vec<u8>)> {
            let mut out = BTreeSet::new();
            for (group, set) in &self.members {
                for (at_ms, member) in set {
                    out.insert((group.clone(), *at_ms, member.clone()));
                }
            }
            out
        }

        /// Nothing left of any group: no set, no index or ring entry.
        fn is_bare(&self) -> bool {
            self.members.is_empty()
                && self.index.is_empty()
                && self.indexed.is_empty()
                && self.ring.is_empty()
        }
    }

    impl GroupStore for MemoryStore {
        type Member = Vec<u8>;

        fn admit_due(&mut self, now_ms: i64) -> Option<Group> {
            self.calls += 1;
            let (at_ms, _) = self.index.first()?;
            if *at_ms > now_ms {
                return None;
            }
            let (_, group) = self.index.pop_first()?;
            self.indexed.remove(&group);
            self.ring.insert(group.clone());
            Some(group)
        }

        fn index_earliest_ms(&mut self) -> Option<i64> {
            self.calls += 1;
            self.index.first().map(|(at_ms, _)| *at_ms)
        }

        fn ring_after(&mut self, after: Option<&Group>) -> Option<Group> {
            self.calls += 1;
            match after {
                None => self.ring.first().cloned(),
                Some(after) => self
                    .ring
                    .range((Excluded(after), Unbounded))
                    .next()
                    .cloned(),
            }
        }

        fn pop_due(&mut self, group: &Group, now_ms: i64) -> Pop {
            self.calls += 1;
            let Some(set) = self.members.get_mut(group) else {
                return Pop::Empty;
            };
            let Some((fire_at_ms, _)) = set.first() else {
                return Pop::Empty;
            };
            if *fire_at_ms > now_ms {
                return Pop::NotDue {
                    fire_at_ms: *fire_at_ms,
                };
            }
            let (fire_at_ms, member) = set.pop_first().unwrap();
            let next_fire_at_ms = set.first().map(|(at_ms, _)| *at_ms);
            if set.is_empty() {
                self.members.remove(group);
            }
            Pop::Due {
                member,
                fire_at_ms,
                next_fire_at_ms,
            }
        }

        fn leave_ring(&mut self, group: &Group, at_ms: Option<i64>) {
            self.calls += 1;
            self.ring.remove(group);
            if let Some(at_ms) = at_ms {
                self.index_at(group, at_ms);
            }
        }

        fn limit(&mut self, group: &Group) -> Option<GroupLimit> {
            self.calls += 1;
            self.limits.get(group).copied().or(self.default_limit)
        }

        fn tat(&mut self, group: &Group) -> Option<Tat> {
            self.calls += 1;
            self.tats.get(group).map(|(tat, _)| *tat)
        }
    }

    fn g(name: &str) -> Group {
        if name.is_empty() {
            Group::ungrouped()
        } else {
            Group::named(name.as_bytes()).unwrap()
        }
    }

    fn per_second(n: u64, burst: u64) -> GroupLimit {
        GroupLimit {
            rate: Rate {
                n,
                period_ms: 1000,
                kind: LimitKind::Fixed,
            },
            burst,
        }
    }

    fn names(release: &Release) -> Vec<String> {
        release
            .released
            .iter()
            .map(|r| String::from_utf8(r.member.clone()).unwrap())
            .collect()
    }

    /// Seeded draws, so a failing seed replays.
    struct Rng(rand::rngs::StdRng);

    impl Rng {
        fn seeded(seed: u64) -> Rng {
            use rand::SeedableRng;
            Rng(rand::rngs::StdRng::seed_from_u64(seed))
        }

        /// Uniform in `0..n` (0 when `n` is 0).
        fn below(&mut self, n: u64) -> u64 {
            use rand::RngExt;
            self.0.random_range(0..n.max(1))
        }
    }

    const NOW: i64 = 1_800_000_000_000;

    #[test]
    fn group_names() {
        assert!(
            Group::named(b"").is_none(),
            "the empty name is the ungrouped"
        );
        assert!(Group::named(&[b'x'; MAX_GROUP_BYTES]).is_some());
        assert!(Group::named(&[b'x'; MAX_GROUP_BYTES + 1]).is_none());
        assert!(Group::ungrouped().is_ungrouped());
        assert!(Group::ungrouped() < g("\0"), "the ungrouped sort first");
        assert_eq!(Group::from_stored(Vec::new()), Some(Group::ungrouped()));
        assert_eq!(g("a").as_bytes(), b"a");
    }

    /// The table of releases at `NOW`, one case a line, fields split by
    /// `|`: what; the members as `group:member@ms` (ms relative to now, `_`
    /// the ungrouped group); the limits as `group=n/s,burst`; the
    /// cursor; want; the members released, in order; the cursor after; the
    /// groups limited. `-` is none.
    const TABLE: &str = "
        round-robin, earliest first in a group; ring empty after \
            | a:a1@-9 a:a2@-8 a:a3@-7 b:b1@-5 c:c1@-10 | - | - | 10 | a1 b1 c1 a2 a3 | - | -
        want stops in the second round \
            | a:a1@-9 a:a2@-8 a:a3@-7 b:b1@-5 c:c1@-10 | - | - | 4 | a1 b1 c1 a2 | a | -
        starts after the cursor, wrapping \
            | a:a1@-9 a:a2@-8 a:a3@-7 b:b1@-5 c:c1@-10 | - | b | 5 | c1 a1 b1 a2 a3 | - | -
        stops after the cursor's group \
            | a:a1@-9 a:a2@-8 a:a3@-7 b:b1@-5 c:c1@-10 | - | b | 3 | c1 a1 b1 | b | -
        want 0 releases nothing and keeps the cursor \
            | a:a1@-9 b:b1@-5 | - | a | 0 | - | a | -
        a cursor naming no group starts at its place in the ring \
            | a:a1@0 c:c1@0 | - | bb | 10 | c1 a1 | - | -
        members not due stay; a group with none due is not visited \
            | a:a1@-1 a:a2@1 b:b1@0 c:c1@5 | - | - | 10 | a1 b1 | - | -
        ties in the sorted set's order: score, then member bytes \
            | a:x@-5 a:w@-5 a:v@-4 | - | - | 10 | w x v | - | -
        the ungrouped members are one more group, first in the ring \
            | _:u1@-1 _:u2@-1 a:a1@-3 | - | - | 10 | u1 a1 u2 | - | -
        a burst of 1 lets one leave; the group is limited and leaves the ring \
            | a:a1@-3 a:a2@-2 b:b1@-1 b:b2@-1 | a=1/s,1 | - | 10 | a1 b1 b2 | - | a
        a burst of 0 (no config allows it) releases nothing and does not spin \
            | a:a1@-3 b:b1@-1 | a=1/s,0 | - | 10 | b1 | - | a
        a burst of 2: two rounds, then limited \
            | a:a1@-3 a:a2@-2 a:a3@-2 b:b1@-1 b:b2@-1 b:b3@-1 | a=10/s,2 | - | 10 \
            | a1 b1 a2 b2 b3 | - | a
        a limit on the ungrouped \
            | _:u1@-2 _:u2@-2 a:a1@-1 a:a2@-1 | _=1/s,1 | - | 10 | u1 a1 a2 | - | _
        the cursor on the ungrouped goes on to the first named group \
            | _:u1@-2 _:u2@-2 a:a1@-1 b:b1@-1 | - | _ | 3 | a1 b1 u1 | _ | -
    ";

    /// The words of a table field, `-` for none.
    fn words(field: &str) -> Vec<&str> {
        field.split_whitespace().filter(|w| *w != "-").collect()
    }

    /// A group of the table: `_` is the ungrouped.
    fn table_group(word: &str) -> Group {
        g(if word == "_" { "" } else { word })
    }

    #[test]
    fn a_table_of_releases() {
        for line in TABLE.lines().filter(|l| !l.trim().is_empty()) {
            let fields: Vec<&str> = line.split('|').map(str::trim).collect();
            let [what, members, limits, cursor, want, released, after, limited] = fields[..] else {
                panic!("a table line of 8 fields: {line}");
            };
            let mut store = MemoryStore::default();
            for word in words(members) {
                let (group, rest) = word.split_once(':').unwrap();
                let (member, at_ms) = rest.split_once('@').unwrap();
                let at_ms: i64 = at_ms.parse().unwrap();
                store.add(&table_group(group), member.as_bytes(), NOW + at_ms);
            }
            for word in words(limits) {
                let (group, rest) = word.split_once('=').unwrap();
                let (n, burst) = rest.split_once("/s,").unwrap();
                let limit = per_second(n.parse().unwrap(), burst.parse().unwrap());
                store.limits.insert(table_group(group), limit);
            }
            let cursor = words(cursor).first().copied().map(table_group);
            let want = want.parse().unwrap();
            let r = release(&mut store, NOW, want, cursor.as_ref(), usize::MAX);
            assert_eq!(names(&r), words(released), "{what}");
            let after = words(after).first().copied().map(table_group);
            assert_eq!(r.cursor, after, "{what}");
            let limited: Vec<Group> = words(limited).into_iter().map(table_group).collect();
            assert_eq!(r.limited, limited, "{what}");
            assert_eq!(r.left.by_group_limit, !limited.is_empty(), "{what}");
        }
    }

    #[test]
    fn the_rotation_goes_on_across_releases() {
        let mut store = MemoryStore::default();
        for group in ["a", "b", "c"] {
            for i in 0..10 {
                store.add(&g(group), format!("{group}{i}").as_bytes(), NOW - 100 + i);
            }
        }
        let mut cursor = None;
        let mut groups = Vec::new();
        for _ in 0..6 {
            let r = release(&mut store, NOW, 2, cursor.as_ref(), usize::MAX);
            assert!(r.left.by_want);
            groups.extend(r.released.iter().map(|m| m.group.clone()));
            cursor = r.cursor;
        }
        let cycle: Vec<Group> = ["a", "b", "c"]
            .iter()
            .cycle()
            .take(12)
            .copied()
            .map(g)
            .collect();
        assert_eq!(groups, cycle, "never restarts at the first group");
        // Each group gave its members in order: a0..a3.
        let r = release(&mut store, NOW, 3, cursor.as_ref(), usize::MAX);
        assert_eq!(names(&r), ["a4", "b4", "c4"]);
    }

    #[test]
    fn a_backlog_does_not_delay_the_other_groups() {
        let mut store = MemoryStore::default();
        for i in 0..100_000 {
            store.add(
                &g("big"),
                format!("big{i:06}").as_bytes(),
                NOW - 1_000_000 + i,
            );
        }
        for k in 0..10 {
            store.add(&g(&format!("t{k}")), b"one", NOW);
        }
        let r = release(&mut store, NOW, 11, None, usize::MAX);
        let groups: BTreeSet<Group> = r.released.iter().map(|m| m.group.clone()).collect();
        assert_eq!(groups.len(), 11, "one from each group");
        assert_eq!(r.released[0].member, b"big000000");
        assert!(!r.left.by_want || store.members.contains_key(&g("big")));
        assert_eq!(store.members.len(), 1, "the ten single groups are gone");
    }

    #[test]
    fn groups_admitted_after_the_walk_get_their_turn_and_their_place() {
        // `a` and `aa` are due first but limited; the first admission (at
        // most `want` groups) takes a, aa, c; `b`, due last, comes in only
        // after the ring was walked, before any group gets a second member,
        // and then takes its place in the ring (b before c) for the later
        // rounds.
        let mut store = MemoryStore::default();
        let limit = per_second(1, 1);
        let tat = Tat {
            ticks: limit.gcra().now_ticks(NOW + 1000),
            under: limit,
        };
        for group in ["a", "aa"] {
            store.limits.insert(g(group), limit);
            store.tats.insert(g(group), (tat, NOW + 1000));
        }
        for (group, member, at_ms) in [
            ("a", "a1", -40),
            ("aa", "aa1", -35),
            ("c", "c1", -30),
            ("c", "c2", -30),
            ("c", "c3", -30),
            ("b", "b1", -10),
            ("b", "b2", -10),
            ("b", "b3", -10),
        ] {
            store.add(&g(group), member.as_bytes(), NOW + at_ms);
        }
        let r = release(&mut store, NOW, 3, None, usize::MAX);
        assert_eq!(names(&r), ["c1", "b1", "b2"]);
        assert_eq!(r.limited, [g("a"), g("aa")]);
        assert_eq!(r.admitted, 4);
        assert_eq!(r.cursor, Some(g("b")));
        assert!(r.left.by_want && r.left.by_group_limit);
        // The limited ones wait in the time index, not in the ring.
        assert_eq!(store.ring, BTreeSet::from([g("b"), g("c")]));
        let r = release(&mut store, NOW, 5, r.cursor.as_ref(), usize::MAX);
        assert_eq!(names(&r), ["c2", "b3", "c3"], "after b, wrapping");
        assert_eq!(r.limited, []);
        assert_eq!(r.visits, 3);
        assert!(!r.left.by_want && !r.left.by_group_limit);
    }

    /// Every window `[a, b]` of a group's release instants holds at most
    /// `burst + floor((b - a) * rate)` members.
    fn assert_within_limit(releases: &[(i64, u64)], limit: GroupLimit) {
        for (i, &(a_ms, _)) in releases.iter().enumerate() {
            let mut sum = 0u64;
            for &(b_ms, k) in &releases[i..] {
                sum += k;
                let span_ms = u64::try_from(b_ms - a_ms).unwrap();
                let bound = limit.burst + span_ms * limit.rate.n / limit.rate.period_ms;
                assert!(sum <= bound, "{sum} in [{a_ms}, {b_ms}]");
            }
        }
    }

    #[test]
    fn group_limits_under_the_queue_cap() {
        let group_limit = per_second(10, 2);
        for queue_per_second in [1000, 300] {
            let mut store = MemoryStore {
                default_limit: Some(group_limit),
                ..MemoryStore::default()
            };
            let groups: Vec<Group> = (0..50).map(|k| g(&format!("g{k:02}"))).collect();
            for group in &groups {
                for i in 0..1000 {
                    store.add(group, format!("m{i:04}").as_bytes(), NOW - 1000);
                }
            }
            // The queue's own limit, as the caller applies it: `want` is
            // what it allows now.
            let spec = LimitSpec {
                schedule: b"s".to_vec(),
                rate: Rate {
                    n: queue_per_second,
                    period_ms: 1000,
                    kind: LimitKind::Fixed,
                },
                burst: 100,
            };
            let mut queue = Limit::new(spec, NOW);
            let mut per_group: BTreeMap<Group, Vec<(i64, u64)>> = BTreeMap::new();
            let mut cursor = None;
            let end_ms = NOW + 30_000;
            let mut now_ms = NOW;
            let mut total = 0u64;
            while now_ms <= end_ms {
                let want = queue.available(now_ms);
                let r = release(&mut store, now_ms, want, cursor.as_ref(), usize::MAX);
                let count = u64::try_from(r.released.len()).unwrap();
                assert!(count <= want);
                total += count;
                queue.release(now_ms, count, count < want, Adaptive::default());
                let mut counts: BTreeMap<Group, u64> = BTreeMap::new();
                for m in &r.released {
                    *counts.entry(m.group.clone()).or_default() += 1;
                }
                for (group, k) in counts {
                    per_group.entry(group).or_default().push((now_ms, k));
                }
                store.apply(&r, now_ms);
                cursor = r.cursor;
                now_ms += 10;
            }
            let queue_bound = 100 + 30_000 * queue_per_second / 1000;
            assert!(total <= queue_bound, "{total} > {queue_bound}");
            let share = (total / 50).min(2 + 300);
            for group in &groups {
                let releases = &per_group[group];
                assert_within_limit(releases, group_limit);
                let got: u64 = releases.iter().map(|r| r.1).sum();
                assert!(
                    got.abs_diff(share) <= 2,
                    "{queue_per_second}/s: {group:?} got {got}, share {share}"
                );
            }
            if queue_per_second == 1000 {
                // The group limits bind: each group gets all its limit allows.
                assert_eq!(total, 50 * 302);
            } else {
                // The queue's cap binds: all of it is used.
                assert!(total + 2 >= queue_bound, "{total} of {queue_bound}");
            }
        }
    }

    #[test]
    fn a_tat_read_under_a_changed_limit_keeps_the_level() {
        let mut store = MemoryStore::default();
        store.limits.insert(g("a"), per_second(10, 5));
        for i in 0..100 {
            store.add(&g("a"), format!("m{i:03}").as_bytes(), NOW - 1);
        }
        let r = release(&mut store, NOW, 100, None, usize::MAX);
        assert_eq!(r.released.len(), 5, "the burst");
        assert_eq!(r.tats.len(), 1);
        assert_eq!(r.tats[0].until_ms, NOW + 500, "5 intervals of 100 ms ahead");
        store.apply(&r, NOW);
        // Limited, the group waits in the time index until its limit has
        // room: 4 intervals of 100 ms from the TAT, at NOW + 100.
        assert_eq!(store.indexed[&g("a")], NOW + 100);
        // 100/s: the bucket keeps its level (4 intervals ahead, now of 10
        // ms), so one member may leave, not a fresh burst of 5.
        store.limits.insert(g("a"), per_second(100, 5));
        let r = release(&mut store, NOW + 99, 100, r.cursor.as_ref(), usize::MAX);
        assert_eq!((r.released.len(), r.visits), (0, 0), "not yet admitted");
        let r = release(&mut store, NOW + 100, 100, r.cursor.as_ref(), usize::MAX);
        assert_eq!(r.released.len(), 1);
        assert_eq!(r.limited, [g("a")]);
        assert_eq!(r.tats[0].tat.under, per_second(100, 5));
        store.apply(&r, NOW + 100);
        let r = release(&mut store, NOW + 109, 100, r.cursor.as_ref(), usize::MAX);
        assert!(r.released.is_empty());
        let r = release(&mut store, NOW + 110, 100, r.cursor.as_ref(), usize::MAX);
        assert_eq!(r.released.len(), 1, "one interval of 10 ms later");
        store.apply(&r, NOW + 110);
        let r = release(&mut store, NOW + 160, 100, r.cursor.as_ref(), usize::MAX);
        assert_eq!(r.released.len(), 5, "the rate in force is the new one");
        store.apply(&r, NOW + 160);
        // Lowered to 1/s burst 1 while waiting: at its return (NOW + 170)
        // the converted TAT leaves no room; it is written back though
        // nothing left, so the new rate counts from this visit.
        store.limits.insert(g("a"), per_second(1, 1));
        let r = release(&mut store, NOW + 170, 100, r.cursor.as_ref(), usize::MAX);
        assert!(r.released.is_empty());
        assert_eq!(r.limited, [g("a")]);
        assert_eq!(r.tats.len(), 1);
        assert_eq!(r.tats[0].tat.under, per_second(1, 1));
        assert_eq!(
            r.tats[0].until_ms,
            NOW + 1170,
            "an empty bucket of the new burst"
        );
        assert_eq!(store.indexed[&g("a")], NOW + 1170);
    }

    #[test]
    fn a_tat_stops_mattering_at_its_until_and_has_room_at_its_room_time() {
        let mut rng = Rng::seeded(7);
        for _ in 0..5000 {
            let burst = 1 + rng.below(5);
            let limit = GroupLimit {
                rate: Rate {
                    n: 1 + rng.below(1000),
                    period_ms: [1000, 60_000, 3_600_000][usize::try_from(rng.below(3)).unwrap()],
                    kind: LimitKind::Fixed,
                },
                burst,
            };
            let gcra = limit.gcra();
            let t0 = NOW + i64::try_from(rng.below(10_000)).unwrap();
            let count = rng.below(burst + 2);
            let tat = gcra.after(gcra.now_ticks(t0), t0, count);
            let until_ms = gcra.matters_until_ms(tat);
            for now_ms in [until_ms, until_ms + 1, until_ms + 1000] {
                assert_eq!(gcra.available(tat, now_ms), gcra.available(0, now_ms));
            }
            if count > 0 {
                assert!(gcra.available(tat, until_ms - 1) < gcra.available(0, until_ms - 1));
            }
            // A limited group comes back exactly when one may leave.
            let room_at_ms = gcra.room_at_ms(tat);
            assert!(gcra.available(tat, room_at_ms) >= 1);
            if room_at_ms > t0 {
                assert_eq!(gcra.available(tat, room_at_ms - 1), 0);
            }
        }
    }

    /// Random schedules, limits, wants and budgets, released over time:
    /// nothing lost or duplicated, order kept in each group, never more
    /// than `want`, no second member for a group while a due group had
    /// none, and nothing left behind by emptied groups.
    #[test]
    fn properties_over_random_releases() {
        for seed in 1..=400u64 {
            let mut rng = Rng::seeded(seed);
            let mut store = MemoryStore::default();
            let group_count = 1 + rng.below(12);
            let groups: Vec<Group> = (0..group_count)
                .map(|k| {
                    if k == 0 && rng.below(2) == 0 {
                        g("")
                    } else {
                        g(&format!("g{k}"))
                    }
                })
                .collect();
            for group in &groups {
                match rng.below(3) {
                    0 => {}
                    1 => {
                        let limit = per_second(1 + rng.below(50), 1 + rng.below(4));
                        store.limits.insert(group.clone(), limit);
                        // Some start with an empty bucket: limited at once.
                        if rng.below(2) == 0 {
                            let until_ms = NOW + 1 + i64::try_from(rng.below(200)).unwrap();
                            let ticks = limit.gcra().now_ticks(until_ms);
                            let tat = Tat {
                                ticks,
                                under: limit,
                            };
                            store.tats.insert(group.clone(), (tat, until_ms));
                        }
                    }
                    _ => store.default_limit = Some(per_second(20, 3)),
                }
            }
            // The model: what each group holds, in the store's order.
            let mut model: BTreeMap<Group, BTreeSet<(i64, Vec<u8>)>> = BTreeMap::new();
            let mut serial = 0u64;
            let mut add = |store: &mut MemoryStore,
                           model: &mut BTreeMap<_, _>,
                           rng: &mut Rng,
                           now_ms: i64| {
                let group = &groups[usize::try_from(rng.below(group_count)).unwrap()];
                // Distinct members, some tied in score.
                let member = format!("m{:03}", rng.below(1000)) + &format!("-{serial}");
                serial += 1;
                let at_ms = now_ms - 50 + i64::try_from(rng.below(100)).unwrap();
                store.add(group, member.as_bytes(), at_ms);
                let set: &mut BTreeSet<(i64, Vec<u8>)> = model.entry(group.clone()).or_default();
                set.insert((at_ms, member.into_bytes()));
            };
            let mut now_ms = NOW;
            for _ in 0..rng.below(40) {
                add(&mut store, &mut model, &mut rng, now_ms);
            }
            let mut cursor: Option<Group> = None;
            for step in 0..400 {
                let draining = step >= 40;
                if !draining {
                    for _ in 0..rng.below(4) {
                        add(&mut store, &mut model, &mut rng, now_ms);
                    }
                }
                let want = if draining { 1000 } else { rng.below(8) };
                let max_steps = if draining || rng.below(2) == 0 {
                    usize::MAX
                } else {
                    usize::try_from(1 + rng.below(10)).unwrap()
                };
                // Groups with a due member that wait in the time index for
                // their limit's room: only a limit puts one there.
                let waiting =
                    |store: &MemoryStore, model: &BTreeMap<Group, BTreeSet<(i64, Vec<u8>)>>| {
                        model
                            .iter()
                            .filter(|(_, set)| set.first().is_some_and(|(at, _)| *at <= now_ms))
                            .map(|(group, _)| group.clone())
                            .filter(|group| store.indexed.get(group).is_some_and(|at| *at > now_ms))
                            .collect::<BTreeSet<Group>>()
                    };
                let waiting_before = waiting(&store, &model);
                for group in &waiting_before {
                    assert!(
                        store.limits.contains_key(group) || store.default_limit.is_some(),
                        "seed {seed}: {group:?} waits with no limit"
                    );
                }
                let due_before: BTreeSet<Group> = model
                    .iter()
                    .filter(|(_, set)| set.first().is_some_and(|(at, _)| *at <= now_ms))
                    .map(|(group, _)| group.clone())
                    .collect();
                let r = release(&mut store, now_ms, want, cursor.as_ref(), max_steps);
                assert!(
                    u64::try_from(r.released.len()).unwrap() <= want,
                    "seed {seed}"
                );
                let mut counts: BTreeMap<Group, usize> = BTreeMap::new();
                for m in &r.released {
                    assert!(m.fire_at_ms <= now_ms, "seed {seed}: not due");
                    let set = model.get_mut(&m.group).unwrap();
                    let first = set.pop_first().unwrap();
                    assert_eq!(
                        first,
                        (m.fire_at_ms, m.member.clone()),
                        "seed {seed}: order"
                    );
                    if set.is_empty() {
                        model.remove(&m.group);
                    }
                    *counts.entry(m.group.clone()).or_default() += 1;
                }
                // Fairness within the release: a group took a second member
                // only when every due group not limited had had one, and
                // counts differ by at most one among groups left due.
                let most = counts.values().copied().max().unwrap_or(0);
                for group in &due_before {
                    let got = counts.get(group).copied().unwrap_or(0);
                    let still_due = model
                        .get(group)
                        .and_then(|set| set.first())
                        .is_some_and(|(at, _)| *at <= now_ms);
                    if still_due && !r.limited.contains(group) && !waiting_before.contains(group) {
                        assert!(got + 1 >= most, "seed {seed}: {group:?} {got} vs {most}");
                    }
                }
                // What is left due is explained: by a stop, or by a limit.
                let waiting_after = waiting(&store, &model);
                let left_due: BTreeSet<&Group> = model
                    .iter()
                    .filter(|(_, set)| set.first().is_some_and(|(at, _)| *at <= now_ms))
                    .map(|(group, _)| group)
                    .filter(|group| !r.limited.contains(group))
                    .filter(|group| !waiting_after.contains(group))
                    .collect();
                let stopped = r.left.by_want || r.left.by_budget;
                assert_eq!(stopped, !left_due.is_empty(), "seed {seed}: {:?}", r.left);
                let limited: BTreeSet<&Group> = r.limited.iter().collect();
                assert_eq!(limited.len(), r.limited.len(), "seed {seed}: limited twice");
                store.apply(&r, now_ms);
                cursor = r.cursor;
                assert_eq!(store.remaining(), {
                    let mut all = BTreeSet::new();
                    for (group, set) in &model {
                        for (at, m) in set {
                            all.insert((group.clone(), *at, m.clone()));
                        }
                    }
                    all
                });
                if draining && store.members.is_empty() {
                    break;
                }
                now_ms += i64::try_from(rng.below(if draining { 1000 } else { 30 })).unwrap();
            }
            assert!(model.is_empty(), "seed {seed}: drained");
            assert!(store.is_bare(), "seed {seed}: {store:?}");
            assert_eq!(cursor, None, "seed {seed}: an empty ring keeps no cursor");
            store.apply(&Release::default(), now_ms + 10_000);
            assert!(store.tats.is_empty(), "seed {seed}: TATs expire");
        }
    }

    #[test]
    fn a_release_over_many_groups_visits_only_what_it_takes() {
        let mut store = MemoryStore::default();
        for k in 0..100_000 {
            let group = g(&format!("g{k:06}"));
            store.add(&group, b"m1", NOW - 1000 + (k % 1000));
            store.add(&group, b"m2", NOW - 1);
        }
        // From the time index: 1000 admitted, 1000 visited.
        store.calls = 0;
        let r = release(&mut store, NOW, 1000, None, usize::MAX);
        assert_eq!(r.released.len(), 1000);
        assert!(
            r.visits <= 1000 && r.admitted <= 1000,
            "{} {}",
            r.visits,
            r.admitted
        );
        assert!(store.calls <= 5000, "{} store calls", store.calls);
        assert!(r.left.by_want);
        // Next: the ring holds those 1000 (each has m2 due), 1000 more are
        // admitted; the walk still stops at 1000.
        store.calls = 0;
        let r = release(&mut store, NOW, 1000, r.cursor.as_ref(), usize::MAX);
        assert_eq!(r.released.len(), 1000);
        assert!(r.visits <= 1000 && r.admitted <= 1000);
        assert!(store.calls <= 5000, "{} store calls", store.calls);
        // Every group limited: the budget caps the visits.
        store.default_limit = Some(per_second(1, 1));
        for group in store
            .ring
            .clone()
            .iter()
            .chain(store.indexed.clone().keys())
        {
            store.tats.insert(
                group.clone(),
                (
                    Tat {
                        ticks: per_second(1, 1).gcra().now_ticks(NOW + 10_000),
                        under: per_second(1, 1),
                    },
                    NOW + 10_000,
                ),
            );
        }
        store.calls = 0;
        let r = release(&mut store, NOW, 1000, r.cursor.as_ref(), 500);
        assert!(r.released.is_empty());
        assert!(r.visits + r.admitted <= 500);
        assert!(r.left.by_budget && r.left.by_group_limit);
        assert!(store.calls <= 2000, "{} store calls", store.calls);
    }
}

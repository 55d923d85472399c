//! `ECHO.GROUPS`' pages: the groups with members in name order, read from
//! the directory, each with its counts, limit and wait.

use super::*;

/// One group as `ECHO.GROUPS` shows it.
pub struct GroupView {
    /// Empty for the ungrouped members.
    pub name: Vec<u8>,
    pub members: u64,
    pub due: u64,
    pub limit: Option<GroupLimit>,
    /// What its limit lets leave now (`None`: not limited).
    pub available: Option<u64>,
    /// The first ms it may release while it waits in the time index; 0 in
    /// the ring.
    pub waiting_until_ms: i64,
    /// The end of its own hold, 0 when not held.
    pub held_until_ms: i64,
}

/// One page of `ECHO.GROUPS`.
pub struct Page {
    pub groups: Vec<GroupView>,
    /// The last group the page passed (empty: the ungrouped, or none), when
    /// more follow; `None` at the end.
    pub next_after: Option<Vec<u8>>,
}

/// `ECHO.GROUPS`: from the start (`after` `None`: the ungrouped members
/// first, when `schedule` has any), or after the named group `after` (empty:
/// after the ungrouped), at most `count` groups in name order, read from
/// the directory with one range walk: O(log G + count). A directory entry
/// whose set is empty (emptied by hand) is passed over, so a page may hold
/// fewer. `WRONGTYPE` when `schedule` or a shared key is of another type.
pub fn page(
    ctx: &Context,
    schedule: &Arg,
    after: Option<&[u8]>,
    count: u64,
    now_ms: i64,
) -> Result<Page, RedisError> {
    let bytes = schedule.as_slice();
    if !slots::has_tag(bytes) {
        return Err(ArgError::GroupNeedsTag.into());
    }
    let ungrouped = Key::open_read(ctx, schedule);
    ungrouped.require(Kind::SortedSet)?;
    let names = StoreNames::new(ctx, bytes);
    let index = Key::open_read(ctx, names.index.arg());
    let ring = Key::open_read(ctx, names.ring.arg());
    let directory = Key::open_read(ctx, names.names.arg());
    for key in [&index, &ring, &directory] {
        key.require(Kind::SortedSet)?;
    }
    let viewer = Viewer {
        ctx,
        schedule: bytes,
        index: &index,
        ring: &ring,
        default: default_limit(bytes),
        now_ms,
    };
    let mut budget = usize::try_from(count).unwrap_or(usize::MAX);
    let mut groups = Vec::new();
    if after.is_none() && ungrouped.kind() == Kind::SortedSet {
        groups.push(viewer.view(&Group::ungrouped(), &ungrouped)?);
        budget = budget.saturating_sub(1);
    }
    let found = directory.zset_lex_range(after, budget.saturating_add(1));
    let mut last = after.unwrap_or_default().to_vec();
    for name in found.iter().take(budget) {
        last.clone_from(name);
        let Some(group) = Group::named(name) else {
            continue;
        };
        let members_name = OwnedName::new(ctx, &derived(bytes, MEMBERS_INFIX, name));
        let members = Key::open_read(ctx, members_name.arg());
        if members.kind() != Kind::SortedSet {
            continue;
        }
        groups.push(viewer.view(&group, &members)?);
    }
    Ok(Page {
        groups,
        next_after: (found.len() > budget).then_some(last),
    })
}

/// What `page` reads every group's state with.
struct Viewer<'a> {
    ctx: &'a Context,
    schedule: &'a [u8],
    index: &'a Key<'a>,
    ring: &'a Key<'a>,
    default: Option<GroupLimit>,
    now_ms: i64,
}

impl Viewer<'_> {
    fn view(&self, group: &Group, members: &Key) -> Result<GroupView, RedisError> {
        let ctx = self.ctx;
        let now_ms = self.now_ms;
        let limit = limit_of(ctx, self.schedule, group, self.default);
        // The TAT as the next visit reads it: converted to the limit in force.
        let ticks = limit.map(|limit| match stored_tat(ctx, self.schedule, group) {
            Some(tat) if tat.under == limit => tat.ticks,
            Some(tat) => tat.under.gcra().rescale(tat.ticks, limit.gcra(), now_ms),
            None => 0,
        });
        let bucket = limit.zip(ticks);
        let name = OwnedName::new(ctx, group.as_bytes());
        let waiting_until_ms = if self.ring.zscore(name.arg()).is_some() {
            0
        } else if group.is_ungrouped() {
            // In no index: it may enter the ring at its earliest fire time,
            // or when its limit has room, whichever is later.
            let first = members
                .zset_first(f64::INFINITY)
                .map_or(0, |(_, s)| score_ms(s));
            let room = bucket.map_or(i64::MIN, |(l, t)| l.gcra().room_at_ms(t));
            first.max(room)
        } else {
            self.index.zscore(name.arg()).map_or(0, score_ms)
        };
        Ok(GroupView {
            name: group.as_bytes().to_vec(),
            members: members.zcard(),
            due: due_count(ctx, members.name(), now_ms)?,
            limit,
            available: bucket.map(|(l, t)| l.gcra().available(t, now_ms)),
            waiting_until_ms,
            held_until_ms: match group.is_ungrouped() {
                true => 0,
                false => held_until(ctx, self.schedule, group.as_bytes(), now_ms).unwrap_or(0),
            },
        })
    }
}

/// `ZCOUNT key -inf now_ms`: O(log N) through the set's rank index.
fn due_count(ctx: &Context, key: &Arg, now_ms: i64) -> Result<u64, RedisError> {
    let now = now_ms.to_string();
    match ctx.call("ZCOUNT", &[key.as_slice(), b"-inf", now.as_bytes()])? {
        RedisValue::Integer(n) => Ok(n.unsigned_abs()),
        _ => Err(ReplyError::ZcountReply.into()),
    }
}

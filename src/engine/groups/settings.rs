//! One group's settings, each a string key beside the schedule: its limit
//! override (`ECHO.GROUPLIMIT`) and its hold (`ECHO.HOLD ... GROUP`).

use super::*;

/// A string key of one group (its override or its hold), opened for
/// writing with the group's own keys, every type checked before the first
/// write; `ERR a grouped schedule needs a {hash tag}` for a schedule without
/// one.
struct GroupSetting<'a> {
    keys: GroupKeys<'a>,
    key: Key<'a>,
}

impl<'a> GroupSetting<'a> {
    fn open(
        ctx: &'a Context,
        names: &'a GroupNames,
        name: &'a OwnedName,
    ) -> Result<GroupSetting<'a>, RedisError> {
        let keys = names.open(ctx)?;
        let key = Key::open_write(ctx, name.arg());
        key.require(Kind::String)?;
        Ok(GroupSetting { keys, key })
    }
}

/// `ECHO.GROUPLIMIT`: sets (`Some`) or removes (`None`, `DEFAULT`) the
/// override of `group`'s limit: `SET S:echomq-glim:<g> <GroupLimit::encode>`
/// (nothing when it already holds that) or `DEL`. A group waiting in the
/// time index is pulled back to its earliest fire time, so the limit in
/// force from now is the one its next visit reads. A new override while
/// used memory is over maxmemory is refused as a hold is (changing and
/// removing one always work).
pub fn set_limit(
    ctx: &Context,
    schedule: &[u8],
    group: &[u8],
    limit: Option<GroupLimit>,
) -> Result<(), RedisError> {
    let names = GroupNames::new(ctx, schedule, group)?;
    let name = OwnedName::new(ctx, &derived(schedule, LIMIT_INFIX, group));
    let setting = GroupSetting::open(ctx, &names, &name)?;
    match limit {
        None => {
            if !setting.key.delete() {
                return Ok(());
            }
        }
        Some(limit) => {
            let text = limit.encode();
            if setting.key.string_bytes().as_deref() == Some(text.as_bytes()) {
                return Ok(());
            }
            if setting.key.kind() == Kind::Missing && context::out_of_memory(ctx) {
                return Err(ReplyError::NewKeyOutOfMemory.into());
            }
            setting.key.set_text(text.as_bytes());
        }
    }
    setting.keys.reindex()
}

/// `ECHO.HOLD schedule ms GROUP group`: the group's hold in force after it
/// (0 for none), by `ECHO.HOLD`'s rule (`limiter::hold_until`): `SET
/// S:echomq-ghold:<g> <until> PXAT <until>` when the hold grows, `DEL` for
/// `ms = 0`, which also pulls the group back from the hold's end in the time
/// index to its earliest fire time. A new hold of a group with no members
/// while used memory is over maxmemory is refused, as `ECHO.HOLD` refuses
/// one of a schedule that does not exist.
pub fn hold(ctx: &Context, schedule: &[u8], group: &[u8], ms: u64) -> Result<i64, RedisError> {
    let names = GroupNames::new(ctx, schedule, group)?;
    let name = OwnedName::new(ctx, &derived(schedule, HOLD_INFIX, group));
    let setting = GroupSetting::open(ctx, &names, &name)?;
    if ms == 0 {
        if setting.key.delete() {
            setting.keys.reindex()?;
        }
        return Ok(0);
    }
    let now_ms = clock::wall_ms();
    let in_force = setting.key.string_i64().filter(|&until| until > now_ms);
    let Some(until) = limiter::hold_until(in_force, ms, now_ms) else {
        return Ok(in_force.unwrap_or(0));
    };
    if in_force.is_none()
        && context::out_of_memory(ctx)
        && setting.keys.members.kind() == Kind::Missing
    {
        return Err(ReplyError::NewKeyOutOfMemory.into());
    }
    setting.key.set_i64_expiring(until, until);
    Ok(until)
}

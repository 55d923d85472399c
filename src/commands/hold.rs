//! `ECHO.HOLD schedule ms`
//!
//! Nothing is released from `schedule` before `now_ms + ms`, by ECHO.PROMOTE
//! or the timer: the answer to a dependency's `429`/`503` with
//! `Retry-After`, which one worker gives for all. A longer hold already in
//! force is kept; `ms = 0` lifts the hold. Any schedule may be held, limited
//! in `echomq.release-limits` or not. `ms` is `0..=86400000`.
//!
//! Reply: integer, the server time in ms until which the schedule is held
//! (`0` when not held).
//! Errors: a malformed `ms`; a schedule name over 1024 bytes, or a new
//! schedule while 10,000 are held (holds are module memory, outside
//! maxmemory: a client must not grow them without bound; lifting a hold with
//! `0` always works).
//! Keys: `schedule`, declared, and the command is flagged `write`, so a
//! cluster routes it to the owner and a replica refuses it; it writes no key.
//! Replication: none. The hold lives in the primary's memory: a restart,
//! failover or slot move forgets it (a hold is short; the next `429` renews it).

use redis_module::{Context, RedisError, RedisResult, RedisValue};

use crate::errors::ReplyError;
use crate::limits::HoldRefused;
use crate::parse;
use crate::release;
use crate::server::keys::Arg;

pub fn echo_hold(_ctx: &Context, args: &[Arg]) -> RedisResult {
    let [_, schedule, ms] = args else {
        return Err(RedisError::WrongArity);
    };
    let ms = parse::parse_hold_ms(ms.as_slice())?;
    match release::hold(schedule.as_slice(), ms) {
        Ok(until) => Ok(RedisValue::Integer(until)),
        Err(HoldRefused::TooMany) => Err(ReplyError::TooManyHolds.into()),
        Err(HoldRefused::NameTooLong) => Err(ReplyError::HoldNameTooLong.into()),
    }
}

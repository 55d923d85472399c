//! A job's group (`AddOptions::group`; not the stream's consumer group) as it
//! travels with the job: in its payload entry of `{name}:jobs`, wrapped as
//! `\0echomq-group:<n>:<group><payload>` (docs/clients.md, Groups), so that a
//! worker of any language has it from the payload it reads anyway and
//! retries the job into its group, and it is deleted with the payload.

use std::borrow::Cow;

use redis::RedisResult;

use crate::protocol::{JOB_GROUP_ENVELOPE, MAX_JOB_GROUP_BYTES};
use crate::queue::client_error;

/// The envelope's first bytes, NUL then `job_group_envelope`, as
/// requeue.lua reads a dead job's group with them.
pub(crate) fn head() -> Vec<u8> {
    let mut head = vec![0];
    head.extend_from_slice(JOB_GROUP_ENVELOPE.as_bytes());
    head
}

/// The envelope's first bytes: NUL, then `job_group_envelope`.
fn starts_with_envelope(value: &[u8]) -> bool {
    value.first() == Some(&0) && value[1..].starts_with(JOB_GROUP_ENVELOPE.as_bytes())
}

/// `group` checked as `ECHO.ADD ... GROUP` checks it, before anything is
/// sent: 1..=1024 bytes.
pub(crate) fn check_job_group(group: &str) -> RedisResult<()> {
    if group.is_empty() || group.len() > MAX_JOB_GROUP_BYTES {
        return Err(client_error(
            "invalid job group",
            format!(
                "a job group must be 1..={MAX_JOB_GROUP_BYTES} bytes, not {}",
                group.len()
            ),
        ));
    }
    Ok(())
}

/// The value stored for `payload`: itself, or with the envelope of
/// `job_group` before it. A payload that starts like an envelope is wrapped
/// with n = 0 (no group), so it is never misread.
pub(crate) fn wrap<'a>(payload: &'a [u8], job_group: Option<&str>) -> Cow<'a, [u8]> {
    let group = match job_group {
        Some(group) => group.as_bytes(),
        None if !starts_with_envelope(payload) => return Cow::Borrowed(payload),
        None => b"",
    };
    let mut value = Vec::with_capacity(payload.len() + group.len() + JOB_GROUP_ENVELOPE.len() + 7);
    value.push(0);
    value.extend_from_slice(JOB_GROUP_ENVELOPE.as_bytes());
    value.extend_from_slice(format!("{}:", group.len()).as_bytes());
    value.extend_from_slice(group);
    value.extend_from_slice(payload);
    Cow::Owned(value)
}

/// [`wrap`] undone: the payload and the job's group (raw, as stored), `None`
/// without one. A value that is not a whole envelope is a payload as it is.
pub(crate) fn unwrap(mut value: Vec<u8>) -> (Vec<u8>, Option<Vec<u8>>) {
    if !starts_with_envelope(&value) {
        return (value, None);
    }
    let start = 1 + JOB_GROUP_ENVELOPE.len();
    let head = &value[start..value.len().min(start + 5)];
    let Some(colon) = head.iter().position(|&b| b == b':') else {
        return (value, None);
    };
    let digits = &head[..colon];
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return (value, None);
    }
    let n: usize = digits.iter().fold(0, |n, d| n * 10 + usize::from(d - b'0'));
    let from = start + colon + 1;
    if n > MAX_JOB_GROUP_BYTES || from + n > value.len() {
        return (value, None);
    }
    let payload = value.split_off(from + n);
    let group = (n > 0).then(|| value[from..].to_vec());
    (payload, group)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_unwraps_to_what_was_wrapped() {
        let tricky: &[u8] = b"\0echomq-group:4:acmepayload";
        for (payload, group) in [
            (&b"x"[..], None),
            (b"x", Some("acme")),
            (tricky, None),
            (b"", Some("g")),
            (b"\0echomq-group:", None),
        ] {
            let value = wrap(payload, group).into_owned();
            let (back, back_group) = unwrap(value);
            assert_eq!(back, payload);
            assert_eq!(back_group.as_deref(), group.map(str::as_bytes));
        }
        assert_eq!(wrap(b"x", Some("acme")).as_ref(), b"\0echomq-group:4:acmex");
        for broken in [
            &b"\0echomq-group:99:ab"[..],
            b"\0echomq-group:x:ab",
            b"\0echomq-group::ab",
        ] {
            assert_eq!(unwrap(broken.to_vec()), (broken.to_vec(), None));
        }
    }
}

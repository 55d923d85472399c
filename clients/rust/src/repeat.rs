//! Recurring jobs (docs/clients.md, Recurring jobs): a definition the
//! server keeps and arms, one occurrence `<id>@<nominal_ms>` at a time, each
//! a job of the queue with the definition's payload.

use redis::{RedisResult, Value};

use crate::envelope;
use crate::protocol::{MAX_EVERY_MS, MAX_REPEAT_ID_BYTES, MIN_EVERY_MS};
use crate::queue::{client_error, entry_pairs, Queue};

/// How [`Queue::repeat`] schedules a recurring job's occurrences;
/// `RepeatOptions::default()` is none of them: no jitter, UTC, unbounded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RepeatOptions {
    /// Each occurrence fires at its nominal time plus a uniform draw in
    /// `0..=jitter_ms`, at most the spec's smallest interval (for
    /// `every:<ms>`, `ms`).
    pub jitter_ms: u64,
    /// The IANA time zone (`"Europe/Berlin"`) the spec's calendar is read
    /// in; `None`: UTC.
    pub tz: Option<String>,
    /// No occurrence before this (Unix ms); `every:<ms>` counts its
    /// intervals from it.
    pub from_ms: Option<i64>,
    /// No occurrence after this (Unix ms); the definition ends after its
    /// last one.
    pub until_ms: Option<i64>,
}

/// One recurring job of a queue, as `ECHO.REPEATS` reports it (see
/// [`Queue::repeats`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repeat {
    pub id: String,
    /// The spec as given.
    pub spec: String,
    pub jitter_ms: u64,
    /// The zone's name, `"UTC"` without one.
    pub tz: String,
    pub from_ms: Option<i64>,
    pub until_ms: Option<i64>,
    /// The nominal time of the armed occurrence, whose job id is
    /// `<id>@<next_ms>`.
    pub next_ms: i64,
    /// Its fire time (`next_ms` plus its jitter); `None` when its job was
    /// removed by hand (a [`Queue::repeat`] of the same definition arms it
    /// again).
    pub fire_at_ms: Option<i64>,
}

impl Repeat {
    /// One `ECHO.REPEATS` entry: a map (RESP3) or a flat field/value array
    /// (RESP2).
    fn from_entry(entry: Value) -> RedisResult<Repeat> {
        let pairs = entry_pairs(entry, "unexpected ECHO.REPEATS reply")?;
        let mut repeat = Repeat {
            id: String::new(),
            spec: String::new(),
            jitter_ms: 0,
            tz: String::new(),
            from_ms: None,
            until_ms: None,
            next_ms: 0,
            fire_at_ms: None,
        };
        for (field, value) in pairs {
            let field: String = redis::from_redis_value(field)?;
            match field.as_str() {
                "id" => repeat.id = redis::from_redis_value(value)?,
                "spec" => repeat.spec = redis::from_redis_value(value)?,
                "jitter-ms" => repeat.jitter_ms = redis::from_redis_value(value)?,
                "tz" => repeat.tz = redis::from_redis_value(value)?,
                "from-ms" => repeat.from_ms = redis::from_redis_value(value)?,
                "until-ms" => repeat.until_ms = redis::from_redis_value(value)?,
                "next-ms" => repeat.next_ms = redis::from_redis_value(value)?,
                "fire-at-ms" => repeat.fire_at_ms = redis::from_redis_value(value)?,
                _ => {}
            }
        }
        Ok(repeat)
    }
}

/// `ECHO.REPEAT`'s arguments checked as the server checks their form,
/// before anything is sent: the id 1..=1024 bytes (its occurrences are job
/// ids), the spec `every:<ms>` (ms in 1000..=10^13, digits without a sign
/// or a leading zero) or `cron:` and its fields (which the server reads),
/// the jitter at most the interval of `every:` (10^13 for a cron), a
/// non-empty zone, and `from_ms <= until_ms`. The option words: `JITTER`
/// and `TZ` only when given, so every library sends one definition in the
/// same words (a definition declared again changes nothing only when it
/// is the same as written).
pub(crate) fn repeat_words(
    id: &str,
    spec: &str,
    options: &RepeatOptions,
) -> RedisResult<Vec<String>> {
    let refuse = |desc: &'static str, detail: String| Err(client_error(desc, detail));
    if id.is_empty() || id.len() > MAX_REPEAT_ID_BYTES {
        return refuse(
            "invalid recurring job id",
            format!(
                "a recurring job's id must be 1..={MAX_REPEAT_ID_BYTES} bytes, not {}",
                id.len()
            ),
        );
    }
    let kind = |word: &str| {
        spec.get(..word.len())
            .filter(|head| head.eq_ignore_ascii_case(word))
            .map(|_| &spec[word.len()..])
    };
    let jitter_bound = if let Some(digits) = kind("every:") {
        let canonical = !digits.is_empty()
            && digits.bytes().all(|b| b.is_ascii_digit())
            && (digits == "0" || !digits.starts_with('0'));
        // More digits than u64 holds are out of range too.
        let interval = digits.parse::<u64>().unwrap_or(u64::MAX);
        if !canonical || !(MIN_EVERY_MS..=MAX_EVERY_MS).contains(&interval) {
            return refuse(
                "invalid spec",
                format!("every:<ms> takes ms in {MIN_EVERY_MS}..={MAX_EVERY_MS} (digits only, no leading zero), not {spec:?}"),
            );
        }
        interval
    } else if kind("cron:").is_some_and(|fields| !fields.trim().is_empty()) {
        // The spec's smallest interval: the server knows it.
        MAX_EVERY_MS
    } else {
        return refuse(
            "invalid spec",
            format!("a spec is every:<ms> or cron:<5 fields>, not {spec:?}"),
        );
    };
    if options.jitter_ms > jitter_bound {
        return refuse(
            "invalid jitter",
            format!(
                "jitter_ms must be in 0..={jitter_bound} for {spec:?}, not {}",
                options.jitter_ms
            ),
        );
    }
    if let (Some(from), Some(until)) = (options.from_ms, options.until_ms) {
        if until < from {
            return refuse(
                "invalid bounds",
                format!("until_ms ({until}) must not be before from_ms ({from})"),
            );
        }
    }
    let mut words = Vec::new();
    if options.jitter_ms > 0 {
        words.extend(["JITTER".to_string(), options.jitter_ms.to_string()]);
    }
    if let Some(tz) = &options.tz {
        if tz.is_empty() {
            return refuse(
                "invalid time zone",
                "tz must not be empty (None: UTC)".into(),
            );
        }
        words.extend(["TZ".to_string(), tz.clone()]);
    }
    if let Some(from) = options.from_ms {
        words.extend(["FROM".to_string(), from.to_string()]);
    }
    if let Some(until) = options.until_ms {
        words.extend(["UNTIL".to_string(), until.to_string()]);
    }
    Ok(words)
}

impl Queue {
    /// Creates or replaces the recurring job `id` (`ECHO.REPEAT`) and
    /// returns the fire time (server Unix ms) of its armed occurrence.
    ///
    /// `spec` is `every:<ms>` (ms in 1000..=10^13, counted from the call or
    /// from `options.from_ms`) or `cron:<minute hour day-of-month month
    /// day-of-week>` (names, ranges, steps, lists, `@hourly` and the like),
    /// in UTC or in `options.tz`. The server arms one occurrence at a time,
    /// the job `<id>@<nominal_ms>` of this queue with `payload` (stored as
    /// [`Queue::add`] stores one, never grouped), and arms the next in the
    /// same step that releases it, however many workers and promoters run:
    /// a [`crate::Worker`] runs it as any job (`job.id` is the occurrence's
    /// id), and its success, retries or death never touch the definition. A
    /// stretch missed while the server was down runs once.
    ///
    /// The same definition again changes nothing and returns the same fire
    /// time, so every instance of an application may declare its recurring
    /// jobs at start; a different one (the payload too) replaces it, armed
    /// again from now. Arguments the server would refuse for their form are
    /// refused here with nothing sent; a cron field or a zone the server
    /// does not know is the server's refusal, with nothing written.
    pub async fn repeat(
        &self,
        id: &str,
        spec: &str,
        payload: impl AsRef<[u8]>,
        options: RepeatOptions,
    ) -> RedisResult<i64> {
        let words = repeat_words(id, spec, &options)?;
        self.shard(self.shard_of(id))
            .repeat_one(id, spec, payload.as_ref(), &words)
            .await
    }

    async fn repeat_one(
        &self,
        id: &str,
        spec: &str,
        payload: &[u8],
        words: &[String],
    ) -> RedisResult<i64> {
        let value = envelope::wrap(payload, None);
        // The release that moves an occurrence into a missing pending would
        // make it a list.
        self.make_stream_once().await?;
        let mut command = redis::cmd("ECHO.REPEAT");
        command
            .arg(&self.keys.schedule)
            .arg(id)
            .arg(spec)
            .arg(words)
            .arg("PAYLOAD")
            .arg(&self.keys.jobs)
            .arg(value.as_ref());
        // The same definition sent again changes nothing: safe to resend.
        self.resent_on_cluster(|| async { command.query_async(&mut self.conn.clone()).await })
            .await
    }

    /// Removes the recurring job `id` and its armed occurrence
    /// (`ECHO.UNREPEAT`); `false` when there was none. An occurrence
    /// already released runs to its end, as any job.
    pub async fn unrepeat(&self, id: &str) -> RedisResult<bool> {
        if id.is_empty() {
            return Err(client_error(
                "invalid recurring job id",
                "a recurring job's id may not be empty".into(),
            ));
        }
        for shard in self.shards_for(id) {
            if shard.unrepeat_one(id).await? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    async fn unrepeat_one(&self, id: &str) -> RedisResult<bool> {
        let mut command = redis::cmd("ECHO.UNREPEAT");
        command.arg(&self.keys.schedule).arg(id);
        let removed: i64 = self
            .resent_on_cluster(|| async { command.query_async(&mut self.conn.clone()).await })
            .await?;
        Ok(removed == 1)
    }

    /// The queue's recurring jobs, by id (`ECHO.REPEATS`).
    pub async fn repeats(&self) -> RedisResult<Vec<Repeat>> {
        if self.sharded() {
            return self.repeats_sharded().await;
        }
        self.repeats_one().await
    }

    pub(crate) async fn repeats_one(&self) -> RedisResult<Vec<Repeat>> {
        let mut command = redis::cmd("ECHO.REPEATS");
        command.arg(&self.keys.schedule);
        let entries: Vec<Value> = self
            .resent_on_cluster(|| async { command.query_async(&mut self.conn.clone()).await })
            .await?;
        entries.into_iter().map(Repeat::from_entry).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(id: &str, spec: &str, options: RepeatOptions) -> Result<Vec<String>, String> {
        repeat_words(id, spec, &options).map_err(|e| e.to_string())
    }

    #[test]
    fn the_words_name_only_what_was_given() {
        assert_eq!(
            words("a", "every:1000", RepeatOptions::default()),
            Ok(vec![])
        );
        let all = RepeatOptions {
            jitter_ms: 1000,
            tz: Some("Europe/Berlin".into()),
            from_ms: Some(-5),
            until_ms: Some(-5),
        };
        assert_eq!(
            words("a", "EVERY:1000", all),
            Ok([
                "JITTER",
                "1000",
                "TZ",
                "Europe/Berlin",
                "FROM",
                "-5",
                "UNTIL",
                "-5"
            ]
            .map(String::from)
            .to_vec())
        );
        assert_eq!(
            words("a", "cron:@hourly", RepeatOptions::default()),
            Ok(vec![])
        );
    }
}

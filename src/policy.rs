//! Backoff policies: the delay a job waits before its next attempt.
//!
//! Pure maths, no server types. Randomness comes in from the caller as a
//! sampler, so tests can pin every branch (both ends of the jitter range
//! included) and the server can use an OS-seeded generator.

/// Largest millisecond value a policy may name: 10^13 ms, about 317 years.
/// Bounding every input keeps `now_ms + delay_ms` an exact integer score
/// (well under 2^53, the largest integer a double holds exactly).
pub const MAX_MS: u64 = 10_000_000_000_000;

/// How many `jitter:` layers may wrap a backoff. More adds nothing a user
/// could want and only lets a client make the server draw many times.
pub const MAX_JITTER_LAYERS: u8 = 8;

/// The deterministic part of a policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backoff {
    /// `fixed:<ms>`: the same delay for every attempt.
    Fixed { delay_ms: u64 },
    /// `exponential:<base>:<max>`: `min(base * 2^(attempts-1), max)`.
    Exponential { base_ms: u64, max_ms: u64 },
}

impl Backoff {
    /// The delay before retrying after `attempts` failures (`attempts >= 1`;
    /// `0` is treated as `1`). Saturates at the cap instead of overflowing.
    pub fn delay_ms(self, attempts: u64) -> u64 {
        match self {
            Backoff::Fixed { delay_ms } => delay_ms,
            Backoff::Exponential { base_ms, max_ms } => {
                let doublings = attempts.saturating_sub(1);
                if base_ms == 0 {
                    return 0;
                }
                // `1 << 64` does not exist; any doubling that large is past every cap.
                if doublings >= u64::from(u64::BITS) {
                    return max_ms;
                }
                base_ms
                    .checked_mul(1u64 << doublings)
                    .map_or(max_ms, |delay_ms| delay_ms.min(max_ms))
            }
        }
    }
}

/// A backoff wrapped in zero or more `jitter:` layers (full jitter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub backoff: Backoff,
    /// Number of `jitter:` prefixes, `0..=MAX_JITTER_LAYERS`.
    pub jitter_layers: u8,
}

impl Policy {
    pub fn is_jittered(&self) -> bool {
        self.jitter_layers > 0
    }

    /// The delay for `attempts`. Each jitter layer replaces the delay `d` by
    /// `draw(d)`, which must be uniform over the closed range `0..=d`; a
    /// sampler that returns more than `d` is clamped, so the bound holds
    /// whatever the sampler does.
    pub fn delay_ms(&self, attempts: u64, mut draw: impl FnMut(u64) -> u64) -> u64 {
        let mut delay_ms = self.backoff.delay_ms(attempts);
        for _ in 0..self.jitter_layers {
            if delay_ms == 0 {
                break;
            }
            delay_ms = draw(delay_ms).min(delay_ms);
        }
        delay_ms
    }

    /// The delay for `attempts`, with jitter drawn from `rng`.
    pub fn delay_ms_with_rng<R: rand::Rng + ?Sized>(&self, attempts: u64, rng: &mut R) -> u64 {
        self.delay_ms(attempts, |max_ms| uniform_inclusive(rng, max_ms))
    }
}

/// A uniform integer in `0..=max`, both ends included, without modulo bias.
pub fn uniform_inclusive<R: rand::Rng + ?Sized>(rng: &mut R, max: u64) -> u64 {
    use rand::RngExt;
    rng.random_range(0..=max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed(delay_ms: u64) -> Backoff {
        Backoff::Fixed { delay_ms }
    }
    fn exp(base_ms: u64, max_ms: u64) -> Backoff {
        Backoff::Exponential { base_ms, max_ms }
    }
    fn plain(backoff: Backoff) -> Policy {
        Policy {
            backoff,
            jitter_layers: 0,
        }
    }
    fn jittered(backoff: Backoff, jitter_layers: u8) -> Policy {
        Policy {
            backoff,
            jitter_layers,
        }
    }

    #[test]
    fn backoff_table() {
        let max = i64::MAX as u64;
        let cases: &[(Backoff, u64, u64)] = &[
            (fixed(0), 1, 0),
            (fixed(1000), 1, 1000),
            (fixed(1000), 7, 1000),
            (fixed(MAX_MS), max, MAX_MS),
            (exp(100, 10_000), 1, 100),
            (exp(100, 10_000), 2, 200),
            (exp(100, 10_000), 3, 400),
            (exp(100, 10_000), 4, 800),
            (exp(100, 10_000), 7, 6400),
            (exp(100, 10_000), 8, 10_000),
            (exp(100, 10_000), 9, 10_000),
            (exp(100, 10_000), 64, 10_000),
            (exp(100, 10_000), 65, 10_000),
            (exp(100, 10_000), 1000, 10_000),
            (exp(100, 10_000), max, 10_000),
            (exp(100, 10_000), u64::MAX, 10_000),
            (exp(1, MAX_MS), 1, 1),
            (exp(1, MAX_MS), 44, 1 << 43),
            (exp(1, MAX_MS), 45, MAX_MS),
            (exp(1, MAX_MS), 64, MAX_MS),
            (exp(1, MAX_MS), 65, MAX_MS),
            (exp(MAX_MS, MAX_MS), 1, MAX_MS),
            (exp(MAX_MS, MAX_MS), 2, MAX_MS),
            (exp(MAX_MS, MAX_MS), max, MAX_MS),
            (exp(0, 0), 1, 0),
            (exp(0, 500), 1000, 0),
            (exp(5, 5), 1, 5),
            (exp(3, 10), 0, 3),
        ];
        for &(backoff, attempts, want) in cases {
            assert_eq!(
                backoff.delay_ms(attempts),
                want,
                "{backoff:?} attempts={attempts}"
            );
            assert_eq!(plain(backoff).delay_ms(attempts, |_| unreachable!()), want);
        }
    }

    #[test]
    fn exponential_doubles_until_the_cap() {
        let b = exp(100, 10_000);
        let got: Vec<u64> = (1..=9).map(|a| b.delay_ms(a)).collect();
        assert_eq!(got, [100, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000]);
    }

    #[test]
    fn jitter_endpoints_with_injected_samples() {
        let p = jittered(exp(100, 10_000), 1);
        assert_eq!(p.delay_ms(3, |_| 0), 0);
        assert_eq!(p.delay_ms(3, |d| d), 400);
        assert_eq!(p.delay_ms(3, |_| 123), 123);
        // a misbehaving sampler cannot exceed the bound
        assert_eq!(p.delay_ms(3, |_| u64::MAX), 400);
        // the sampler is asked for exactly the inner delay
        let mut asked = Vec::new();
        p.delay_ms(3, |d| {
            asked.push(d);
            d
        });
        assert_eq!(asked, [400]);
    }

    #[test]
    fn jitter_nesting_draws_from_the_previous_draw() {
        let p = jittered(fixed(1000), 3);
        let mut asked = Vec::new();
        let got = p.delay_ms(1, |d| {
            asked.push(d);
            d / 2
        });
        assert_eq!(asked, [1000, 500, 250]);
        assert_eq!(got, 125);
        // nested full jitter keeps the endpoints
        assert_eq!(p.delay_ms(1, |d| d), 1000);
        assert_eq!(p.delay_ms(1, |_| 0), 0);
        // a zero delay is never drawn from
        assert_eq!(jittered(fixed(0), 8).delay_ms(1, |_| unreachable!()), 0);
        assert!(p.is_jittered());
        assert!(!plain(fixed(1)).is_jittered());
    }

    #[test]
    fn uniform_inclusive_reaches_both_ends() {
        let mut rng = rand::rng();
        for max in [0u64, 1, 2, 5] {
            let mut seen = vec![0u32; max as usize + 1];
            for _ in 0..10_000 {
                let v = uniform_inclusive(&mut rng, max);
                assert!(v <= max);
                seen[v as usize] += 1;
            }
            assert!(seen.iter().all(|&n| n > 0), "max={max} seen={seen:?}");
        }
        // the full u64 range is accepted (no overflow computing the span)
        let _ = uniform_inclusive(&mut rng, u64::MAX);
    }
}

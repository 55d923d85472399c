//! Backoff policies: the delay a job waits before its next attempt.
//!
//! Pure maths, no server types. Randomness comes in from the caller as a
//! sampler, so tests can pin every branch (both ends of the jitter range
//! included) and the server can use an OS-seeded generator.

/// Largest millisecond value a policy may name: 10^13 ms, about 317 years.
/// Bounding every input keeps `now_ms + delay_ms` an exact integer score
/// (well under 2^53, the largest integer a double holds exactly).
pub const MAX_MS: u64 = 10_000_000_000_000;

/// How many jitter wrappers (`jitter:` and `equal-jitter:` together) may
/// wrap a backoff. More adds nothing a user could want and only lets a client
/// make the server draw many times.
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

/// One random wrapper around a delay `d`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Jitter {
    /// `jitter:`: uniform in `0..=d` (full jitter).
    Full,
    /// `equal-jitter:`: uniform in `ceil(d/2)..=d`, never less than half.
    Equal,
}

impl Jitter {
    /// Applies this wrapper to `delay_ms`. `draw(n)` must be uniform over
    /// `0..=n`; a sampler that returns more than `n` is clamped, so the range
    /// holds whatever the sampler does. `n` is never 0: nothing is drawn when
    /// the range has one value.
    fn apply(self, delay_ms: u64, draw: &mut impl FnMut(u64) -> u64) -> u64 {
        // Equal jitter is `d - floor(d/2) + uniform(0..=floor(d/2))`: the
        // floor keeps an odd `d` reachable at both ends.
        let span_ms = match self {
            Jitter::Full => delay_ms,
            Jitter::Equal => delay_ms / 2,
        };
        if span_ms == 0 {
            return delay_ms;
        }
        delay_ms - span_ms + draw(span_ms).min(span_ms)
    }
}

/// The wrappers of a policy, innermost first: bit `i` of `equal_bits` says
/// whether layer `i` is equal jitter. A fixed-size value keeps `Policy`
/// `Copy` and the parser allocation-free.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Jitters {
    count: u8,
    equal_bits: u8,
}

impl Jitters {
    pub const NONE: Jitters = Jitters {
        count: 0,
        equal_bits: 0,
    };

    /// Builds the wrappers from the outermost (as written) to the innermost.
    /// `None` past `MAX_JITTER_LAYERS`.
    pub fn from_outermost(layers: &[Jitter]) -> Option<Jitters> {
        let mut jitters = Jitters::NONE;
        for &layer in layers.iter().rev() {
            jitters = jitters.wrapped_in(layer)?;
        }
        Some(jitters)
    }

    /// These wrappers inside one more, outer, `layer`. `None` past
    /// `MAX_JITTER_LAYERS`.
    pub fn wrapped_in(self, layer: Jitter) -> Option<Jitters> {
        if self.count >= MAX_JITTER_LAYERS {
            return None;
        }
        let bit = u8::from(layer == Jitter::Equal) << self.count;
        Some(Jitters {
            count: self.count + 1,
            equal_bits: self.equal_bits | bit,
        })
    }

    pub fn is_empty(self) -> bool {
        self.count == 0
    }

    /// The layers in the order they apply: innermost first.
    pub fn inner_first(self) -> impl Iterator<Item = Jitter> {
        (0..self.count).map(move |i| {
            if self.equal_bits >> i & 1 == 1 {
                Jitter::Equal
            } else {
                Jitter::Full
            }
        })
    }
}

/// A backoff wrapped in zero or more jitter layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub backoff: Backoff,
    pub jitters: Jitters,
}

impl Policy {
    pub fn is_jittered(&self) -> bool {
        !self.jitters.is_empty()
    }

    /// The delay for `attempts`. Each layer, innermost first, replaces the
    /// delay `d` by a draw over its range (`0..=d` or `ceil(d/2)..=d`), using
    /// `draw(n)`, which must be uniform over `0..=n`.
    pub fn delay_ms(&self, attempts: u64, mut draw: impl FnMut(u64) -> u64) -> u64 {
        let mut delay_ms = self.backoff.delay_ms(attempts);
        for layer in self.jitters.inner_first() {
            delay_ms = layer.apply(delay_ms, &mut draw);
        }
        delay_ms
    }

    /// The delay for `attempts`, with jitter drawn from `rng`.
    pub fn delay_ms_with_rng<R: rand::Rng + ?Sized>(&self, attempts: u64, rng: &mut R) -> u64 {
        self.delay_ms(attempts, |max_ms| uniform_inclusive(rng, max_ms))
    }

    /// The closed range every delay for `attempts` falls in, whatever the
    /// draws (what the tests hold the draws to).
    #[cfg(test)]
    pub fn bounds_ms(&self, attempts: u64) -> (u64, u64) {
        let high_ms = self.backoff.delay_ms(attempts);
        let low_ms = self
            .jitters
            .inner_first()
            .fold(high_ms, |low_ms, layer| match layer {
                Jitter::Full => 0,
                Jitter::Equal => low_ms - low_ms / 2,
            });
        (low_ms, high_ms)
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
        wrapped(backoff, &[])
    }
    fn jittered(backoff: Backoff, jitter_layers: u8) -> Policy {
        wrapped(backoff, &vec![Jitter::Full; usize::from(jitter_layers)])
    }
    /// `layers` outermost first, as written.
    fn wrapped(backoff: Backoff, layers: &[Jitter]) -> Policy {
        Policy {
            backoff,
            jitters: Jitters::from_outermost(layers).unwrap(),
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

    #[test]
    fn equal_jitter_exact_ranges_for_small_delays() {
        // Every value a sampler can give, for d = 0..=3: the reachable set is
        // exactly ceil(d/2)..=d.
        for (d, want) in [
            (0u64, vec![0u64]),
            (1, vec![1]),
            (2, vec![1, 2]),
            (3, vec![2, 3]),
        ] {
            let p = wrapped(fixed(d), &[Jitter::Equal]);
            let mut got: Vec<u64> = (0..=d + 2).map(|s| p.delay_ms(1, |_| s)).collect();
            got.sort_unstable();
            got.dedup();
            assert_eq!(got, want, "d={d}");
            assert_eq!(p.bounds_ms(1), (want[0], d));
        }
        // d = 0 and d = 1 have one value: nothing is drawn
        for d in [0, 1] {
            let p = wrapped(fixed(d), &[Jitter::Equal]);
            assert_eq!(p.delay_ms(1, |_| unreachable!()), d);
        }
    }

    #[test]
    fn equal_jitter_endpoints_with_injected_samples() {
        let p = wrapped(exp(100, 10_000), &[Jitter::Equal]);
        // attempt 3: d = 400, range 200..=400, the sampler asked for 0..=200
        let mut asked = Vec::new();
        assert_eq!(
            p.delay_ms(3, |n| {
                asked.push(n);
                0
            }),
            200
        );
        assert_eq!(asked, [200]);
        assert_eq!(p.delay_ms(3, |n| n), 400);
        assert_eq!(p.delay_ms(3, |_| u64::MAX), 400);
        assert_eq!(p.bounds_ms(3), (200, 400));
        // odd d = 401: 201..=401
        let odd = wrapped(fixed(401), &[Jitter::Equal]);
        assert_eq!(odd.delay_ms(1, |_| 0), 201);
        assert_eq!(odd.delay_ms(1, |n| n), 401);
        assert!(odd.is_jittered());
    }

    #[test]
    fn jitter_kinds_nest_both_ways() {
        // jitter:equal-jitter:fixed:1000 -- equal applies first (inner), then full.
        let full_of_equal = wrapped(fixed(1000), &[Jitter::Full, Jitter::Equal]);
        let mut asked = Vec::new();
        let got = full_of_equal.delay_ms(1, |n| {
            asked.push(n);
            n / 2
        });
        // equal: 1000 - 500 + 250 = 750; full: draw(750) = 375
        assert_eq!(asked, [500, 750]);
        assert_eq!(got, 375);
        assert_eq!(full_of_equal.bounds_ms(1), (0, 1000));
        // equal-jitter:jitter:fixed:1000 -- full first, then equal of that.
        let equal_of_full = wrapped(fixed(1000), &[Jitter::Equal, Jitter::Full]);
        let mut asked = Vec::new();
        let got = equal_of_full.delay_ms(1, |n| {
            asked.push(n);
            n / 2
        });
        // full: 500; equal: 500 - 250 + 125 = 375
        assert_eq!(asked, [1000, 250]);
        assert_eq!(got, 375);
        assert_eq!(equal_of_full.bounds_ms(1), (0, 1000));
        // equal of equal: never below a quarter
        let twice = wrapped(fixed(1000), &[Jitter::Equal, Jitter::Equal]);
        assert_eq!(twice.bounds_ms(1), (250, 1000));
        assert_eq!(twice.delay_ms(1, |_| 0), 250);
        assert_eq!(twice.delay_ms(1, |n| n), 1000);
    }

    #[test]
    fn at_most_eight_wrappers_of_either_kind() {
        let mut layers = Vec::new();
        for i in 0..8 {
            layers.push(if i % 3 == 0 {
                Jitter::Equal
            } else {
                Jitter::Full
            });
            let j = Jitters::from_outermost(&layers).unwrap();
            assert_eq!(j.inner_first().count(), layers.len());
            // inner_first gives the written order reversed
            let back: Vec<Jitter> = j.inner_first().collect();
            assert_eq!(back, layers.iter().rev().copied().collect::<Vec<_>>());
        }
        layers.push(Jitter::Full);
        assert_eq!(Jitters::from_outermost(&layers), None);
        let eight = Jitters::from_outermost(&layers[..8]).unwrap();
        assert_eq!(eight.wrapped_in(Jitter::Equal), None);
    }

    /// Chi-square goodness of fit of equal jitter over its 51 values
    /// (d = 100: 50..=100), from the OS-seeded generator the server uses.
    /// 50 degrees of freedom: the 0.99999 quantile is about 104.8
    /// (Wilson-Hilferty), so a correct sampler fails this once in 100,000
    /// runs; one that missed an end, or drew from 0..=d, is far past it.
    #[test]
    fn equal_jitter_is_uniform_chi_square() {
        let p = wrapped(fixed(100), &[Jitter::Equal]);
        let mut rng = rand::rng();
        let draws = 51_000u32;
        let mut seen = [0u32; 101];
        for _ in 0..draws {
            let d = p.delay_ms_with_rng(1, &mut rng);
            assert!((50..=100).contains(&d), "{d}");
            seen[d as usize] += 1;
        }
        let expected = f64::from(draws) / 51.0;
        let chi2: f64 = seen[50..]
            .iter()
            .map(|&n| (f64::from(n) - expected).powi(2) / expected)
            .sum();
        assert!(seen[50] > 0 && seen[100] > 0, "both ends reached");
        assert!(
            chi2 < 104.8,
            "chi-square {chi2:.1} over 50 degrees of freedom"
        );
    }
}

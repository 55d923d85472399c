//! ECHO.SPREAD's buckets: exact integer edges over the full i64 range, and
//! the doubles a range count must be given so each score lands in the bucket
//! the integer formula names. Pure arithmetic, no server types.

/// Upper bound of `ECHO.SPREAD`'s bucket count: one range count each.
pub const MAX_SPREAD_BUCKETS: u64 = 10_000;

/// ECHO.SPREAD's window and bucket count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpreadRequest {
    pub start_ms: i64,
    pub end_ms: i64,
    pub buckets: u64,
}

impl SpreadRequest {
    /// Bucket `i` covers `[start + floor(i*W/buckets), start + floor((i+1)*W/buckets))`
    /// with `W = end - start`. i128 holds `W` (up to 2^64) times `buckets`.
    pub fn bucket_bounds_ms(&self, i: u64) -> (i64, i64) {
        let width = i128::from(self.end_ms) - i128::from(self.start_ms);
        let at = |k: u64| {
            let offset = i128::from(k) * width / i128::from(self.buckets);
            // start <= start + offset <= end, so it fits an i64; saturate to say so.
            let edge = i128::from(self.start_ms) + offset;
            i64::try_from(edge).unwrap_or(if edge < 0 { i64::MIN } else { i64::MAX })
        };
        (at(i), at(i + 1))
    }
}

/// The smallest double that is `>= edge_ms`. Scores are doubles: for any
/// score `x`, `x >= edge_ms` exactly when `x >= ceil_to_f64(edge_ms)`, so a
/// range count between two such bounds puts each score in the bucket the
/// integer formula names, also past 2^53 where not every integer is a double.
pub fn ceil_to_f64(edge_ms: i64) -> f64 {
    let nearest = edge_ms as f64;
    // |nearest| <= 2^63, so i128 holds it exactly.
    if (nearest as i128) < i128::from(edge_ms) {
        nearest.next_up()
    } else {
        nearest
    }
}

/// The decimal a range count parses back to `edge`, an integer-valued
/// double. Integer formatting is several times cheaper than float formatting
/// and exact below 2^63; only 2^63 itself (the edge of `i64::MAX`) is not an i64.
pub fn edge_text(edge: f64) -> String {
    const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
    if (-TWO_POW_63..TWO_POW_63).contains(&edge) {
        (edge as i64).to_string()
    } else {
        format!("{edge}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_edges_round_up_to_doubles() {
        let two53 = 1i64 << 53;
        for (edge, want) in [
            (0, 0.0),
            (-1, -1.0),
            (two53, two53 as f64),
            (two53 + 1, (two53 + 2) as f64),
            (-(two53 + 1), -(two53 as f64)),
            (i64::MAX, 9_223_372_036_854_775_808.0),
            (i64::MIN, -9_223_372_036_854_775_808.0),
        ] {
            assert_eq!(ceil_to_f64(edge), want, "{edge}");
            // the decimal form a range count parses back is the same double
            assert_eq!(format!("{}", ceil_to_f64(edge)).parse::<f64>(), Ok(want));
        }
    }

    #[test]
    fn spread_buckets_split_unevenly_and_cover_the_window() {
        let r = SpreadRequest {
            start_ms: 0,
            end_ms: 10,
            buckets: 3,
        };
        let bounds: Vec<_> = (0..3).map(|i| r.bucket_bounds_ms(i)).collect();
        assert_eq!(bounds, [(0, 3), (3, 6), (6, 10)]);
        let r = SpreadRequest {
            start_ms: i64::MIN,
            end_ms: i64::MAX,
            buckets: 10_000,
        };
        assert_eq!(r.bucket_bounds_ms(0).0, i64::MIN);
        assert_eq!(r.bucket_bounds_ms(9999).1, i64::MAX);
        for i in 0..9999 {
            assert_eq!(r.bucket_bounds_ms(i).1, r.bucket_bounds_ms(i + 1).0);
        }
    }

    #[test]
    fn edges_print_as_the_doubles_they_are() {
        for edge in [0, -1, 1 << 53, i64::MAX, i64::MIN] {
            let double = ceil_to_f64(edge);
            assert_eq!(edge_text(double).parse::<f64>(), Ok(double), "{edge}");
        }
    }
}

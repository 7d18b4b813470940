//! The P/D router's routed-expert row merge (PrimeIntellect-ai/router
//! `src/routers/http/routed_experts_merge.rs`, called from `vllm_pd_router.rs` once both
//! stages answered), and what a colocated engine would have returned for the same request
//! (pd-equals-colocated).
//!
//! Each instance answers `/generate` with a start label and its rows. kvmc knows the real
//! position of every row (a row is what the router chose for one forwarded position, so its
//! value is fixed by its position and the request's tokens): a response is its label plus the
//! positions its rows really have. The merge keeps all of P's rows and some suffix of D's:
//! - v0.2.3 (`RouterMerge::ByStart`): `overlap = P.start + P.len - D.start`, refused (an error,
//!   HTTP 500) unless `0 <= overlap <= D.len`; D's first `overlap` rows are dropped;
//! - v0.2.2 (`ByCount`): D's first `P.len` rows are dropped by count, whatever D's start;
//!   "decode routed_experts has {D.len} rows, expected at least {P.len}" (HTTP 500) when D has
//!   fewer — this matched the old capture, where D returned rows for the whole `[s, T - 1)`;
//! - payload segments (`Segments`): each segment carries its position; decode rows below the
//!   end of the prefill's rows are dropped, a straddling segment is clipped.
//!
//! The merged answer is right when its label is the request's start and its rows are exactly
//! the positions `[start, T - 1)` in order: what the colocated engine returns (rows-exact).

use crate::system::rules::RouterMerge;

/// One instance's `/generate` answer.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct Resp {
    /// The start the response names.
    pub start: u32,
    /// Where the rows really are: `[first, end)` (None: no rows).
    pub rows: Option<(u32, u32)>,
    /// Number of rows.
    pub len: u32,
    /// The rows are not contiguous (their positions are not one range).
    pub gap: bool,
}

impl Resp {
    pub fn describe(&self) -> String {
        match self.rows {
            None => format!("start {}, no rows", self.start),
            Some((a, b)) => format!(
                "start {}, {} rows at [{a},{b}){}",
                self.start,
                self.len,
                if self.gap { " with a gap" } else { "" }
            ),
        }
    }
}

/// The router's answer: a start label and the real positions of the rows, in order.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Merged {
    pub start: u32,
    pub ranges: Vec<(u32, u32)>,
    /// A part came from a response whose rows had a gap (their positions are not one range).
    pub gap: bool,
}

impl Merged {
    pub fn len(&self) -> u32 {
        self.ranges.iter().map(|(a, b)| b - a).sum()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Equal to the colocated answer `[start, t1)` labelled `start`?
    pub fn equals_colocated(&self, start: u32, t1: u32) -> bool {
        if self.gap || self.start != start {
            return false;
        }
        let mut at = start;
        for &(a, b) in self.ranges.iter().filter(|(a, b)| a < b) {
            if a != at {
                return false;
            }
            at = b;
        }
        at == t1.max(start)
    }

    pub fn describe(&self) -> String {
        let rs: Vec<String> = self.ranges.iter().filter(|(a, b)| a < b).map(|(a, b)| format!("[{a},{b})")).collect();
        format!(
            "start {}, {} rows at positions {}",
            self.start,
            self.len(),
            if rs.is_empty() { "none".to_string() } else { rs.join(" + ") }
        )
    }
}

/// The rows of `r` from its `k`-th row on (their real positions).
fn suffix(r: &Resp, k: u32) -> Vec<(u32, u32)> {
    match r.rows {
        Some((a, b)) if a + k < b => vec![(a + k, b)],
        _ => Vec::new(),
    }
}

fn all(r: &Resp) -> Vec<(u32, u32)> {
    suffix(r, 0)
}

/// Merge P's and D's answers; `Err` is the router's error (HTTP 500 "Request processing
/// failed: ...").
pub fn merge(rule: RouterMerge, p: &Resp, d: &Resp) -> Result<Merged, String> {
    let gap = p.gap || d.gap;
    match rule {
        RouterMerge::ByCount => {
            if d.len < p.len {
                return Err(format!("decode routed_experts has {} rows, expected at least {}", d.len, p.len));
            }
            let mut ranges = all(p);
            ranges.extend(suffix(d, p.len));
            Ok(Merged { start: p.start, ranges, gap })
        }
        RouterMerge::ByStart => {
            let overlap = i64::from(p.start) + i64::from(p.len) - i64::from(d.start);
            if overlap < 0 || overlap > i64::from(d.len) {
                return Err(format!(
                    "decode routed_experts start {} leaves overlap {overlap} with the prefill's {} rows from {} (allowed 0..={})",
                    d.start, p.len, p.start, d.len
                ));
            }
            let mut ranges = all(p);
            ranges.extend(suffix(d, overlap as u32));
            Ok(Merged { start: p.start, ranges, gap })
        }
        RouterMerge::Segments => {
            // Positions come with the segments: cut = max(pos + rows) over P's segments.
            let start = p.rows.map_or(p.start, |(a, _)| a);
            let cut = p.rows.map_or(p.start, |(_, b)| b);
            let mut ranges = all(p);
            if let Some((a, b)) = d.rows {
                if a.max(cut) < b {
                    ranges.push((a.max(cut), b));
                }
            }
            Ok(Merged { start, ranges, gap })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resp(start: u32, first: u32, end: u32) -> Resp {
        Resp { start, rows: (first < end).then_some((first, end)), len: end - first, gap: false }
    }

    /// Scenario (C)/(D) of the design notes: p = 6, s = 0, c = 3 (T = 9): P rows [0,6), D rows
    /// [5,8) labelled 5.
    #[test]
    fn scenario_c_and_d() {
        let p = resp(0, 0, 6);
        let d = resp(5, 5, 8);
        let m = merge(RouterMerge::ByStart, &p, &d).unwrap();
        assert!(m.equals_colocated(0, 8), "{}", m.describe());
        assert_eq!(
            merge(RouterMerge::ByCount, &p, &d).unwrap_err(),
            "decode routed_experts has 3 rows, expected at least 6"
        );
        assert!(merge(RouterMerge::Segments, &p, &d).unwrap().equals_colocated(0, 8));
        // c = 8 (T = 14): D rows [5,13); v0.2.2 keeps [11,13) after P's [0,6): silently wrong.
        let d = resp(5, 5, 13);
        let m = merge(RouterMerge::ByCount, &p, &d).unwrap();
        assert_eq!(m.ranges, vec![(0, 6), (11, 13)]);
        assert!(!m.equals_colocated(0, 13));
        assert!(merge(RouterMerge::ByStart, &p, &d).unwrap().equals_colocated(0, 13));
        // start = s on D (prime-rl HEAD): v0.2.3's overlap is P.len, as v0.2.2's.
        let d = resp(0, 5, 13);
        assert!(!merge(RouterMerge::ByStart, &p, &d).unwrap().equals_colocated(0, 13));
        assert!(merge(RouterMerge::Segments, &p, &d).unwrap().equals_colocated(0, 13));
    }
}

//! The seed's three routers: round-robin, least-loaded and prefix-aware (docs/MODEL.md,
//! "Routers").

use super::{Route, RouteView, Router};
use crate::fleet::base::limits::MAX_PODS;

/// Request i goes to pod i mod N.
#[derive(Clone, Copy, Debug, Default)]
pub struct RoundRobin;

impl Router for RoundRobin {
    fn needs_index(&self) -> bool {
        false
    }
    fn route(&mut self, view: &RouteView<'_, '_>, _keys: &[u64]) -> Route {
        let pod = (view.request % view.queue_lens.len() as u64) as usize;
        Route { pod, believed_match_blocks: 0 }
    }
}

/// The pod with the smallest queue; ties to the lowest index.
#[derive(Clone, Copy, Debug, Default)]
pub struct LeastLoaded;

impl Router for LeastLoaded {
    fn needs_index(&self) -> bool {
        false
    }
    fn route(&mut self, view: &RouteView<'_, '_>, _keys: &[u64]) -> Route {
        let mut best = 0;
        for (p, &q) in view.queue_lens.iter().enumerate() {
            if q < view.queue_lens[best] {
                best = p;
            }
        }
        Route { pod: best, believed_match_blocks: 0 }
    }
}

/// score_p = match_p - alpha * queue_len(p), computed in IEEE-754 binary64 exactly as written;
/// the highest score wins, ties to the smaller queue, then to the lowest index.
#[derive(Clone, Copy, Debug)]
pub struct PrefixAware {
    /// Load penalty per queued request, in blocks.
    pub alpha: f64,
}

impl Router for PrefixAware {
    fn needs_index(&self) -> bool {
        true
    }
    fn route(&mut self, view: &RouteView<'_, '_>, keys: &[u64]) -> Route {
        // 64-entry scratch up to 64 pods (as before larger fleets), MAX_PODS above.
        if view.queue_lens.len() <= 64 {
            let mut matches = [0u32; 64];
            view.matches(keys, &mut matches);
            self.choose(&matches, view.queue_lens)
        } else {
            let mut matches = [0u32; MAX_PODS];
            view.matches(keys, &mut matches);
            self.choose(&matches, view.queue_lens)
        }
    }
}

impl PrefixAware {
    /// The pod with the highest score given match_p (`matches[p]`) and queue_len(p), one per
    /// routable pod (also used by the run-length replay, which computes the matches per run).
    pub fn choose(&self, matches: &[u32], queue_lens: &[u32]) -> Route {
        // A whole alpha up to 2^20 (the default is 1): every score is an integer below 2^53 in
        // magnitude, exact in f64, so integer arithmetic makes the same comparisons, faster.
        let whole = self.alpha >= 0.0 && self.alpha <= MAX_WHOLE_ALPHA && (self.alpha as u64) as f64 == self.alpha;
        if whole {
            return choose_whole(self.alpha as u64, matches, queue_lens);
        }
        let mut best = 0;
        let mut best_score = f64::NEG_INFINITY;
        // queue_lens[best], kept alongside.
        let mut best_q = queue_lens.first().copied().unwrap_or(0);
        for (p, (&m, &q)) in matches.iter().zip(queue_lens).enumerate() {
            let score = m as f64 - self.alpha * q as f64;
            // Selects rather than branches (the winner is data-dependent: mispredicted branches
            // showed in `fleet bench`); the same comparisons, in the same order.
            let better = score > best_score || (score == best_score && q < best_q);
            best = if better { p } else { best };
            best_score = if better { score } else { best_score };
            best_q = if better { q } else { best_q };
        }
        Route { pod: best, believed_match_blocks: matches[best] }
    }
}

/// Largest alpha [`PrefixAware::choose`] scores in integers: alpha x queue_len stays below 2^52.
const MAX_WHOLE_ALPHA: f64 = (1u64 << 20) as f64;

/// [`PrefixAware::choose`] for a whole alpha at most [`MAX_WHOLE_ALPHA`], in integers.
fn choose_whole(alpha: u64, matches: &[u32], queue_lens: &[u32]) -> Route {
    let mut best = 0;
    let mut best_score = i64::MIN;
    let mut best_q = queue_lens.first().copied().unwrap_or(0);
    for (p, (&m, &q)) in matches.iter().zip(queue_lens).enumerate() {
        // |score| < 2^53: m < 2^32, alpha q < 2^20 x 2^32.
        let score = m as i64 - (alpha * q as u64) as i64;
        let better = score > best_score || (score == best_score && q < best_q);
        best = if better { p } else { best };
        best_score = if better { score } else { best_score };
        best_q = if better { q } else { best_q };
    }
    Route { pod: best, believed_match_blocks: matches[best] }
}

//! `fleet report`, section 11: llm-d's precise-prefix benchmark reproduced under the batched
//! engine (`scenarios/llm-d-ramp.toml`), the presets beside llm-d's published rows, llm-d's 2026
//! routing against a Kubernetes Service, and every router on the Mooncake conversation trace.
//!
//! A report section of its own (`report/mod.rs` only calls [`run`] and renders [`blocks`]). The
//! published figures and how each simulated figure is computed are in docs/MODEL.md, "The llm-d
//! benchmark, reproduced"; every sentence of the prose is formatted from the results.
//!
//! By concern: `published` (llm-d's figures and their sources), `presets` (the router
//! configurations compared), `run` (the runs and their figures), `oracle` (the orderings the
//! simulated rows must keep), `markdown` (tables and prose).

mod markdown;
mod oracle;
mod presets;
mod published;
mod run;

pub use markdown::*;
pub use oracle::*;
pub use presets::*;
pub use published::*;
pub use run::*;

#[cfg(test)]
mod tests {
    use brokerlab_core::fleet::Completion;

    use super::*;

    fn c(first: u64, finish: u64, n: u64) -> Completion {
        Completion {
            request: 0,
            pod: 0,
            arrival_ns: 0,
            first_token_ns: first,
            finish_ns: finish,
            input_tokens: 16,
            output_tokens: n,
            hit_tokens: 0,
            prefill_tokens: 16,
            preemptions: 0,
            queue_len: 0,
            offload_hit_tokens: 0,
            pd: brokerlab_core::fleet::engine::pd::PdOutcome::NONE,
        }
    }

    #[test]
    fn tokens_are_spread_from_first_to_last() {
        // 5 tokens at 100, 125, 150, 175, 200.
        let r = c(100, 200, 5);
        assert_eq!(tokens_in(&r, 0, 1000), 5);
        assert_eq!(tokens_in(&r, 0, 100), 0);
        assert_eq!(tokens_in(&r, 100, 101), 1);
        assert_eq!(tokens_in(&r, 101, 150), 1, "125 only");
        assert_eq!(tokens_in(&r, 125, 176), 3, "125, 150, 175");
        assert_eq!(tokens_in(&r, 200, 201), 1);
        assert_eq!(tokens_in(&r, 201, 300), 0);
        // Windows that tile the line count every token once.
        let sum: u64 = (0..30).map(|i| tokens_in(&r, i * 7, (i + 1) * 7)).sum();
        assert_eq!(sum, 5);
        // One token, or all at once.
        assert_eq!(tokens_in(&c(50, 50, 1), 50, 51), 1);
        assert_eq!(tokens_in(&c(50, 50, 3), 0, 50), 0);
        assert_eq!(tokens_in(&c(50, 50, 3), 50, 51), 3);
    }

    #[test]
    fn published_ordering_passes_and_wrong_orders_fail() {
        let p = published_rows();
        assert_eq!(ordering_violations(p, true), Vec::<String>::new());
        let swap = |i: usize, j: usize| {
            let mut r = p;
            r.swap(i, j);
            r
        };
        assert_eq!(ordering_violations(swap(0, 1), true).len(), 2);
        assert_eq!(ordering_violations(swap(0, 1), false).len(), 2, "approximate beating precise fails either way");
        assert!(!ordering_violations(swap(1, 3), true).is_empty());
        // load-only and random swapped: still a tie.
        assert!(ordering_violations(swap(2, 3), true).is_empty());
        // A precise/approximate tie: fails strict, passes non-strict.
        let mut tie = p;
        tie[1] = tie[0];
        assert_eq!(ordering_violations(tie, true).len(), 2);
        assert!(ordering_violations(tie, false).is_empty());
        // A cache-blind pair 2x apart is no tie; nor 1.15x (the old 1.5 tolerance let it pass).
        let mut r = p;
        r[2].1 *= 2.0;
        assert_eq!(ordering_violations(r, true).len(), 1);
        let mut r = p;
        r[2].0 = r[3].0 / 1.15;
        assert_eq!(ordering_violations(r, true).len(), 1);
        // The published pair itself is a tie.
        assert!(p[3].0 / p[2].0 <= CACHE_BLIND_TIE && p[2].1 / p[3].1 <= CACHE_BLIND_TIE);
        // A missing run (NaN) fails, whichever row it is.
        for i in 0..4 {
            let blank: [fn(&mut (f64, f64)); 2] = [|r| r.0 = f64::NAN, |r| r.1 = f64::NAN];
            for f in blank {
                let mut r = p;
                f(&mut r[i]);
                assert_eq!(ordering_violations(r, true).len(), 1, "row {i}");
                assert_eq!(ordering_violations(r, false).len(), 1, "row {i}");
            }
        }
    }

    #[test]
    fn the_published_summary_is_the_mean_of_the_published_stages() {
        // precise-scheduling's 16 per-stage output tok/s (73-capacity README): their mean is the
        // summary row, which is why the section averages its stages the same way.
        let stages = [
            1219.1, 3902.1, 5761.1, 9184.5, 9382.0, 9242.2, 9221.8, 9780.6, 10270.8, 10054.8, 10128.7, 10296.5,
            10284.6, 10140.9, 10313.9, 10496.9,
        ];
        let mean = stages.iter().sum::<f64>() / stages.len() as f64;
        assert!((mean - Preset::Precise.published().unwrap().output_tok_s).abs() < 0.05, "{mean}");
    }
}

//! The autoscaling flags (`--scale-*`) that `fleet replay` and `fleet compare` share, apart from
//! `cli/args.rs` so that `cli/compare/` does not import the replay's arguments (`cargo xtask deps`).

use brokerlab_core::fleet::{ScalePolicy, defaults};
use clap::Args;

use crate::error::{CliError, CliResult};
use crate::fleet::cli::flag::whole;
use crate::fleet::run::fields;
use crate::fleet::scenario;

/// Autoscaling flags (docs/MODEL.md, "Autoscaling"); `--scale-min` turns it on and `--pods` is
/// then the most pods.
#[derive(Debug, Args, Clone)]
pub struct ScaleArgs {
    /// Autoscale between this many pods and --pods (off when absent).
    #[arg(long, allow_negative_numbers = true, value_parser = whole::<u32>)]
    pub scale_min: Option<u32>,
    /// Routable pods at the start (default: --scale-min).
    #[arg(long, allow_negative_numbers = true, value_parser = whole::<u32>)]
    pub scale_initial: Option<u32>,
    /// Seconds between autoscaler evaluations [default: 10].
    #[arg(long, allow_negative_numbers = true)]
    pub scale_interval_s: Option<f64>,
    /// queue-target: scale out when the mean queue length of the routable pods exceeds this
    /// [default: 4].
    #[arg(long, allow_negative_numbers = true)]
    pub scale_up_queue: Option<f64>,
    /// queue-target: scale in when the mean queue length is below this [default: 0.5].
    #[arg(long, allow_negative_numbers = true)]
    pub scale_down_queue: Option<f64>,
    /// Seconds from a scale-out decision until the new pod takes requests [default: 30].
    #[arg(long, allow_negative_numbers = true)]
    pub scale_startup_s: Option<f64>,
    /// The rule: queue-target (the FIFO engine's, its default) | wva-saturation (llm-d WVA's
    /// saturation analyzer: the batched engine's, its default).
    #[arg(long)]
    pub scale_policy: Option<String>,
    /// wva-saturation: peak window in seconds (> 0, a whole number of 4 ns): at each evaluation
    /// a pod's KV usage and waiting queue are their peaks over the samples of the current
    /// quarter-window bucket and the 4 before it (up to 1.25 windows back) [default: 60].
    #[arg(long, allow_negative_numbers = true)]
    pub scale_window_s: Option<f64>,
    /// wva-saturation: a pod is saturated at this KV usage (kvCacheThreshold) [default: 0.8].
    #[arg(long, allow_negative_numbers = true)]
    pub scale_kv_threshold: Option<f64>,
    /// wva-saturation: a pod is saturated at this many waiting requests (queueLengthThreshold)
    /// [default: 5].
    #[arg(long, allow_negative_numbers = true)]
    pub scale_queue_threshold: Option<f64>,
    /// wva-saturation: scale up when the mean spare KV is below this (kvSpareTrigger)
    /// [default: 0.1].
    #[arg(long, allow_negative_numbers = true)]
    pub scale_kv_spare: Option<f64>,
    /// wva-saturation: scale up when the mean spare queue is below this (queueSpareTrigger)
    /// [default: 3].
    #[arg(long, allow_negative_numbers = true)]
    pub scale_queue_spare: Option<f64>,
}

impl ScaleArgs {
    /// The policy for `pods` pods, or None without --scale-min; an error names the flag.
    pub fn policy(&self, pods: usize) -> CliResult<Option<ScalePolicy>> {
        let Some(min) = self.scale_min else {
            return Ok(None);
        };
        let p = scenario::scale_policy(
            pods,
            min,
            self.scale_initial,
            self.scale_interval_s.unwrap_or(defaults::SCALE_INTERVAL_NS as f64 / 1e9),
            self.scale_up_queue.unwrap_or(defaults::SCALE_UP_MILLI as f64 / 1e3),
            self.scale_down_queue.unwrap_or(defaults::SCALE_DOWN_MILLI as f64 / 1e3),
            self.scale_startup_s.unwrap_or(defaults::SCALE_STARTUP_NS as f64 / 1e9),
        )
        .map_err(flag_error)?;
        Ok(Some(p))
    }

    fn wva_given(&self) -> scenario::WvaGiven {
        scenario::WvaGiven {
            window_s: self.scale_window_s,
            kv_threshold: self.scale_kv_threshold,
            queue_threshold: self.scale_queue_threshold,
            kv_spare: self.scale_kv_spare,
            queue_spare: self.scale_queue_spare,
        }
    }

    /// Refuses a setting of the other engine's rule (exit 2 naming the flag); `batched` is
    /// `--engine batched`.
    pub fn check_rule(&self, batched: bool) -> CliResult<()> {
        let given = scenario::ScaleGiven {
            policy: self.scale_policy.as_deref(),
            up_queue: self.scale_up_queue.is_some(),
            down_queue: self.scale_down_queue.is_some(),
            wva: self.wva_given(),
        };
        if self.scale_min.is_none() {
            // every autoscaling flag but --scale-min: ignored without it, so refused
            let new_flags = [
                ("--scale-initial", self.scale_initial.is_some()),
                ("--scale-interval-s", self.scale_interval_s.is_some()),
                ("--scale-up-queue", self.scale_up_queue.is_some()),
                ("--scale-down-queue", self.scale_down_queue.is_some()),
                ("--scale-startup-s", self.scale_startup_s.is_some()),
                ("--scale-policy", given.policy.is_some()),
                ("--scale-window-s", self.scale_window_s.is_some()),
                ("--scale-kv-threshold", self.scale_kv_threshold.is_some()),
                ("--scale-queue-threshold", self.scale_queue_threshold.is_some()),
                ("--scale-kv-spare", self.scale_kv_spare.is_some()),
                ("--scale-queue-spare", self.scale_queue_spare.is_some()),
            ];
            if let Some((flag, _)) = new_flags.iter().find(|(_, set)| *set) {
                return Err(CliError::bad_input(format!("{flag}: only with --scale-min (autoscaling)")));
            }
            return Ok(());
        }
        scenario::check_scale_rule(batched, &given).map_err(flag_error)
    }

    /// The batched engine's WVA thresholds from the flags, checked against the interval, set in
    /// `e` (when autoscaling).
    pub fn apply_wva(&self, e: &mut brokerlab_core::fleet::BatchedConfig) -> CliResult<()> {
        if self.scale_min.is_some() {
            e.wva = scenario::wva_thresholds(&self.wva_given()).map_err(flag_error)?;
        }
        Ok(())
    }
}

/// A core rule's (field, expected, got) as an exit-2 error naming the flag.
pub(crate) fn flag_error((field, expected, got): (brokerlab_core::fleet::Field, &'static str, String)) -> CliError {
    CliError::bad_input(format!("{}: {got}: expected {expected}", fields::flag(field)))
}

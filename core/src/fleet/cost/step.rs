//! The seam between the engines and the cost models: an engine sums up what a step does into a
//! [`BatchShape`] (prefill tokens and their chunks' attention work, decoding requests, cached
//! context) and asks a [`StepCost`] for its time. The engines never see a model's form; a model
//! is a variant here ([`StepCost::Linear`], [`StepCost::Physics`]), its coefficients in its own
//! type. A FIFO server serving one request alone could ask the same for a one-chunk prefill
//! ([`BatchShape::add_prefill`] with c = the hit).

use super::linear::{LinearCost, Profile};
use super::physics::Physics;
use super::profiles::PhysicsProfile;
use super::shape::BatchShape;
use crate::fleet::base::error::{Error, Field, Quantity};

/// A step-cost model.
// The physics variant is ~450 bytes: no Box without alloc, and a configuration is copied once per
// engine (a fleet holds a few KB of them, docs/ARCHITECTURE.md).
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum StepCost {
    /// [`LinearCost`].
    Linear(LinearCost),
    /// [`Physics`]: model + GPU + TP + calibration (checked when it was built; its `step_ns` is
    /// at least 1 ns).
    Physics(Physics),
}

/// Which step model a run used, and the profile it came from (reporting; the cost itself is the
/// [`StepCost`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum StepProfile {
    /// A built-in linear profile (its coefficients possibly changed one by one).
    Linear(Profile),
    /// A built-in physics profile.
    Physics(PhysicsProfile),
    /// A physics profile read from a file (`fleet calibrate`'s output) or fitted in the run.
    PhysicsFile,
}

impl StepProfile {
    /// The profile's name (`--profile`); a file profile is `file`.
    pub const fn name(self) -> &'static str {
        match self {
            StepProfile::Linear(p) => p.name(),
            StepProfile::Physics(p) => p.name(),
            StepProfile::PhysicsFile => "file",
        }
    }

    /// The step model's name (`--step-model`): `linear` or `physics`.
    pub const fn step_model(self) -> &'static str {
        match self {
            StepProfile::Linear(_) => "linear",
            StepProfile::Physics(_) | StepProfile::PhysicsFile => "physics",
        }
    }
}

impl StepCost {
    /// An empty batch for this model (a model with sliding-window layers counts their attention
    /// apart: the linear one has none).
    pub const fn shape(&self) -> BatchShape {
        match self {
            StepCost::Linear(_) => BatchShape::new(0),
            StepCost::Physics(p) => p.shape(),
        }
    }

    /// Whether the model prices the extra reads of shared KV blocks ([`BatchShape::decode_shared`]):
    /// a physics profile whose `shared_kv_read_ppm` is below 1,000,000. The engine counts them
    /// only then (off, every batch keeps `decode_shared` 0).
    pub const fn shares_kv_reads(&self) -> bool {
        match self {
            StepCost::Linear(_) => false,
            StepCost::Physics(p) => p.shares_kv_reads(),
        }
    }

    /// The time of a step of batch `s`, ns.
    #[inline]
    pub fn step_ns(&self, s: &BatchShape) -> Result<u64, Error> {
        match self {
            StepCost::Linear(c) => c.step_ns(s),
            // the physics model's only error at step time is an overflow of its integers
            StepCost::Physics(p) => p.step_ns(s).map_err(|_| Error::Overflow { what: Quantity::StepTime }),
        }
    }

    /// The linear coefficients, when the model is linear.
    pub fn linear(&self) -> Option<&LinearCost> {
        match self {
            StepCost::Linear(c) => Some(c),
            StepCost::Physics(_) => None,
        }
    }

    /// The linear coefficients to change, when the model is linear.
    pub fn linear_mut(&mut self) -> Option<&mut LinearCost> {
        match self {
            StepCost::Linear(c) => Some(c),
            StepCost::Physics(_) => None,
        }
    }

    /// The physics profile, when the model is physics.
    pub fn physics(&self) -> Option<&Physics> {
        match self {
            StepCost::Physics(p) => Some(p),
            StepCost::Linear(_) => None,
        }
    }

    /// Checks the model: every step takes at least 1 ns (time always advances, and a closed
    /// loop's completions come after the steps already run).
    pub fn validate(&self) -> Result<(), Error> {
        match self {
            StepCost::Linear(c) if c.t_overhead_ns == 0 => {
                Err(Error::InvalidConfig { field: Field::TOverheadNs, expected: "at least 1 ns" })
            }
            StepCost::Linear(_) => Ok(()),
            // Physics::new and with_calibration check the calibration (step_ns >= 1)
            StepCost::Physics(_) => Ok(()),
        }
    }
}

/// The batch of a decode run `steps` steps after `base` (every request of `base` decoding one
/// token per step, so each has `steps` more tokens cached), when that is a shift of `base`'s
/// sums: without sliding-window layers. None otherwise (the caller sums the requests again).
pub fn decodes_after(base: &BatchShape, steps: u64) -> Result<Option<BatchShape>, Error> {
    if base.window != 0 || base.prefill_requests != 0 {
        return Ok(None);
    }
    let over = Error::Overflow { what: Quantity::BatchShape };
    let more = steps.checked_mul(base.decode_requests).ok_or(over)?;
    let mut s = *base;
    s.decode_cached = s.decode_cached.checked_add(more).ok_or(over)?;
    s.decode_cached_window = s.decode_cached_window.checked_add(more).ok_or(over)?;
    s.decode_pairs_window = s.decode_pairs_window.checked_add(more).ok_or(over)?;
    Ok(Some(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_is_the_sum_over_the_shape_and_overflow_is_an_error() {
        let c = LinearCost { t_overhead_ns: 7, t_prefill_token_ns: 3, t_decode_seq_ns: 5, t_kv_token_ns: 2 };
        let mut s = BatchShape::new(0);
        s.add_prefill(2, 10).unwrap(); // context 12
        s.add_decode(40).unwrap(); // context 41
        s.add_decode(46).unwrap(); // context 47
        assert_eq!(StepCost::Linear(c).step_ns(&s), Ok(7 + 3 * 10 + 5 * 2 + 2 * 100));
        let huge = LinearCost { t_prefill_token_ns: u64::MAX, ..c };
        assert_eq!(huge.step_ns(&s), Err(Error::Overflow { what: Quantity::StepTime }));
        assert!(StepCost::Linear(LinearCost { t_overhead_ns: 0, ..c }).validate().is_err());
    }

    #[test]
    fn a_decode_run_shifts_the_sums_like_adding_each_request_again() {
        let mut base = BatchShape::new(0);
        for c in [5, 17, 30] {
            base.add_decode(c).unwrap();
        }
        let mut later = BatchShape::new(0);
        for c in [5 + 4, 17 + 4, 30 + 4] {
            later.add_decode(c).unwrap();
        }
        assert_eq!(decodes_after(&base, 4), Ok(Some(later)));
        // the shared tokens of a run stay as they were (nothing is admitted or released)
        let shared = BatchShape { decode_shared: 16, ..base };
        assert_eq!(decodes_after(&shared, 4), Ok(Some(BatchShape { decode_shared: 16, ..later })));
        let windowed = BatchShape { window: 8, ..base };
        assert_eq!(decodes_after(&windowed, 4), Ok(None));
    }
}

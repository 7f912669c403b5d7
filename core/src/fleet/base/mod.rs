//! The bottom layer: errors and the names they carry, named limits, integer math, percentiles,
//! the load signals every engine reports and every router may read, and pod-set bitmasks. It
//! imports nothing else of the fleet.

pub mod carve;
pub mod error;
pub mod fixmath;
pub mod limits;
pub mod load;
pub mod mask;
pub mod stats;

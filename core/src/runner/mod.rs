//! The durable task runner core (see docs/RUNNER.md).

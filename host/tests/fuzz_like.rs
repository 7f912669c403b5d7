//! CI's short, fixed-seed stand-in for the cargo-fuzz target `trace_line` (fuzz/): the trace-line
//! parser never panics, explains every rejection, and what it accepts survives a write-back. The
//! record decoder's equivalents live in core (`core/src/runner/tests.rs`: random bytes, valid
//! headers with random bodies, mutated bodies, random flash images).

use brokerlab::fleet::input::trace::{TraceRecord, parse_line};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

fn config() -> Config {
    Config { cases: 3000, rng_seed: RngSeed::Fixed(0x7ACE), failure_persistence: None, ..Config::default() }
}

/// The fuzz target's oracle: parse; if accepted, write the record back as a line and parse that to
/// the same record; if rejected, the message is not empty.
fn check(line: &str) -> Result<(), TestCaseError> {
    let mut rec = TraceRecord::default();
    match parse_line(line, &mut rec) {
        Ok(()) => {
            let back = write_back(&rec);
            let mut again = TraceRecord::default();
            prop_assert!(parse_line(&back, &mut again).is_ok(), "{back}");
            prop_assert_eq!(again, rec);
        }
        Err(msg) => prop_assert!(!msg.is_empty(), "empty message for {:?}", line),
    }
    Ok(())
}

fn write_back(r: &TraceRecord) -> String {
    format!(
        r#"{{"timestamp": {}, "input_length": {}, "output_length": {}, "hash_ids": {:?}}}"#,
        r.timestamp_ms, r.input_length, r.output_length, r.hash_ids
    )
}

/// JSON-ish values a trace field might hold, valid or not.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<u64>().prop_map(|v| v.to_string()),
        any::<i64>().prop_map(|v| v.to_string()),
        any::<f64>().prop_map(|v| format!("{v:?}")),
        Just("18446744073709551616".to_string()),
        Just("1e3".to_string()),
        Just("null".to_string()),
        Just("\"12\"".to_string()),
        Just("true".to_string()),
        proptest::collection::vec(any::<u64>(), 0..6).prop_map(|v| format!("{v:?}")),
        proptest::collection::vec(-3i64..3, 0..4).prop_map(|v| format!("{v:?}")),
        Just("{}".to_string()),
        "[a-z0-9\\[\\]{}:,\" -]{0,12}",
    ]
}

fn field() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just("timestamp"),
        Just("input_length"),
        Just("output_length"),
        Just("hash_ids"),
        Just("extra"),
        Just("Timestamp"),
    ]
}

proptest! {
    #![proptest_config(config())]

    /// Any text at all: no panic.
    #[test]
    fn arbitrary_text_never_panics(line in "\\PC{0,200}") {
        check(&line)?;
    }

    /// Arbitrary bytes read as (lossy) UTF-8, as a trace file might hold.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        check(&String::from_utf8_lossy(&bytes))?;
    }

    /// Objects built from trace fields (missing, repeated, unknown, wrong types, extreme numbers).
    #[test]
    fn structured_objects(fields in proptest::collection::vec((field(), value()), 0..7)) {
        let body: Vec<String> = fields.iter().map(|(k, v)| format!("\"{k}\": {v}")).collect();
        check(&format!("{{{}}}", body.join(", ")))?;
    }

    /// Valid records round-trip exactly, whatever their field order and spacing.
    #[test]
    fn valid_records_roundtrip(
        t in any::<u64>(), i in any::<u64>(), o in any::<u64>(),
        ids in proptest::collection::vec(any::<u64>(), 0..40),
        rev in any::<bool>(), sp in "[ \\t]{0,3}",
    ) {
        let mut parts = [
            format!("\"timestamp\":{sp}{t}"),
            format!("\"input_length\":{sp}{i}"),
            format!("\"output_length\":{sp}{o}"),
            format!("\"hash_ids\":{sp}{ids:?}"),
        ];
        if rev {
            parts.reverse();
        }
        let line = format!("{sp}{{{}}}{sp}", parts.join(&format!(",{sp}")));
        let mut rec = TraceRecord::default();
        prop_assert!(parse_line(&line, &mut rec).is_ok(), "{}", line);
        prop_assert_eq!(rec, TraceRecord { timestamp_ms: t, input_length: i, output_length: o, hash_ids: ids });
    }

    /// A valid line with one byte overwritten, or cut short: no panic, and a rejection names a
    /// column or a field.
    #[test]
    fn mutated_valid_lines(at in any::<usize>(), b in any::<u8>(), cut in any::<bool>()) {
        let mut line = br#"{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48]}"#.to_vec();
        let i = at % line.len();
        if cut {
            line.truncate(i);
        } else {
            line[i] = b;
        }
        let s = String::from_utf8_lossy(&line);
        check(&s)?;
        let mut rec = TraceRecord::default();
        if let Err(m) = parse_line(&s, &mut rec) {
            prop_assert!(m.contains("column") || m.contains("field"), "{}", m);
        }
    }
}

/// The reusable record is fully overwritten: a shorter `hash_ids` does not keep old ids.
#[test]
fn reused_record_is_overwritten() {
    let mut rec = TraceRecord::default();
    parse_line(r#"{"timestamp": 1, "input_length": 2, "output_length": 3, "hash_ids": [1, 2, 3]}"#, &mut rec).unwrap();
    parse_line(r#"{"timestamp": 4, "input_length": 5, "output_length": 6, "hash_ids": [9]}"#, &mut rec).unwrap();
    assert_eq!(rec, TraceRecord { timestamp_ms: 4, input_length: 5, output_length: 6, hash_ids: vec![9] });
}

//! The trace-line parser (`brokerlab::fleet::input::trace::parse_line`) on arbitrary text. Never panics;
//! an accepted line's record, written back as a trace line, parses to the same record; a rejected
//! line gives a non-empty message.
#![no_main]

use brokerlab::fleet::input::trace::{TraceRecord, parse_line};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(line) = std::str::from_utf8(data) else { return };
    let mut rec = TraceRecord::default();
    match parse_line(line, &mut rec) {
        Ok(()) => {
            let back = format!(
                r#"{{"timestamp": {}, "input_length": {}, "output_length": {}, "hash_ids": {:?}}}"#,
                rec.timestamp_ms, rec.input_length, rec.output_length, rec.hash_ids
            );
            let mut again = TraceRecord::default();
            parse_line(&back, &mut again).expect("a written-back record parses");
            assert_eq!(again, rec);
        }
        Err(msg) => assert!(!msg.is_empty()),
    }
});

//! The runner's record decoder: `frame::parse` on arbitrary bytes, on the same bytes as the body
//! of a frame whose header and CRC-32C are made valid (so postcard decoding is reached without
//! the fuzzer having to forge a checksum), and the bytes opened as a RAM log and as a NOR flash
//! log (three write sizes / page sizes) and replayed. Never panics; a frame that parses is exactly
//! the encoding `emit` writes for the record it decodes to; the flash walk only moves forward.
#![no_main]

use brokerlab_core::runner::crc::Crc32c;
use brokerlab_core::runner::frame::{HEADER_LEN, MAGIC};
use brokerlab_core::runner::{
    FORMAT_VERSION, FlashLog, LogStorage, MAX_FRAME_LEN, MAX_RECORD_BYTES, MockFlash, RamLog, TaskId, emit, parse, replay,
};
use libfuzzer_sys::fuzz_target;

fn flash<const W: usize, const E: usize>(data: &[u8], task: &TaskId) {
    // whole erase pages, the tail erased
    let size = data.len().div_ceil(E).max(1) * E;
    let mut mem = vec![0xFFu8; size];
    mem[..data.len()].copy_from_slice(data);
    let Ok(mut log) = FlashLog::open(MockFlash::<W, E>::new(&mut mem), 0, size as u32) else { return };
    let mut cur = log.first();
    while let Ok(Some((_, next))) = log.read_record(cur) {
        assert!(next > cur, "the walk must move forward");
        cur = next;
    }
    let _ = replay(&mut log, task);
}

/// Parses `frame`; a record it accepts must be exactly `emit`'s encoding of that record.
fn parse_canonical(frame: &[u8]) -> Option<TaskId> {
    let (rec, n) = parse(frame).ok()?;
    assert!(n <= frame.len());
    let mut again = [0u8; MAX_FRAME_LEN];
    let m = emit(&rec, &mut again).expect("a decoded record re-encodes");
    assert_eq!(&again[..m], &frame[..n], "decode then encode gives the same frame");
    Some(rec.task_id)
}

fuzz_target!(|data: &[u8]| {
    let mut task = TaskId::try_from("fuzz").unwrap();
    if let Some(t) = parse_canonical(data) {
        task = t;
    }
    // the bytes as a record body behind a valid header and CRC
    let body = &data[..data.len().min(MAX_RECORD_BYTES)];
    if !body.is_empty() {
        let mut f = [0u8; MAX_FRAME_LEN];
        let l = (body.len() as u16).to_le_bytes();
        f[..4].copy_from_slice(&[MAGIC, FORMAT_VERSION, l[0], l[1]]);
        f[HEADER_LEN..HEADER_LEN + body.len()].copy_from_slice(body);
        let crc = Crc32c::new().update(&f[..4]).update(body).finish();
        f[4..8].copy_from_slice(&crc.to_le_bytes());
        if let Some(t) = parse_canonical(&f[..HEADER_LEN + body.len()]) {
            task = t;
        }
    }
    let mut buf = data.to_vec();
    let mut ram = RamLog::open(&mut buf);
    let _ = replay(&mut ram, &task);
    flash::<1, 256>(data, &task);
    flash::<4, 128>(data, &task);
    flash::<8, 64>(data, &task);
});

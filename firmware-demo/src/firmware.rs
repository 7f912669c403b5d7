//! The bare-metal side: boot, run the shared scenario, send the metrics and the memory
//! measurements over defmt, exit through semihosting (status 1 when any check fails).

use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicBool, Ordering};

use brokerlab_core::fleet::sim::pd::{Delivery, Join, Transfer};
use brokerlab_core::fleet::stats::LogHistogram;
use brokerlab_core::fleet::{IndexEntry, KvBlock, PendingEntry, PendingRecord, ReqSlot, Slot};
use brokerlab_core::runner::harness::SimWorld;
use brokerlab_firmware::FW_MEASUREMENTS;
use brokerlab_firmware::scenario::{self, Storage};
use cortex_m as _; // the critical-section implementation (feature `critical-section-single-core`)
use cortex_m_rt::{ExceptionFrame, entry, exception};
use cortex_m_semihosting::debug;
use defmt_semihosting as _; // the defmt global logger

/// cortex-m-rt's fill value for the stack (feature `paint-stack`).
const STACK_PAINT: u32 = 0xCCCC_CCCC;

// Symbols of cortex-m-rt 0.7's link.x: RAM holds .data, .bss, .uninit, then `_stack_end`
// (= `__sheap`, the lowest address the stack may reach) up to `_stack_start` (initial SP, end of
// RAM). `paint-stack` paints [_stack_end, _stack_start) at reset.
unsafe extern "C" {
    static _stack_end: u32;
    static _stack_start: u32;
    static __sdata: u32;
    static _ram_start: u32;
    static _ram_end: u32;
}

/// Every buffer of the scenario, in .bss (sizes from `scenario`; no heap, no allocator).
struct Buffers {
    slots: [Slot; scenario::SLOTS_LEN],
    tables: [u32; scenario::TABLES_LEN],
    queues: [u64; scenario::QUEUES_LEN],
    index: [IndexEntry; scenario::INDEX_LEN],
    pending: [PendingRecord; scenario::PENDING_LEN],
    pending_table: [PendingEntry; scenario::PENDING_TABLE_LEN],
    tokens: [u32; scenario::TOKENS_LEN],
    zipf_cdf: [u64; scenario::ZIPF_CDF_LEN],
    latencies: [u64; scenario::LATENCIES_LEN],
    histograms: [LogHistogram; scenario::HISTOGRAMS_LEN],
    runner_log: [u8; scenario::RUNNER_LOG_BYTES],
    flash: [u8; scenario::FLASH_LOG_BYTES],
    kv_blocks: [KvBlock; scenario::KV_BLOCKS_LEN],
    kv_tables: [u32; scenario::KV_TABLES_LEN],
    engine_requests: [ReqSlot; scenario::ENGINE_REQUESTS_LEN],
    engine_waiting: [u32; scenario::ENGINE_REQUESTS_LEN],
    engine_running: [u32; scenario::ENGINE_RUNNING_LEN],
    engine_keys: [u64; scenario::ENGINE_KEYS_LEN],
    cpu_slots: [Slot; scenario::CPU_SLOTS_LEN],
    cpu_tables: [u32; scenario::CPU_TABLES_LEN],
    pd_transfers: [Transfer; scenario::PD_TRANSFERS_LEN],
    pd_joins: [Join; scenario::PD_IN_FLIGHT],
    pd_deliveries: [Delivery; scenario::PD_IN_FLIGHT],
}

/// Zeroed at reset with the rest of .bss. Every field is an array of structs of plain integers,
/// for which all-zero bytes are a valid value (an empty `LogHistogram`; the fleet's constructors
/// reset the other buffers anyway).
static mut BUFFERS: MaybeUninit<Buffers> = MaybeUninit::zeroed();
/// The runner harness's world, built by its `const fn new` (no zeroing argument needed).
static mut WORLD: SimWorld<{ scenario::WORLD_CALLS }> = SimWorld::new();
static BUFFERS_TAKEN: AtomicBool = AtomicBool::new(false);

/// The buffers, once.
fn take_buffers() -> (&'static mut Buffers, &'static mut SimWorld<{ scenario::WORLD_CALLS }>) {
    assert!(!BUFFERS_TAKEN.swap(true, Ordering::AcqRel), "buffers taken twice");
    // SAFETY: the flag above hands out these `&mut` at most once; the zeroed bytes are a valid
    // `Buffers` (see `BUFFERS`).
    let (buffers, world) = ((&raw mut BUFFERS).cast::<Buffers>(), &raw mut WORLD);
    unsafe { (&mut *buffers, &mut *world) }
}

/// Addresses of the linker symbols above.
fn symbol_addresses() -> (usize, usize, usize, usize, usize) {
    (
        (&raw const _stack_end) as usize,
        (&raw const _stack_start) as usize,
        (&raw const __sdata) as usize,
        (&raw const _ram_start) as usize,
        (&raw const _ram_end) as usize,
    )
}

/// Deepest stack use since reset, in bytes: scans up from the stack's lowest address to the first
/// word that is no longer the paint value.
fn stack_peak(bottom: usize, top: usize) -> usize {
    let mut p = bottom;
    while p < top {
        // SAFETY: [bottom, top) is the stack region in RAM, word aligned (asserted by link.x);
        // everything below the current SP is unused, and reading a word has no side effect.
        let word = unsafe { core::ptr::read_volatile(p as *const u32) };
        if word != STACK_PAINT {
            break;
        }
        p += 4;
    }
    top - p
}

/// Repaints the unused part of the stack, from `bottom` up to a little below the current stack
/// pointer, so that the next [`stack_peak`] measures only what runs after this call.
#[inline(never)]
fn repaint_stack(bottom: usize) {
    // Stay 256 bytes below our own SP: nothing lives there while this function runs (no calls,
    // no interrupts enabled).
    let limit = (cortex_m::register::msp::read() as usize).saturating_sub(256) & !3;
    let mut p = bottom;
    while p < limit {
        // SAFETY: [bottom, limit) is stack memory below every live frame (see above), word aligned.
        unsafe { core::ptr::write_volatile(p as *mut u32, STACK_PAINT) };
        p += 4;
    }
}

// One frame per phase: kept out of line so that a phase's locals are popped before the next
// phase runs (inlined into `main`, all three would stay live and every peak would include them).
#[inline(never)]
fn fleet_phase(storage: &mut Storage<'_>, sink: &mut impl brokerlab_firmware::Sink) -> Result<(), scenario::RunError> {
    scenario::run_fleets(storage, sink)
}

#[inline(never)]
fn batched_phase(
    storage: &mut Storage<'_>,
    sink: &mut impl brokerlab_firmware::Sink,
) -> Result<(), scenario::RunError> {
    scenario::run_batched(storage, sink)
}

#[inline(never)]
fn runner_phase(
    log: &mut [u8],
    world: &mut SimWorld<{ scenario::WORLD_CALLS }>,
    sink: &mut impl brokerlab_firmware::Sink,
) -> Result<(), scenario::RunError> {
    scenario::run_runner(log, world, sink)
}

#[inline(never)]
fn flash_phase(
    log: &mut [u8],
    flash: &mut [u8],
    world: &mut SimWorld<{ scenario::WORLD_CALLS }>,
    sink: &mut impl brokerlab_firmware::Sink,
) -> Result<(), scenario::RunError> {
    scenario::run_power_cuts(log, flash, world, sink)
}

#[entry]
fn main() -> ! {
    defmt::info!("brokerlab firmware: running the shared scenario");
    let mut ok = true;
    let mut count = 0u32;
    let (b, world) = take_buffers();
    let mut storage = Storage {
        slots: &mut b.slots,
        tables: &mut b.tables,
        queues: &mut b.queues,
        index: &mut b.index,
        pending: &mut b.pending,
        pending_table: &mut b.pending_table,
        tokens: &mut b.tokens,
        zipf_cdf: &mut b.zipf_cdf,
        latencies: &mut b.latencies,
        histograms: &mut b.histograms,
        runner_log: &mut b.runner_log,
        world,
        flash: &mut b.flash,
        kv_blocks: &mut b.kv_blocks,
        kv_tables: &mut b.kv_tables,
        engine_requests: &mut b.engine_requests,
        engine_waiting: &mut b.engine_waiting,
        engine_running: &mut b.engine_running,
        engine_keys: &mut b.engine_keys,
        cpu_slots: &mut b.cpu_slots,
        cpu_tables: &mut b.cpu_tables,
        pd_transfers: &mut b.pd_transfers,
        pd_joins: &mut b.pd_joins,
        pd_deliveries: &mut b.pd_deliveries,
    };
    let mut sink = |group: &'static str, name: &'static str, index: u32, value: u64| {
        defmt::println!("BL m {=str} {=str} {=u32} {=u64}", group, name, index, value);
        count += 1;
    };
    let report = |e: scenario::RunError| {
        defmt::error!(
            "scenario failed: run {=str}, request {=u32}: {}",
            e.run,
            e.request,
            defmt::Display2Format(&e.error)
        );
    };
    let (stack_end, stack_start, sdata, ram_start, ram_end) = symbol_addresses();
    if let Err(e) = fleet_phase(&mut storage, &mut sink) {
        report(e);
        ok = false;
    }
    let peak_fleet = stack_peak(stack_end, stack_start);
    repaint_stack(stack_end);
    if let Err(e) = batched_phase(&mut storage, &mut sink) {
        report(e);
        ok = false;
    }
    let peak_batched = stack_peak(stack_end, stack_start);
    repaint_stack(stack_end);
    if let Err(e) = runner_phase(storage.runner_log, storage.world, &mut sink) {
        report(e);
        ok = false;
    }
    let peak_runner = stack_peak(stack_end, stack_start);
    repaint_stack(stack_end);
    if let Err(e) = flash_phase(storage.runner_log, storage.flash, storage.world, &mut sink) {
        report(e);
        ok = false;
    }
    let peak_flash = stack_peak(stack_end, stack_start);
    let peak = peak_fleet.max(peak_batched).max(peak_runner).max(peak_flash);
    let values = [
        peak,
        peak_fleet,
        peak_batched,
        peak_runner,
        peak_flash,
        stack_start - stack_end,
        stack_end - sdata,
        ram_end - ram_start,
        scenario::storage_bytes(),
        core::mem::size_of::<brokerlab_core::fleet::FifoFleet<'static>>(),
        core::mem::size_of::<brokerlab_core::fleet::BatchedFleet<'static>>(),
    ];
    for (name, value) in FW_MEASUREMENTS.iter().zip(values) {
        defmt::println!("BL fw {=str} {=u64}", name, value as u64);
    }
    if peak + 1024 > stack_start - stack_end {
        defmt::error!("stack peak {=usize} leaves under 1 KiB of headroom", peak);
        ok = false;
    }
    defmt::println!("BL end {=u32} {=bool}", count, ok);
    debug::exit(if ok { debug::EXIT_SUCCESS } else { debug::EXIT_FAILURE });
    loop {
        cortex_m::asm::wfi();
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    match info.location() {
        Some(l) => defmt::error!("panic at {=str}:{=u32}", l.file(), l.line()),
        None => defmt::error!("panic"),
    }
    debug::exit(debug::EXIT_FAILURE);
    loop {
        cortex_m::asm::wfi();
    }
}

#[exception]
unsafe fn HardFault(frame: &ExceptionFrame) -> ! {
    defmt::error!("hard fault at pc {=u32:#x}", frame.pc());
    debug::exit(debug::EXIT_FAILURE);
    loop {
        cortex_m::asm::wfi();
    }
}

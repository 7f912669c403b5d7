//! The bare-metal side: boot, run the shared scenario, send the metrics and the memory
//! measurements over defmt, exit through semihosting (status 1 when any check fails).

use brokerlab_firmware::{FW_MEASUREMENTS, scenario};
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

#[entry]
fn main() -> ! {
    defmt::info!("brokerlab firmware: running the shared scenario");
    let mut ok = true;
    let mut count = 0u32;
    match scenario::run(scenario::SEED) {
        Ok(metrics) => {
            for &(name, value) in metrics.as_slice() {
                defmt::println!("BL m {=str} {=u64}", name, value);
                count += 1;
            }
        }
        Err(i) => {
            defmt::error!("scenario failed at request {=u32}", i);
            ok = false;
        }
    }
    let (stack_end, stack_start, sdata, ram_start, ram_end) = symbol_addresses();
    let peak = stack_peak(stack_end, stack_start);
    let values = [peak, stack_start - stack_end, stack_end - sdata, ram_end - ram_start];
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

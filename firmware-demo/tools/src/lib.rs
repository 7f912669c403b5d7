//! The host side of the firmware demo: build it for thumbv7m-none-eabi, boot it in QEMU, decode
//! its defmt output in-process (`defmt-decoder`) and read its section sizes (`object`). Used by
//! the `fw` binary (`cargo fw`) and by `tests/tests/firmware_qemu.rs`. A crate of its own, so that
//! `cargo fw` builds only what it needs.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use defmt_decoder::{DecodeError, Table};
use object::{Object, ObjectSection, ObjectSymbol, SectionFlags, SectionKind};

/// The firmware's Rust target.
pub const TARGET: &str = "thumbv7m-none-eabi";
/// The QEMU machine (see firmware-demo/README.md for why this one).
pub const MACHINE: &str = "mps2-an385";
/// QEMU is killed after this long (one run takes well under a second).
pub const QEMU_TIMEOUT: Duration = Duration::from_secs(120);

/// One decoded defmt frame.
#[derive(Debug, Clone)]
pub struct Frame {
    /// `println` frames have no level.
    pub level: Option<&'static str>,
    /// The formatted message.
    pub message: String,
}

/// Berkeley-style section sizes of the ELF (like `size`): text = allocated read-only sections
/// (vector table, code, rodata), data = allocated writable sections with contents, bss =
/// allocated writable sections without contents (.bss, .uninit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sizes {
    /// Flash: vector table, code, read-only data (plus the .data initialisers, counted in `data`).
    pub text: u64,
    /// Initialised statics: in RAM, with a copy in flash.
    pub data: u64,
    /// Zeroed and uninitialised statics, RAM only.
    pub bss: u64,
}

/// One scenario metric: (group, name, index, value).
pub type Metric = (String, String, u32, u64);

/// Everything one firmware run produced.
#[derive(Debug, Clone)]
pub struct FirmwareRun {
    /// The ELF that ran.
    pub elf: PathBuf,
    /// Its section sizes.
    pub sizes: Sizes,
    /// Symbols of a global allocator in the ELF (see [`allocator_symbols`]); empty: no heap.
    pub allocator_symbols: Vec<String>,
    /// All decoded frames, in order.
    pub frames: Vec<Frame>,
    /// `BL m` frames: the scenario metrics (group, name, index, value), in order.
    pub metrics: Vec<Metric>,
    /// `BL fw` frames: the firmware's own measurements.
    pub measurements: BTreeMap<String, u64>,
    /// The `BL end` frame: (metric count, all checks ok).
    pub end: Option<(u64, bool)>,
    /// QEMU's exit status is the firmware's semihosting exit status.
    pub exit_code: Option<i32>,
    /// What QEMU printed on stderr (semihosting SYS_WRITE0 and QEMU's own messages).
    pub stderr: String,
}

/// The workspace root (this crate is `firmware-demo/tools/`).
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.ancestors().nth(2).expect("firmware-demo/tools/ is two levels below the root").to_path_buf()
}

/// The firmware's own target directory. A separate one, so that the nested `cargo build` never
/// waits on a lock held by the `cargo test` / `cargo run` that started us (cargo locks a build
/// directory per profile, and `cargo test --release` would hold `target/release`).
pub fn firmware_target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir).join("firmware"),
        None => workspace_root().join("target").join("firmware"),
    }
}

/// `cargo build -p brokerlab-firmware --release --target thumbv7m-none-eabi` into
/// [`firmware_target_dir`]; returns the ELF path.
pub fn build_firmware() -> Result<PathBuf, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target_dir = firmware_target_dir();
    let output = Command::new(&cargo)
        .current_dir(workspace_root())
        .args(["build", "-p", "brokerlab-firmware", "--release", "--target", TARGET, "--target-dir"])
        .arg(&target_dir)
        // Host-only flags (coverage, target-cpu=native, ...) must not reach the thumb build.
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_RUSTFLAGS")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {cargo:?}: {e}"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let hint = if stderr.contains("target may not be installed") || stderr.contains("can't find crate for `core`") {
            "\nhint: rustup target add thumbv7m-none-eabi"
        } else {
            ""
        };
        return Err(format!("firmware build failed ({}):\n{stderr}{hint}", output.status));
    }
    Ok(target_dir.join(TARGET).join("release").join("brokerlab-firmware"))
}

/// Boots `elf` in QEMU with semihosting; returns (stdout bytes = defmt frames, stderr, exit code).
pub fn run_qemu(elf: &Path) -> Result<(Vec<u8>, String, Option<i32>), String> {
    let mut child = Command::new("qemu-system-arm")
        .args(["-cpu", "cortex-m3", "-machine", MACHINE, "-nographic", "-monitor", "none"])
        .args(["-semihosting-config", "enable=on,target=native", "-kernel"])
        .arg(elf)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start qemu-system-arm ({e}); install it: apt-get install -y qemu-system-arm"))?;
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let out_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        stdout.read_to_end(&mut buf).map(|_| buf)
    });
    let err_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        stderr.read_to_end(&mut buf).map(|_| buf)
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if start.elapsed() > QEMU_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("QEMU did not exit within {QEMU_TIMEOUT:?} (firmware hung?)"));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let out = out_reader.join().expect("reader thread").map_err(|e| e.to_string())?;
    let err = err_reader.join().expect("reader thread").map_err(|e| e.to_string())?;
    Ok((out, String::from_utf8_lossy(&err).into_owned(), status.code()))
}

/// Decodes the defmt byte stream with the table from the ELF.
pub fn decode(elf: &[u8], bytes: &[u8]) -> Result<Vec<Frame>, String> {
    let table = Table::parse(elf).map_err(|e| format!("defmt table: {e}"))?.ok_or("the ELF has no .defmt section")?;
    let mut decoder = table.new_stream_decoder();
    decoder.received(bytes);
    let mut frames = Vec::new();
    loop {
        match decoder.decode() {
            Ok(frame) => frames
                .push(Frame { level: frame.level().map(|l| l.as_str()), message: frame.display_message().to_string() }),
            Err(DecodeError::UnexpectedEof) => break,
            Err(DecodeError::Malformed) => {
                return Err(format!("malformed defmt frame after {} frames", frames.len()));
            }
        }
    }
    Ok(frames)
}

/// Section sizes of an ELF, as `size` (Berkeley format) counts them.
pub fn section_sizes(elf: &[u8]) -> Result<Sizes, String> {
    const SHF_WRITE: u64 = 0x1;
    const SHF_ALLOC: u64 = 0x2;
    let file = object::File::parse(elf).map_err(|e| format!("ELF: {e}"))?;
    let mut sizes = Sizes::default();
    for section in file.sections() {
        let SectionFlags::Elf { sh_flags } = section.flags() else { continue };
        if sh_flags & SHF_ALLOC == 0 {
            continue; // .defmt, debug info, comments: not loaded
        }
        let size = section.size();
        if section.kind() == SectionKind::UninitializedData {
            sizes.bss += size;
        } else if sh_flags & SHF_WRITE != 0 {
            sizes.data += size;
        } else {
            sizes.text += size;
        }
    }
    Ok(sizes)
}

/// Symbols that exist only when a global allocator is linked: the allocator shim
/// (`__rust_alloc`, `__rust_dealloc`, ... possibly mangled), a `#[global_allocator]`'s `__rg_*`
/// and the default `__rdl_*` functions. None in the firmware means nothing in it can allocate.
pub fn allocator_symbols(elf: &[u8]) -> Result<Vec<String>, String> {
    const MARKERS: [&str; 4] = ["__rust_alloc", "__rust_dealloc", "__rg_alloc", "__rdl_alloc"];
    let file = object::File::parse(elf).map_err(|e| format!("ELF: {e}"))?;
    if file.symbols().next().is_none() {
        return Err("the ELF has no symbol table (stripped?)".into());
    }
    let mut found: Vec<String> = file
        .symbols()
        .filter_map(|s| s.name().ok().map(str::to_string))
        .filter(|n| MARKERS.iter().any(|m| n.contains(m)))
        .collect();
    found.sort();
    found.dedup();
    Ok(found)
}

/// The run's summary as one JSON object (for scripts and the audit): ELF path and sizes, the
/// firmware's measurements, the metric count, the allocator symbols, checks and exit status.
pub fn summary_json(run: &FirmwareRun) -> String {
    fn string(s: &str) -> String {
        let mut o = String::from("\"");
        for c in s.chars() {
            match c {
                '"' => o.push_str("\\\""),
                '\\' => o.push_str("\\\\"),
                c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
                c => o.push(c),
            }
        }
        o.push('"');
        o
    }
    let measurements: Vec<String> = run.measurements.iter().map(|(k, v)| format!("{}:{v}", string(k))).collect();
    let allocators: Vec<String> = run.allocator_symbols.iter().map(|s| string(s)).collect();
    let (count, ok) =
        run.end.map_or(("null".to_string(), "false"), |(n, ok)| (n.to_string(), if ok { "true" } else { "false" }));
    format!(
        "{{\"elf\":{},\"machine\":{},\"text\":{},\"data\":{},\"bss\":{},\"measurements\":{{{}}},\"metrics\":{},\"end_metric_count\":{},\"checks_ok\":{},\"allocator_symbols\":[{}],\"exit_code\":{}}}",
        string(&run.elf.display().to_string()),
        string(MACHINE),
        run.sizes.text,
        run.sizes.data,
        run.sizes.bss,
        measurements.join(","),
        run.metrics.len(),
        count,
        ok,
        allocators.join(","),
        run.exit_code.map_or("null".to_string(), |c| c.to_string()),
    )
}

/// Splits the decoded frames into the firmware's report.
fn parse_frames(run: &mut FirmwareRun) -> Result<(), String> {
    for frame in &run.frames {
        let mut words = frame.message.split(' ');
        if words.next() != Some("BL") {
            continue;
        }
        let fields: Vec<&str> = words.collect();
        let bad = || format!("bad frame: {:?}", frame.message);
        match fields.as_slice() {
            ["m", group, name, index, value] => run.metrics.push((
                group.to_string(),
                name.to_string(),
                index.parse().map_err(|_| bad())?,
                value.parse().map_err(|_| bad())?,
            )),
            ["fw", name, value] => {
                run.measurements.insert(name.to_string(), value.parse().map_err(|_| bad())?);
            }
            ["end", count, ok] => run.end = Some((count.parse().map_err(|_| bad())?, ok.parse().map_err(|_| bad())?)),
            _ => return Err(bad()),
        }
    }
    Ok(())
}

/// Builds, boots and decodes the firmware.
pub fn run_firmware() -> Result<FirmwareRun, String> {
    let elf_path = build_firmware()?;
    let elf = std::fs::read(&elf_path).map_err(|e| format!("{}: {e}", elf_path.display()))?;
    let (bytes, stderr, exit_code) = run_qemu(&elf_path)?;
    let mut run = FirmwareRun {
        sizes: section_sizes(&elf)?,
        allocator_symbols: allocator_symbols(&elf)?,
        frames: decode(&elf, &bytes)?,
        elf: elf_path,
        metrics: Vec::new(),
        measurements: BTreeMap::new(),
        end: None,
        exit_code,
        stderr,
    };
    parse_frames(&mut run)?;
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_with(messages: &[&str]) -> FirmwareRun {
        FirmwareRun {
            elf: PathBuf::from("fw \"x\".elf"),
            sizes: Sizes { text: 1, data: 2, bss: 3 },
            allocator_symbols: Vec::new(),
            frames: messages.iter().map(|m| Frame { level: None, message: m.to_string() }).collect(),
            metrics: Vec::new(),
            measurements: BTreeMap::new(),
            end: None,
            exit_code: Some(0),
            stderr: String::new(),
        }
    }

    #[test]
    fn frames_are_split_into_metrics_measurements_and_end() {
        let mut run = run_with(&[
            "brokerlab firmware: chatter",
            "BL m fleet requests 0 2000",
            "BL m fleet pod_requests 3 18446744073709551615",
            "BL fw stack_peak_bytes 1234",
            "BL end 2 true",
        ]);
        parse_frames(&mut run).unwrap();
        assert_eq!(
            run.metrics,
            vec![
                ("fleet".to_string(), "requests".to_string(), 0, 2000),
                ("fleet".to_string(), "pod_requests".to_string(), 3, u64::MAX)
            ]
        );
        assert_eq!(run.measurements.get("stack_peak_bytes"), Some(&1234));
        assert_eq!(run.end, Some((2, true)));
    }

    #[test]
    fn malformed_frames_are_errors() {
        for bad in ["BL m fleet requests 0", "BL m a b c 1", "BL fw x -1", "BL end 2 maybe", "BL what 1"] {
            assert!(parse_frames(&mut run_with(&[bad])).is_err(), "{bad}");
        }
    }

    #[test]
    fn json_summary_escapes_strings() {
        let mut run = run_with(&["BL fw ram_bytes 4194304", "BL end 0 true"]);
        parse_frames(&mut run).unwrap();
        let json = summary_json(&run);
        assert!(
            json.starts_with(r#"{"elf":"fw \"x\".elf","machine":"mps2-an385","text":1,"data":2,"bss":3,"#),
            "{json}"
        );
        assert!(json.contains(r#""measurements":{"ram_bytes":4194304}"#), "{json}");
        assert!(json.ends_with(r#""checks_ok":true,"allocator_symbols":[],"exit_code":0}"#), "{json}");
    }

    #[test]
    fn a_non_elf_is_an_error_not_a_panic() {
        assert!(section_sizes(b"not an elf").is_err());
        assert!(allocator_symbols(b"not an elf").is_err());
        assert!(decode(b"not an elf", b"").is_err());
    }
}

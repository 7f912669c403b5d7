//! Output files written whole or not at all: the bytes go to a temporary file in the same
//! directory (`.NAME.PID.tmp`), which is flushed, synced and then renamed over `NAME`. A run that
//! fails while writing (a full disk, an I/O error, `ulimit -f`) leaves the previous file, or none,
//! never a truncated one that looks finished; the temporary file is removed. A path that exists
//! and is not a regular file (`/dev/stdout`, `/dev/full`, a FIFO) cannot be renamed over: it is
//! written in place, and its errors are reported the same way.
//!
//! A command that writes a set of files (a sweep's points, plots and provenance; the report)
//! stages them ([`stage`]) and renames them all at its end ([`commit`]), so a failure part way
//! leaves the previous set whole, not new files beside old ones; on an error the staged
//! temporary files are removed ([`discard`], called by `main`).
//!
//! Renaming replaces the directory entry: an existing file's hard links, owner and mode are not
//! kept (the new file gets the default mode, as `std::fs::write` gives it).

use std::fs::{self, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::error::{CliError, CliResult};

/// Refuses (exit 2), before a run starts, an output `out` (given as `flag`) that is one of the
/// run's `inputs` (flag, path): the same file by device and inode, whatever the names (a link,
/// `./t.jsonl` for `t.jsonl`); also a directory, or a path in a directory that does not exist.
pub fn check_output(flag: &str, out: &Path, inputs: &[(&str, &Path)]) -> CliResult<()> {
    let shown = out.display();
    if let Ok(m) = fs::metadata(out) {
        if m.is_dir() {
            return Err(CliError::bad_input(format!("{flag} {shown}: is a directory; expected a file to write")));
        }
        for (in_flag, input) in inputs {
            if same_file(out, input) {
                return Err(CliError::bad_input(format!(
                    "{flag} {shown} is the same file as {in_flag} {}: refusing to overwrite an input of the run; \
                     name another output file",
                    input.display()
                )));
            }
        }
        return Ok(());
    }
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !parent.is_dir() {
        return Err(CliError::bad_input(format!("{flag} {shown}: the directory {} does not exist", parent.display())));
    }
    Ok(())
}

/// Refuses (exit 2) an output directory `dir` (`flag`) that holds one of the `inputs`: the
/// files written into it would replace it.
pub fn check_output_dir(flag: &str, dir: &Path, inputs: &[(&str, &Path)]) -> CliResult<()> {
    let Ok(entries) = fs::read_dir(dir) else { return Ok(()) };
    for e in entries.flatten() {
        for (in_flag, input) in inputs {
            if same_file(&e.path(), input) {
                return Err(CliError::bad_input(format!(
                    "{flag} {}: holds {in_flag} {} (as {}), which the run's output files could replace; \
                     write them to another directory",
                    dir.display(),
                    input.display(),
                    e.file_name().to_string_lossy()
                )));
            }
        }
    }
    Ok(())
}

/// Whether `a` and `b` name one existing file (device and inode on Unix).
fn same_file(a: &Path, b: &Path) -> bool {
    let (Ok(ma), Ok(mb)) = (fs::metadata(a), fs::metadata(b)) else { return false };
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        ma.dev() == mb.dev() && ma.ino() == mb.ino()
    }
    #[cfg(not(unix))]
    {
        let _ = (ma, mb);
        matches!((fs::canonicalize(a), fs::canonicalize(b)), (Ok(x), Ok(y)) if x == y)
    }
}

/// Writes `bytes` to `path` (see the module).
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_with(path, |w| w.write_all(bytes))
}

/// Writes what `fill` writes to `path` (see the module); `fill`'s error is returned as is.
pub fn write_with(path: &Path, fill: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> io::Result<()> {
    if fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
        let mut f = BufWriter::new(OpenOptions::new().write(true).open(path)?);
        fill(&mut f)?;
        return f.flush();
    }
    let tmp = temp_path(path);
    let result = write_temp(&tmp, fill).and_then(|()| fs::rename(&tmp, path));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Files written by [`stage`] and not yet renamed: (temporary, final).
static STAGED: std::sync::Mutex<Vec<(PathBuf, PathBuf)>> = std::sync::Mutex::new(Vec::new());

fn staged() -> std::sync::MutexGuard<'static, Vec<(PathBuf, PathBuf)>> {
    STAGED.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Writes `bytes` to a temporary file beside `path`, renamed over `path` by [`commit`] (a path
/// that is not a regular file is written at once, as [`write`] does).
pub fn stage(path: &Path, bytes: &[u8]) -> io::Result<()> {
    if fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
        return write(path, bytes);
    }
    let tmp = temp_path(path);
    let mut list = staged();
    // written twice in one command: the later bytes win, one rename
    list.retain(|(_, dest)| dest != path);
    if let Err(e) = write_temp(&tmp, |w| w.write_all(bytes)) {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    list.push((tmp, path.to_path_buf()));
    Ok(())
}

/// Renames every staged file over its final name, in the order staged; on a failed rename the
/// rest are removed, and the error names the file.
pub fn commit() -> Result<(), (PathBuf, io::Error)> {
    let list = std::mem::take(&mut *staged());
    let mut it = list.into_iter();
    while let Some((tmp, dest)) = it.next() {
        if let Err(e) = fs::rename(&tmp, &dest) {
            let _ = fs::remove_file(&tmp);
            for (t, _) in it {
                let _ = fs::remove_file(t);
            }
            return Err((dest, e));
        }
    }
    Ok(())
}

/// Removes every staged temporary file (a command failed before its [`commit`]).
pub fn discard() {
    for (tmp, _) in std::mem::take(&mut *staged()) {
        let _ = fs::remove_file(tmp);
    }
}

/// `DIR/.NAME.PID.tmp` for `DIR/NAME`: the same directory (a rename never crosses file
/// systems), hidden, and one per process.
fn temp_path(path: &Path) -> PathBuf {
    let name = path.file_name().map_or_else(|| "out".into(), |n| n.to_string_lossy().into_owned());
    path.with_file_name(format!(".{name}.{}.tmp", std::process::id()))
}

fn write_temp(tmp: &Path, fill: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> io::Result<()> {
    let open = || OpenOptions::new().write(true).create_new(true).open(tmp);
    // a leftover of an earlier process with this pid (killed before its rename)
    let f = match open() {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            fs::remove_file(tmp)?;
            open()?
        }
        r => r?,
    };
    let mut w = BufWriter::new(f);
    fill(&mut w)?;
    let f = w.into_inner().map_err(io::IntoInnerError::into_error)?;
    // Some file systems report a full disk only when the data is written back (NFS, XFS's
    // delayed allocation): sync before the rename so the error is seen here.
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("brokerlab-outfile-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn entries(d: &Path) -> Vec<String> {
        let mut v: Vec<String> =
            fs::read_dir(d).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        v.sort();
        v
    }

    #[test]
    fn a_complete_write_replaces_the_file() {
        let d = dir("ok");
        let p = d.join("points.csv");
        write(&p, b"old").unwrap();
        write(&p, b"new contents").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"new contents");
        assert_eq!(entries(&d), ["points.csv"], "no temporary file left");
    }

    /// The seam a full disk goes through: the writer fails part way (ENOSPC after some bytes).
    /// The old file stays whole, no temporary file is left, and the error is the writer's.
    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temporary() {
        let d = dir("fail");
        let p = d.join("outcomes.jsonl");
        write(&p, b"a finished earlier result\n").unwrap();
        let err = write_with(&p, |w| {
            w.write_all(&[b'x'; 100_000])?;
            Err(io::Error::from_raw_os_error(28)) // ENOSPC
        })
        .unwrap_err();
        assert_eq!(err.raw_os_error(), Some(28));
        assert_eq!(fs::read(&p).unwrap(), b"a finished earlier result\n");
        assert_eq!(entries(&d), ["outcomes.jsonl"]);
        // without an earlier file: none afterwards
        let q = d.join("new.json");
        assert!(write_with(&q, |_| Err(io::Error::from_raw_os_error(5))).is_err());
        assert!(!q.exists());
        assert_eq!(entries(&d), ["outcomes.jsonl"]);
    }

    #[test]
    fn staged_files_appear_together_at_commit_or_not_at_all() {
        let d = dir("staged");
        let (a, b) = (d.join("points.csv"), d.join("points.json"));
        write(&a, b"old csv").unwrap();
        write(&b, b"old json").unwrap();
        stage(&a, b"new csv").unwrap();
        stage(&b, b"new json").unwrap();
        assert_eq!(fs::read(&a).unwrap(), b"old csv", "nothing replaced before the commit");
        commit().unwrap();
        assert_eq!((fs::read(&a).unwrap(), fs::read(&b).unwrap()), (b"new csv".to_vec(), b"new json".to_vec()));
        assert_eq!(entries(&d), ["points.csv", "points.json"]);
        // a command that fails after staging one file: the old set stays, no temporary left
        stage(&a, b"half of a set").unwrap();
        discard();
        assert_eq!(fs::read(&a).unwrap(), b"new csv");
        assert_eq!(entries(&d), ["points.csv", "points.json"]);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_device_is_written_in_place_and_its_errors_reported() {
        let err = write(Path::new("/dev/full"), b"x").unwrap_err();
        assert_eq!(err.raw_os_error(), Some(28), "{err}");
        write(Path::new("/dev/null"), b"x").unwrap();
    }
}

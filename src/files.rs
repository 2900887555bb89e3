//! Files on the floor: the one way sparsegate writes a file (atomically, pretty JSON with a
//! trailing newline) and the typed error of reading or writing one. Every stage may use it;
//! it uses no stage.

use std::io::Write;
use std::path::{Path, PathBuf};

mod output_set;
mod tree;

pub use output_set::OutputSet;
pub use tree::TreeDir;

/// A file could not be read, written or parsed.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum FileError {
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    #[diagnostic(code(sparsegate::io), help("check that the path exists and is readable"))]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A path that should name a file names a directory, FIFO, socket or device.
    #[error("{} is not a regular file", path.display())]
    #[diagnostic(code(sparsegate::io), help("point at the file itself"))]
    NotAFile {
        /// The path.
        path: PathBuf,
    },
    /// A file is larger than sparsegate reads.
    #[error("{} is over the {limit}-byte limit", path.display())]
    #[diagnostic(
        code(sparsegate::io),
        help("this is not a file sparsegate wrote; check the path")
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The most bytes read.
        limit: u64,
    },
    /// A file could not be written.
    #[error("cannot write {}: {source}", path.display())]
    #[diagnostic(code(sparsegate::io), help("check that the directory exists and is writable"))]
    Write {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A JSON file of ours is malformed.
    #[error("{}:{line}:{column}: {message}", path.display())]
    #[diagnostic(code(sparsegate::json), help("{hint}"))]
    Json {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong.
        message: String,
        /// What to do about it.
        hint: String,
    },
}

impl FileError {
    /// The reason alone, as an OS-style error, for errors that carry their own path.
    pub fn into_io(self) -> std::io::Error {
        use std::io::{Error, ErrorKind};
        match self {
            FileError::Read { source, .. } | FileError::Write { source, .. } => source,
            FileError::NotAFile { .. } => Error::new(
                ErrorKind::InvalidInput,
                "not a regular file (a directory, FIFO, socket or device)",
            ),
            FileError::TooLarge { limit, .. } => {
                Error::new(ErrorKind::InvalidData, format!("over the {limit}-byte limit"))
            }
            FileError::Json { message, .. } => Error::new(ErrorKind::InvalidData, message),
        }
    }

    /// A [`FileError::Json`] from a serde_json error in `path`.
    pub fn json(path: impl Into<PathBuf>, err: &serde_json::Error, hint: &str) -> FileError {
        FileError::Json {
            path: path.into(),
            line: err.line(),
            column: err.column(),
            message: err.to_string(),
            hint: hint.to_owned(),
        }
    }
}

/// Open the regular file at `path` for reading. Directories, FIFOs, sockets and devices
/// are refused: the open itself does not block (`O_NONBLOCK`, so a FIFO swapped in after
/// the first check cannot hang it either), and the opened handle is checked again.
pub fn open_regular(path: &Path) -> Result<std::fs::File, FileError> {
    let read_error = |source| FileError::Read {
        path: path.to_owned(),
        source,
    };
    let not_a_file = || FileError::NotAFile {
        path: path.to_owned(),
    };
    if !std::fs::metadata(path).map_err(read_error)?.is_file() {
        return Err(not_a_file());
    }
    let file = open_nonblocking(path).map_err(read_error)?;
    if !file.metadata().map_err(read_error)?.is_file() {
        return Err(not_a_file());
    }
    Ok(file)
}

#[cfg(unix)]
fn open_nonblocking(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    // O_NONBLOCK has no effect on reads of a regular file; it only keeps the open of a
    // FIFO from waiting for a writer.
    let flags = rustix::fs::OFlags::NONBLOCK.bits();
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(i32::try_from(flags).unwrap_or(0))
        .open(path)
}

#[cfg(not(unix))]
fn open_nonblocking(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::File::open(path)
}

/// The bytes of the regular file at `path`, at most `limit` of them: the one way
/// sparsegate reads a file it did not just write. Non-regular files are refused without
/// blocking ([`open_regular`]), the size is checked on the open handle, and the read stops
/// at `limit + 1` bytes, so memory stays bounded whatever the file does meanwhile.
pub fn read_bounded_bytes(path: &Path, limit: u64) -> Result<Vec<u8>, FileError> {
    use std::io::Read;
    let file = open_regular(path)?;
    let read_error = |source| FileError::Read {
        path: path.to_owned(),
        source,
    };
    let too_large = || FileError::TooLarge {
        path: path.to_owned(),
        limit,
    };
    if file.metadata().map_err(read_error)?.len() > limit {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > limit {
        return Err(too_large());
    }
    Ok(bytes)
}

/// The text of the regular file at `path`, at most `limit` bytes ([`read_bounded_bytes`]);
/// text that is not UTF-8 is a read error that says where it stops being text.
pub fn read_bounded(path: &Path, limit: u64) -> Result<String, FileError> {
    let bytes = read_bounded_bytes(path, limit)?;
    String::from_utf8(bytes).map_err(|e| FileError::Read {
        path: path.to_owned(),
        source: std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to()),
        ),
    })
}

/// [`read_bounded`], but a missing file is `Ok(None)` (optional inputs such as baselines).
pub fn read_bounded_optional(path: &Path, limit: u64) -> Result<Option<String>, FileError> {
    match read_bounded(path, limit) {
        Ok(text) => Ok(Some(text)),
        Err(FileError::Read { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Why a path a pack names is not used.
#[derive(Debug)]
pub enum ConfineError {
    /// It is absolute, has a `..`, or resolves (through links) outside the directory.
    Outside,
    /// It cannot be resolved (missing, unreadable).
    File(FileError),
}

/// `target` (as a pack wrote it) resolved against `dir` (the pack's directory), refused
/// if it leaves it: absolute paths and `..` lexically, links out once resolved. Every path
/// a pack names goes through this (checkpoints, presets: issue 23).
pub fn confined(dir: &Path, target: &str) -> Result<PathBuf, ConfineError> {
    let relative = Path::new(target);
    if relative.is_absolute()
        || relative.components().any(|c| {
            matches!(
                c,
                std::path::Component::ParentDir | std::path::Component::Prefix(_)
            )
        })
    {
        return Err(ConfineError::Outside);
    }
    let path = dir.join(relative);
    // Links may still point out: compare the resolved paths once the file exists.
    let real_dir = dir.canonicalize().map_err(|source| {
        ConfineError::File(FileError::Read {
            path: dir.to_owned(),
            source,
        })
    })?;
    let real = path.canonicalize().map_err(|source| {
        ConfineError::File(FileError::Read {
            path: path.clone(),
            source,
        })
    })?;
    if !real.starts_with(&real_dir) {
        return Err(ConfineError::Outside);
    }
    Ok(path)
}

/// Pretty JSON with a trailing newline: our files are read by people in PRs too.
pub fn to_json<T: serde::Serialize>(value: &T) -> String {
    let mut s = serde_json::to_string_pretty(value).expect("sparsegate types serialize to JSON");
    s.push('\n');
    s
}

/// Write `bytes` to `path` so that readers see either the old file or the new one, never a
/// mix: write a temporary file in the same directory, fsync it, rename it over `path`, and
/// fsync the directory. The directory is reached through [`TreeDir`]: no component below
/// the root the path was given from may be a symbolic link (issue 23).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), FileError> {
    write_atomic_with(path, |file| file.write_all(bytes))
}

/// [`write_atomic`] with a caller-supplied writer; if `write` fails, the old file (if any)
/// is untouched and the temporary file is removed. Temporary files of killed runs in the
/// same directory are removed afterwards.
pub fn write_atomic_with(
    path: &Path,
    write: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> Result<(), FileError> {
    let werr = |source| FileError::Write {
        path: path.to_owned(),
        source,
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return Err(werr(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a file name sparsegate writes",
        )));
    };
    let dir = TreeDir::open(dir, true)?;
    dir.write_with(name, write)?;
    dir.remove_stale_temp_files();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_reads_take_regular_files_within_the_limit_only() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.json");
        std::fs::write(&file, "0123456789").unwrap();
        assert_eq!(read_bounded(&file, 10).unwrap(), "0123456789");
        assert!(matches!(
            read_bounded(&file, 9),
            Err(FileError::TooLarge { limit: 9, .. })
        ));
        assert!(matches!(
            read_bounded(dir.path(), 10),
            Err(FileError::NotAFile { .. })
        ));
        assert!(matches!(
            read_bounded(&dir.path().join("missing"), 10),
            Err(FileError::Read { .. })
        ));
    }

    /// A FIFO would block the open until a writer came: it is refused without opening.
    #[cfg(unix)]
    #[test]
    fn bounded_reads_refuse_a_fifo_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("evidence.json");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success());
        assert!(matches!(read_bounded(&fifo, 10), Err(FileError::NotAFile { .. })));
        assert!(open_nonblocking(&fifo).is_ok());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn bounded_reads_refuse_devices_and_sparse_giants_by_size() {
        assert!(matches!(
            read_bounded(Path::new("/dev/zero"), 10),
            Err(FileError::NotAFile { .. })
        ));
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.json");
        std::fs::File::create(&big).unwrap().set_len(1 << 40).unwrap();
        assert!(matches!(
            read_bounded(&big, 1 << 20),
            Err(FileError::TooLarge { .. })
        ));
        assert_eq!(read_bounded_optional(&dir.path().join("no"), 9).unwrap(), None);
    }
}

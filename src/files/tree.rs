//! Writing inside the tree the command was given, through directory handles (issue 23).
//!
//! A path check followed by a write by path races with whoever swaps a directory for a
//! symbolic link in between, and checking only the file's own directory misses a link
//! higher up (`golden -> /elsewhere`, then `golden/<pack>` is a real directory there). So a
//! directory is opened one component at a time with `O_NOFOLLOW | O_DIRECTORY` from the
//! root the command was given, and the file is created (`O_EXCL | O_NOFOLLOW`) and renamed
//! into place relative to that handle: once the handle is open, no later change of the
//! path can redirect the write.
//!
//! The root is the part of the path sparsegate follows as the user spelled it: the current
//! directory for a relative path (and for an absolute one inside it), everything up to the
//! last `..`, and, for an absolute path elsewhere, the directory's parent. Every component
//! below the root must be a real directory; missing ones are created.

use super::FileError;
use rustix::fs::{self as rfs, AtFlags, Mode, OFlags};
use rustix::io::Errno;
use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

/// The prefix of every temporary name sparsegate creates (files `….tmp`, output sets
/// `….out`); [`parse_temp`] recognises exactly those.
pub(super) const TEMP_PREFIX: &str = ".sparsegate-";

/// An open directory inside the tree, reached without following a link below its root.
#[derive(Debug)]
pub struct TreeDir {
    pub(super) fd: OwnedFd,
    pub(super) path: PathBuf,
}

/// Why one component could not be opened.
pub(super) enum Step {
    /// It is a symbolic link.
    Symlink,
    /// It is missing (and was not to be created).
    Missing,
    /// Anything else.
    Io(std::io::Error),
}

pub(super) fn symlink_error(path: &Path) -> FileError {
    FileError::Write {
        path: path.to_owned(),
        source: std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "{} is a symbolic link; sparsegate writes only into real directories",
                path.display()
            ),
        ),
    }
}

/// Split `dir` into the root sparsegate follows and the components below it it checks.
fn split_root(dir: &Path) -> (PathBuf, Vec<OsString>) {
    let cwd = std::env::current_dir().ok();
    let (mut root, rest): (PathBuf, PathBuf) = if dir.is_relative() {
        (PathBuf::from("."), dir.to_owned())
    } else if let Some((cwd, rest)) = cwd
        .as_ref()
        .and_then(|c| dir.strip_prefix(c).ok().map(|r| (c, r)))
    {
        (cwd.clone(), rest.to_owned())
    } else {
        match (dir.parent(), dir.file_name()) {
            (Some(parent), Some(name)) => (parent.to_owned(), PathBuf::from(name)),
            _ => (dir.to_owned(), PathBuf::new()),
        }
    };
    let mut below = Vec::new();
    for c in rest.components() {
        match c {
            Component::Normal(n) => below.push(n.to_owned()),
            Component::ParentDir => {
                // `a/../b`: what comes before a `..` is followed as the user spelled it.
                for n in below.drain(..) {
                    root.push(n);
                }
                root.push("..");
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    (root, below)
}

const DIR_FLAGS: OFlags = OFlags::DIRECTORY
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC)
    .union(OFlags::RDONLY);

/// Open the directory `name` inside `parent` without following a link; create it when
/// `create` and it is missing.
pub(super) fn open_component(parent: &OwnedFd, name: &OsStr, create: bool) -> Result<OwnedFd, Step> {
    let classify = |e: Errno| -> Step {
        if e == Errno::NOENT {
            return Step::Missing;
        }
        if (e == Errno::LOOP || e == Errno::NOTDIR)
            && rfs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| rfs::FileType::from_raw_mode(st.st_mode) == rfs::FileType::Symlink)
        {
            return Step::Symlink;
        }
        Step::Io(e.into())
    };
    match rfs::openat(parent, name, DIR_FLAGS, Mode::empty()) {
        Ok(fd) => Ok(fd),
        Err(e) if e == Errno::NOENT && create => {
            match rfs::mkdirat(parent, name, Mode::from_raw_mode(0o755)) {
                Ok(()) => {}
                Err(e) if e == Errno::EXIST => {}
                Err(e) => return Err(Step::Io(e.into())),
            }
            rfs::openat(parent, name, DIR_FLAGS, Mode::empty()).map_err(classify)
        }
        Err(e) => Err(classify(e)),
    }
}

impl TreeDir {
    /// Open `dir` (creating what is missing when `create`), refusing a symbolic link at
    /// any component below its root.
    pub fn open(dir: &Path, create: bool) -> Result<TreeDir, FileError> {
        let werr = |source| FileError::Write {
            path: dir.to_owned(),
            source,
        };
        let (root, below) = split_root(dir);
        if create {
            std::fs::create_dir_all(&root).map_err(werr)?;
        }
        let mut fd = rfs::openat(
            rfs::CWD,
            &root,
            OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::RDONLY,
            Mode::empty(),
        )
        .map_err(|e| werr(e.into()))?;
        let mut at = root;
        for name in below {
            at.push(&name);
            fd = match open_component(&fd, &name, create) {
                Ok(fd) => fd,
                Err(Step::Symlink) => return Err(symlink_error(&at)),
                Err(Step::Missing) => return Err(werr(Errno::NOENT.into())),
                Err(Step::Io(e)) => return Err(werr(e)),
            };
        }
        Ok(TreeDir {
            fd,
            path: dir.to_owned(),
        })
    }

    /// The directory as the caller named it.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Write the file `name` in this directory atomically: a temporary file created next to
    /// it (`O_EXCL | O_NOFOLLOW`), written, synced, given the old file's permissions (else
    /// 0644), renamed over `name` relative to the handle, and the directory synced. If
    /// `write` fails, the old file is untouched and the temporary file removed.
    pub fn write_with(
        &self,
        name: &str,
        write: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
    ) -> Result<PathBuf, FileError> {
        let path = self.path.join(name);
        let werr = |source| FileError::Write {
            path: path.clone(),
            source,
        };
        if !is_plain_name(name) {
            return Err(werr(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a plain file name",
            )));
        }
        let tmp = temp_name("tmp");
        let fd = rfs::openat(
            &self.fd,
            &tmp,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| werr(e.into()))?;
        let mut file = std::fs::File::from(fd);
        let done = (|| -> std::io::Result<()> {
            write(&mut file)?;
            file.flush()?;
            // Temporary files are private (0600); the result is readable like any file the
            // user writes, or keeps the permissions of the file it replaces.
            let mode = match rfs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) if rfs::FileType::from_raw_mode(st.st_mode) == rfs::FileType::RegularFile => {
                    st.st_mode & 0o7777
                }
                _ => 0o644,
            };
            rfs::fchmod(&file, Mode::from_raw_mode(mode))?;
            file.sync_all()?;
            rfs::renameat(&self.fd, &tmp, &self.fd, name)?;
            Ok(())
        })();
        if let Err(e) = done {
            let _ = rfs::unlinkat(&self.fd, &tmp, AtFlags::empty());
            return Err(werr(e));
        }
        // Directory fsync makes the rename durable; some filesystems refuse it, harmlessly.
        let _ = rfs::fsync(&self.fd);
        Ok(path)
    }

    /// [`TreeDir::write_with`] of `bytes`.
    pub fn write(&self, name: &str, bytes: &[u8]) -> Result<PathBuf, FileError> {
        self.write_with(name, |f| f.write_all(bytes))
    }

    /// Remove the temporary files of killed sparsegate processes in this directory (names
    /// [`parse_temp`] recognises whose process is gone). Best effort: what cannot be
    /// removed stays.
    pub fn remove_stale_temp_files(&self) {
        for (name, kind) in entries(&self.fd) {
            if kind != rfs::FileType::Directory
                && parse_temp(&name).is_some_and(|t| t.kind == "tmp" && !t.alive())
            {
                let _ = rfs::unlinkat(&self.fd, name.as_os_str(), AtFlags::empty());
            }
        }
    }
}

/// A file name without a directory part, `.`/`..` or NUL.
pub(super) fn is_plain_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\0'])
}

/// A fresh temporary name: `.sparsegate-<pid>-<16 hex>.<kind>`.
pub(super) fn temp_name(kind: &str) -> String {
    format!(
        "{TEMP_PREFIX}{}-{:016x}.{kind}",
        std::process::id(),
        rand::random::<u64>()
    )
}

/// A temporary name of ours, parsed.
pub(super) struct TempName<'a> {
    pid: u32,
    pub(super) kind: &'a str,
}

impl TempName<'_> {
    /// Whether the process that made it may still be running (a reused pid keeps it).
    pub(super) fn alive(&self) -> bool {
        if self.pid == std::process::id() {
            return true;
        }
        let Some(pid) = i32::try_from(self.pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
        else {
            return false;
        };
        // EPERM: it exists under another user.
        !matches!(rustix::process::test_kill_process(pid), Err(e) if e == Errno::SRCH)
    }
}

/// `.sparsegate-<pid>-<16 lowercase hex>.<tmp|out>`, strictly; nothing else is ours.
pub(super) fn parse_temp(name: &OsStr) -> Option<TempName<'_>> {
    let rest = name.to_str()?.strip_prefix(TEMP_PREFIX)?;
    let (pid, rest) = rest.split_once('-')?;
    let (hex, kind) = rest.split_once('.')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let hex_ok = hex.len() == 16
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !digits(pid) || !hex_ok || !matches!(kind, "tmp" | "out") {
        return None;
    }
    Some(TempName {
        pid: pid.parse().ok()?,
        kind,
    })
}

/// The entries of the directory `fd` (without `.` and `..`), with their types as the
/// directory reports them.
pub(super) fn entries(fd: &OwnedFd) -> Vec<(OsString, rfs::FileType)> {
    let Ok(dir) = rfs::Dir::read_from(fd) else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| {
            use std::os::unix::ffi::OsStrExt;
            let name = OsStr::from_bytes(e.file_name().to_bytes()).to_owned();
            (name != "." && name != "..").then_some((name, e.file_type()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_our_strict_temp_names_are_ours() {
        let ours = temp_name("tmp");
        assert!(parse_temp(OsStr::new(&ours)).is_some_and(|t| t.alive()));
        for name in [
            ".sparsegate-12-0123456789abcdef.out",
            ".sparsegate-1-ffffffffffffffff.tmp",
        ] {
            assert!(parse_temp(OsStr::new(name)).is_some(), "{name}");
        }
        for name in [
            ".sparsegate-12-0123456789abcdef.txt",
            ".sparsegate-12-0123456789ABCDEF.tmp",
            ".sparsegate-x-0123456789abcdef.tmp",
            ".sparsegate-12-0123456789abcde.tmp",
            "sparsegate-12-0123456789abcdef.tmp",
            ".sparsegate-12-0123456789abcdef.tmp.keep",
            "memo.json",
        ] {
            assert!(parse_temp(OsStr::new(name)).is_none(), "{name}");
        }
    }

    #[test]
    fn the_root_is_followed_and_what_lies_below_it_is_checked() {
        assert_eq!(
            split_root(Path::new("golden/p")),
            (
                PathBuf::from("."),
                vec![OsString::from("golden"), OsString::from("p")]
            )
        );
        assert_eq!(
            split_root(Path::new("../x/./out")),
            (
                PathBuf::from("./.."),
                vec![OsString::from("x"), OsString::from("out")]
            )
        );
        assert_eq!(
            split_root(Path::new("a/../b")),
            (PathBuf::from("./a/.."), vec![OsString::from("b")])
        );
    }

    #[test]
    fn writes_replace_the_file_and_leave_no_temporary_behind() {
        let tree = tempfile::tempdir().unwrap();
        let dir = TreeDir::open(&tree.path().join("a"), true).unwrap();
        dir.write("f.json", b"one").unwrap();
        dir.write("f.json", b"two").unwrap();
        assert_eq!(std::fs::read(tree.path().join("a/f.json")).unwrap(), b"two");
        // A stale temporary of a process that is gone is removed; one of a live process is not.
        std::fs::write(
            tree.path().join("a/.sparsegate-999999999-0123456789abcdef.tmp"),
            "x",
        )
        .unwrap();
        let live = tree.path().join(format!("a/{}", temp_name("tmp")));
        std::fs::write(&live, "x").unwrap();
        dir.remove_stale_temp_files();
        let mut names: Vec<String> = std::fs::read_dir(tree.path().join("a"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(live.exists());
    }
}

//! An output directory written as a whole (issue 23: a signal between the renames of
//! single files left a new `memo.json` beside the previous run's verdict).
//!
//! The set is built in a fresh directory `.sparsegate-<pid>-<hex>.out` next to the output
//! directory (same filesystem), every file synced, the directory synced; then one
//! `renameat2(RENAME_EXCHANGE)` swaps it with the output directory, and the previous set,
//! now under the temporary name, is removed. So under SIGKILL at any instant the output
//! directory holds either the complete previous set or the complete new one:
//! - killed before the exchange: the old directory is untouched; the half-built set is a
//!   stale temporary directory;
//! - the exchange is one atomic system call;
//! - killed after it: the new set is in place; the old set is a stale temporary directory.
//!
//! The next run removes stale temporary directories and files of ours (the strict name
//! pattern of [`super::tree::parse_temp`], whose process is gone), deleting only the
//! entries the caller recognises as outputs and our temporary files: a directory that still
//! holds anything else is left where it is, never deleted.
//!
//! What else is in the output directory: entries the caller recognises as its own
//! (outputs, signatures of the previous set) are not carried over, so a previous run's
//! signature never lies next to a new memo. Everything else (files the user put there) is
//! carried: regular files, links and the like as hard links into the new set before the
//! exchange (so a kill loses nothing), directories by rename right after it.
//!
//! The output directory must have a name of its own: `.`, `..`, `/`, the current directory
//! and its ancestors, and a git work tree are refused (swapping them would move the tree
//! the command runs in).

use super::FileError;
use super::tree::{
    Step, TreeDir, entries, is_plain_name, open_component, parse_temp, symlink_error, temp_name,
};
use rustix::fs::{self as rfs, AtFlags, Mode, OFlags, RenameFlags};
use rustix::io::Errno;
use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// A set of output files being built; nothing is visible in the output directory until
/// [`OutputSet::commit`]. Dropped uncommitted, the half-built set is removed.
#[derive(Debug)]
pub struct OutputSet {
    parent: TreeDir,
    name: OsString,
    dir: PathBuf,
    staging_name: String,
    staging: OwnedFd,
    written: Vec<String>,
    ours: fn(&str) -> bool,
    committed: bool,
}

fn invalid(path: &Path, message: String) -> FileError {
    FileError::Write {
        path: path.to_owned(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, message),
    }
}

impl OutputSet {
    /// Start a new set for `out_dir`. `ours` says which names in the output directory are
    /// the caller's outputs (replaced or dropped, never carried over). Removes the stale
    /// temporaries of killed runs next to it first.
    pub fn begin(out_dir: &Path, ours: fn(&str) -> bool) -> Result<OutputSet, FileError> {
        let (parent, name) = locate(out_dir)?;
        remove_stale(&parent, ours);
        let werr = |e: Errno| FileError::Write {
            path: out_dir.to_owned(),
            source: e.into(),
        };
        let staging_name = temp_name("out");
        rfs::mkdirat(&parent.fd, staging_name.as_str(), Mode::from_raw_mode(0o755)).map_err(werr)?;
        let staging = match open_component(&parent.fd, OsStr::new(&staging_name), false) {
            Ok(fd) => fd,
            Err(_) => return Err(werr(Errno::IO)),
        };
        Ok(OutputSet {
            parent,
            name,
            dir: out_dir.to_owned(),
            staging_name,
            staging,
            written: Vec::new(),
            ours,
            committed: false,
        })
    }

    /// Whether `out_dir` can take an output set (what [`OutputSet::begin`] refuses), so a
    /// command refuses it before anything runs. Creates its parent directories.
    pub fn check(out_dir: &Path) -> Result<(), FileError> {
        locate(out_dir).map(|_| ())
    }

    /// Add the file `name` to the set (synced); the path it will have once committed.
    pub fn write(&mut self, name: &str, bytes: &[u8]) -> Result<PathBuf, FileError> {
        let path = self.dir.join(name);
        let werr = |source| FileError::Write {
            path: path.clone(),
            source,
        };
        if !is_plain_name(name) || self.written.iter().any(|w| w == name) {
            return Err(werr(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a new plain file name of the set",
            )));
        }
        let fd = rfs::openat(
            &self.staging,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )
        .map_err(|e| werr(e.into()))?;
        let mut file = std::fs::File::from(fd);
        // The mode asked for above is reduced by the umask, as for any file the user writes.
        file.write_all(bytes)
            .and_then(|()| file.sync_all())
            .map_err(werr)?;
        self.written.push(name.to_owned());
        Ok(path)
    }

    /// Put the set in place of the output directory, atomically, and remove the previous
    /// set. On error before the exchange, the output directory is as it was.
    pub fn commit(mut self) -> Result<(), FileError> {
        let werr = |e: std::io::Error| FileError::Write {
            path: self.dir.clone(),
            source: e,
        };
        let current = match open_component(&self.parent.fd, &self.name, false) {
            Ok(fd) => Some(fd),
            Err(Step::Missing) => None,
            Err(Step::Symlink) => return Err(symlink_error(&self.dir)),
            Err(Step::Io(e)) => return Err(werr(e)),
        };
        // Carry what is not ours: links now (a kill before the exchange loses nothing),
        // directories (which cannot be linked) by rename after it.
        let mut carried = Vec::new();
        let mut later = Vec::new();
        if let Some(current) = &current {
            for (name, _) in entries(current) {
                if self.is_ours(&name) {
                    continue;
                }
                match rfs::linkat(
                    current,
                    name.as_os_str(),
                    &self.staging,
                    name.as_os_str(),
                    AtFlags::empty(),
                ) {
                    Ok(()) => carried.push(name),
                    Err(_) => later.push(name),
                }
            }
        }
        rfs::fsync(&self.staging).map_err(|e| werr(e.into()))?;
        let staging = self.staging_name.clone();
        if current.is_some() {
            exchange(&self.parent.fd, &staging, &self.name).map_err(werr)?;
        } else {
            match rfs::renameat_with(
                &self.parent.fd,
                staging.as_str(),
                &self.parent.fd,
                &self.name,
                RenameFlags::NOREPLACE,
            ) {
                Ok(()) => {}
                // No RENAME_NOREPLACE here: a plain rename (it replaces only an empty
                // directory, which holds no set).
                Err(e) if e == Errno::INVAL || e == Errno::NOSYS || e == Errno::OPNOTSUPP => {
                    rfs::renameat(&self.parent.fd, staging.as_str(), &self.parent.fd, &self.name)
                        .map_err(|e| werr(e.into()))?;
                }
                Err(e) => return Err(werr(e.into())),
            }
        }
        self.committed = true;
        let _ = rfs::fsync(&self.parent.fd);
        // The previous set now lies under the temporary name.
        if let Some(old) = current {
            for name in &later {
                let _ = rfs::renameat_with(
                    &old,
                    name.as_os_str(),
                    &self.staging,
                    name.as_os_str(),
                    RenameFlags::NOREPLACE,
                );
            }
            let _ = rfs::fsync(&self.staging);
            for (name, kind) in entries(&old) {
                if kind != rfs::FileType::Directory && (self.is_ours(&name) || carried.contains(&name)) {
                    let _ = rfs::unlinkat(&old, name.as_os_str(), AtFlags::empty());
                }
            }
            let _ = rfs::unlinkat(&self.parent.fd, staging.as_str(), AtFlags::REMOVEDIR);
        }
        Ok(())
    }

    /// Whether `name` in the output directory is replaced by the set, not carried over.
    fn is_ours(&self, name: &OsStr) -> bool {
        let Some(text) = name.to_str() else {
            return false;
        };
        self.written.iter().any(|w| w == text) || (self.ours)(text) || parse_temp(name).is_some()
    }
}

impl Drop for OutputSet {
    fn drop(&mut self) {
        if !self.committed {
            remove_set_dir(&self.parent, OsStr::new(&self.staging_name), |_| true);
        }
    }
}

/// The parent directory of `out_dir` (opened through [`TreeDir`]) and its name, refused
/// where it cannot take an output set (see the module's documentation).
fn locate(out_dir: &Path) -> Result<(TreeDir, OsString), FileError> {
    let Some(name) = out_dir.file_name().filter(|n| *n != "." && *n != "..") else {
        return Err(invalid(
            out_dir,
            format!(
                "{} is not a directory of its own; name an output directory such as `out`",
                out_dir.display()
            ),
        ));
    };
    if let (Ok(real), Ok(cwd)) = (out_dir.canonicalize(), std::env::current_dir())
        && cwd.starts_with(&real)
    {
        return Err(invalid(
            out_dir,
            format!(
                "{} holds the current directory; sparsegate replaces its output directory as a whole, so name one of its own such as `out`",
                out_dir.display()
            ),
        ));
    }
    let parent_path = match out_dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let parent = TreeDir::open(parent_path, true)?;
    match rfs::statat(&parent.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => match rfs::FileType::from_raw_mode(st.st_mode) {
            rfs::FileType::Symlink => return Err(symlink_error(out_dir)),
            rfs::FileType::Directory => {}
            _ => {
                return Err(invalid(
                    out_dir,
                    format!("{} is not a directory", out_dir.display()),
                ));
            }
        },
        Err(e) if e == Errno::NOENT => {}
        Err(e) => {
            return Err(FileError::Write {
                path: out_dir.to_owned(),
                source: e.into(),
            });
        }
    }
    if rfs::statat(
        &parent.fd,
        Path::new(name).join(".git"),
        AtFlags::SYMLINK_NOFOLLOW,
    )
    .is_ok()
    {
        return Err(invalid(
            out_dir,
            format!(
                "{} is a git work tree; sparsegate replaces its output directory as a whole, so name one of its own such as `out`",
                out_dir.display()
            ),
        ));
    }
    Ok((parent, name.to_owned()))
}

/// Swap `staging` and `name` in `parent`: `RENAME_EXCHANGE` where the filesystem has it;
/// else two renames, with a moment in which the output directory is missing (never mixed).
fn exchange(parent: &OwnedFd, staging: &str, name: &OsStr) -> std::io::Result<()> {
    match rfs::renameat_with(parent, staging, parent, name, RenameFlags::EXCHANGE) {
        Ok(()) => Ok(()),
        Err(e) if e == Errno::INVAL || e == Errno::NOSYS || e == Errno::OPNOTSUPP => {
            let aside = temp_name("out");
            rfs::renameat(parent, name, parent, aside.as_str())?;
            rfs::renameat(parent, staging, parent, name)?;
            // Leave the old set where `commit` expects it.
            rfs::renameat(parent, aside.as_str(), parent, staging)?;
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// Remove the stale temporaries of killed runs in `parent`: files, and set directories
/// emptied of what is ours (a set directory still holding anything else stays).
fn remove_stale(parent: &TreeDir, ours: fn(&str) -> bool) {
    parent.remove_stale_temp_files();
    for (name, kind) in entries(&parent.fd) {
        if kind == rfs::FileType::Directory
            && parse_temp(&name).is_some_and(|t| t.kind == "out" && !t.alive())
        {
            remove_set_dir(parent, &name, ours);
        }
    }
}

/// Remove the files of the set directory `name` that `ours` recognises (and our
/// temporaries), then the directory if that emptied it.
fn remove_set_dir(parent: &TreeDir, name: &OsStr, ours: impl Fn(&str) -> bool) {
    let Ok(dir) = open_component(&parent.fd, name, false) else {
        return;
    };
    for (entry, kind) in entries(&dir) {
        let mine = entry.to_str().is_some_and(&ours) || parse_temp(&entry).is_some();
        if kind != rfs::FileType::Directory && mine {
            let _ = rfs::unlinkat(&dir, entry.as_os_str(), AtFlags::empty());
        }
    }
    let _ = rfs::unlinkat(&parent.fd, name, AtFlags::REMOVEDIR);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours(name: &str) -> bool {
        matches!(name, "a.json" | "b.json" | "old.sig")
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_committed_set_replaces_ours_and_carries_the_rest() {
        let tree = tempfile::tempdir().unwrap();
        let out = tree.path().join("out");
        let mut set = OutputSet::begin(&out, ours).unwrap();
        set.write("a.json", b"1").unwrap();
        set.write("b.json", b"1").unwrap();
        set.commit().unwrap();
        std::fs::write(out.join("old.sig"), "sig of run 1").unwrap();
        std::fs::write(out.join("notes.txt"), "mine").unwrap();
        std::fs::create_dir(out.join("keep")).unwrap();
        std::fs::write(out.join("keep/x"), "mine too").unwrap();

        let mut set = OutputSet::begin(&out, ours).unwrap();
        set.write("a.json", b"2").unwrap();
        // Nothing is visible before the commit.
        assert_eq!(std::fs::read(out.join("a.json")).unwrap(), b"1");
        set.commit().unwrap();
        assert_eq!(names(&out), ["a.json", "keep", "notes.txt"]);
        assert_eq!(std::fs::read(out.join("a.json")).unwrap(), b"2");
        assert_eq!(std::fs::read(out.join("keep/x")).unwrap(), b"mine too");
        assert_eq!(names(tree.path()), ["out"]);
    }

    #[test]
    fn an_uncommitted_set_leaves_the_old_one_and_nothing_else() {
        let tree = tempfile::tempdir().unwrap();
        let out = tree.path().join("out");
        let mut set = OutputSet::begin(&out, ours).unwrap();
        set.write("a.json", b"1").unwrap();
        set.commit().unwrap();
        let mut set = OutputSet::begin(&out, ours).unwrap();
        set.write("a.json", b"2").unwrap();
        drop(set);
        assert_eq!(names(tree.path()), ["out"]);
        assert_eq!(std::fs::read(out.join("a.json")).unwrap(), b"1");
    }

    #[test]
    fn stale_sets_of_killed_runs_are_removed_unless_they_hold_foreign_files() {
        let tree = tempfile::tempdir().unwrap();
        let stale = tree.path().join(".sparsegate-999999999-0123456789abcdef.out");
        std::fs::create_dir(&stale).unwrap();
        std::fs::write(stale.join("a.json"), "x").unwrap();
        std::fs::write(stale.join(".sparsegate-999999999-0000000000000000.tmp"), "x").unwrap();
        let kept = tree.path().join(".sparsegate-999999998-0123456789abcdef.out");
        std::fs::create_dir(&kept).unwrap();
        std::fs::write(kept.join("a.json"), "x").unwrap();
        std::fs::write(kept.join("users-file"), "x").unwrap();
        let lookalike = tree.path().join(".sparsegate-999999999-0123456789abcdef.out.bak");
        std::fs::create_dir(&lookalike).unwrap();
        let out = tree.path().join("out");
        let mut set = OutputSet::begin(&out, ours).unwrap();
        set.write("a.json", b"1").unwrap();
        set.commit().unwrap();
        assert!(!stale.exists());
        assert_eq!(names(&kept), ["users-file"]);
        assert!(lookalike.exists());
    }

    #[test]
    fn the_current_directory_and_a_link_are_not_output_directories() {
        let tree = tempfile::tempdir().unwrap();
        assert!(OutputSet::begin(Path::new("."), ours).is_err());
        let cwd = std::env::current_dir().unwrap();
        assert!(OutputSet::begin(&cwd, ours).is_err());
        std::os::unix::fs::symlink(tree.path(), tree.path().join("link")).unwrap();
        let err = OutputSet::begin(&tree.path().join("link"), ours).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
    }
}

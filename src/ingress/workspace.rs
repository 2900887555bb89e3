//! Facts about where a command runs that are not part of the lock: the git work tree's
//! root (where the run history lives by default) and who is at the keyboard (who blessed a
//! baseline).

use std::path::{Path, PathBuf};

/// The root of the git work tree holding `dir`, else `dir` itself.
pub fn work_tree_root(dir: &Path) -> PathBuf {
    git2::Repository::discover(dir)
        .ok()
        .and_then(|r| r.workdir().map(Path::to_path_buf))
        .unwrap_or_else(|| dir.to_path_buf())
}

/// Who is running the command: the git user (`name <email>`) where configured, else
/// `$USER`, else `unknown`.
pub fn user_identity(dir: &Path) -> String {
    let from_git = git2::Repository::discover(dir)
        .and_then(|r| r.config())
        .or_else(|_| git2::Config::open_default())
        .ok()
        .and_then(|c| {
            let name = c.get_string("user.name").ok()?;
            Some(match c.get_string("user.email") {
                Ok(email) => format!("{name} <{email}>"),
                Err(_) => name,
            })
        });
    from_git
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "unknown".to_owned())
}

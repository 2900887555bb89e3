//! `sparsegate history`: the recorded gate and merge runs, newest first.

use crate::options::history_location;
use sparsegate::release::ExitCode;
use sparsegate::{Result, app};
use std::path::PathBuf;

pub fn run(pack: Option<&str>, limit: usize, history: Option<PathBuf>, json: bool) -> Result<ExitCode> {
    let runs = app::history_runs(&history_location(history), pack, limit)?;
    if json {
        print!("{}", app::to_json(&runs));
    } else if runs.is_empty() {
        println!(
            "no runs recorded{}",
            pack.map_or_else(String::new, |p| format!(" for pack `{p}`"))
        );
    } else {
        for r in &runs {
            println!(
                "{:>6}  {}  {:<5} {:<12} exit {}  {}{}  {}",
                r.id,
                r.recorded_at,
                r.command,
                r.verdict,
                r.exit_code,
                r.git_commit.as_deref().map_or("-", |c| c.get(..12).unwrap_or(c)),
                if r.git_dirty == Some(true) { "+dirty" } else { "" },
                r.packs.join(" ")
            );
        }
    }
    Ok(ExitCode::Pass)
}

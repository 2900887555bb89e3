//! `sparsegate run PACK... --out DIR [--shard K/N]`: execute and write DIR/evidence.json.

use crate::cli::RunArgs;
use crate::options::options;
use crate::progress::progress;
use sparsegate::execute::summary::SliceSummary;
use sparsegate::ingress::shard::Shard;
use sparsegate::release::ExitCode;
use sparsegate::{Result, app};
use std::path::Path;

pub fn run(run: &RunArgs, out: &Path, shard: Option<Shard>, json: bool) -> Result<ExitCode> {
    app::check_out_dir(out, None)?;
    let mut packs = app::load_packs(&run.packs)?;
    if let Some(shard) = shard {
        app::select_shard(&mut packs, shard);
    }
    let evidence = app::run(&packs, &options(run, false), &mut progress(run.quiet))?;
    let path = app::write_evidence(&evidence, out)?;
    if json {
        print!(
            "{}",
            app::to_json(&evidence.slices.iter().map(SliceSummary::of).collect::<Vec<_>>())
        );
    } else {
        println!("wrote {}", path.display());
    }
    Ok(ExitCode::Pass)
}

//! `sparsegate run PACK... --out DIR [--shard K/N]`: execute and write DIR/evidence.json.

use crate::cli::RunArgs;
use crate::options::options;
use crate::progress::progress;
use sparsegate::execute::SliceEvidence;
use sparsegate::ingress::shard::Shard;
use sparsegate::release::ExitCode;
use sparsegate::{Result, app};
use std::path::Path;

pub fn run(run: &RunArgs, out: &Path, shard: Option<Shard>, json: bool) -> Result<ExitCode> {
    let mut packs = app::load_packs(&run.packs)?;
    if let Some(shard) = shard {
        app::select_shard(&mut packs, shard);
    }
    let evidence = app::run(&packs, &options(run, false), &mut progress(run.quiet))?;
    let path = app::write_evidence(&evidence, out)?;
    if json {
        print!(
            "{}",
            app::to_json(&evidence.slices.iter().map(slice_summary).collect::<Vec<_>>())
        );
    } else {
        println!("wrote {}", path.display());
    }
    Ok(ExitCode::Pass)
}

fn slice_summary(s: &SliceEvidence) -> serde_json::Value {
    let median = |name: &str| {
        s.metrics
            .get(name)
            .and_then(|m| sparsegate::validate::stats::median(&m.samples).ok())
    };
    serde_json::json!({
        "pack": s.pack, "slice": s.slice, "sparsity": s.sparsity,
        "samples": s.metrics.get("latency").map_or(0, |m| m.samples.len()),
        "latency_median_s": median("latency"), "effective_speedup_median": median("effective_speedup"),
        "fallback_rate": s.plan.fallback_rate(), "failure": s.failure,
    })
}

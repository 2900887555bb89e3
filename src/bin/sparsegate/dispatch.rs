//! One arm per verb: hand the parsed arguments to the verb's file.

use crate::cli::{Cli, Command, MemoCommand};
use sparsegate::Result;
use sparsegate::release::ExitCode;

/// Run the verb `cli` names; `Ok` carries the exit code of a command that reached a result.
pub fn dispatch(cli: Cli) -> Result<ExitCode> {
    crate::options::check_kernel_variables()?;
    match cli.command {
        Command::Validate { packs, json } => crate::validate::run(&packs, json),
        Command::RunSlice => crate::run_slice::run(),
        Command::ChildProtocol => crate::run_slice::protocol(),
        Command::Contain { argv } => crate::run_slice::contain(&argv),
        Command::Run {
            run,
            out,
            shard,
            json,
        } => crate::run::run(&run, &out, shard, json),
        Command::Merge {
            shards,
            out,
            golden,
            decide,
        } => crate::merge::run(&shards, &out, golden, &decide),
        Command::Gate {
            run,
            out,
            baseline_bin,
            focus,
            decide,
        } => crate::gate::run(&run, &out, baseline_bin.as_deref(), focus, &decide),
        Command::Memo(MemoCommand::Sign {
            dir,
            key,
            role,
            allowed_signers,
            json,
        }) => crate::memo::sign(&dir, &key, role.as_deref(), &allowed_signers, json),
        Command::Memo(MemoCommand::Verify {
            dir,
            allowed_signers,
            require_pass,
            packs,
            json,
        }) => crate::memo::verify(&dir, &allowed_signers, &packs, require_pass, json),
        Command::Bless {
            run,
            slices,
            expires_in_days,
            per_runner,
            json,
        } => crate::bless::run(&run, &slices, (expires_in_days, per_runner), json),
        Command::History {
            pack,
            limit,
            history,
            json,
        } => crate::history::run(pack.as_deref(), limit, history, json),
        Command::Trend(args) => crate::trend::run(&args),
        Command::Bench(args) => crate::bench::run(&args),
        Command::Stats { command } => Ok(crate::stats::run(command)),
        Command::Sim(args) => crate::sim::run(&args),
    }
}

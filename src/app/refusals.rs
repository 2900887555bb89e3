//! The stages' refusals as the library's [`Error`], each with what to do about it. The
//! stages say what is wrong; the hints, which name commands and the run's setup, are
//! added here, once for every command that meets them.

use crate::error::Error;
use crate::execute::shards::ShardError;
use crate::ingress::pack_set::PackSetError;
use crate::validate::baselines::BaselineError;

fn usage(e: impl std::fmt::Display, hint: &str) -> Error {
    Error::Usage {
        message: e.to_string(),
        hint: hint.to_owned(),
    }
}

/// Packs that cannot be loaded or run together.
pub(super) fn pack_set(e: PackSetError) -> Error {
    match e {
        PackSetError::Pack(e) => Error::Pack(e),
        PackSetError::DirtyWorkTree { pack } => Error::DirtyWorkTree { pack },
        e @ PackSetError::SharedName { .. } => usage(
            e,
            "pack names key golden baselines; give each pack its own `name`",
        ),
        e @ PackSetError::MixedThreads => usage(e, "run packs with different locks in separate invocations"),
        e @ PackSetError::LockField { .. } => usage(
            e,
            "a lock field's command must exist, succeed and finish within 10 s on this machine; fix it or read an `env` variable instead",
        ),
        e @ PackSetError::MixedLockField { .. } => usage(
            e,
            "give the two packs' fields distinct names, or gate the packs in separate invocations",
        ),
        e @ PackSetError::DigestCount { .. } => usage(e, "give `--pack-digest` once per pack, in pack order"),
        e @ PackSetError::PackChanged { .. } => usage(
            e,
            "check out the commit the failing gate ran on, or drop `--pack-digest` to gate the pack as it is now",
        ),
        e @ PackSetError::UnknownSlice { .. } => usage(
            e,
            "`--slice` takes an expanded slice id as the memo and verdict.json write it (e.g. `bert-qkv-2of4-fp32`)",
        ),
    }
}

/// Baselines a gate needs and cannot use.
pub(super) fn baseline(e: BaselineError) -> Error {
    match e {
        BaselineError::Golden(e) => e.into(),
        BaselineError::Missing {
            pack,
            slice,
            path,
            pack_path,
        } => Error::MissingBaseline {
            pack,
            slice,
            path,
            pack_path,
        },
        BaselineError::Drift { baseline, fields } => Error::EnvironmentDrift { baseline, fields },
        BaselineError::Bf16Kernel(m) => {
            use crate::validate::baselines::Bf16Reason;
            let hint = match m.reason() {
                Bf16Reason::Requested => format!(
                    "unset {} to let the gate run the baseline's kernel, or bless again with it set",
                    crate::ingress::bf16_pick::BF16_KERNEL_ENV
                ),
                Bf16Reason::NotOffered => format!(
                    "gate on a runner whose CPU runs the {} kernel (the baseline's runner class), or bless a \
                     baseline for this runner class on this machine",
                    m.recorded.name()
                ),
                Bf16Reason::OtherBaselines => "bless the bf16 slices of these packs again together, so that \
                                               their baselines record one bf16 kernel"
                    .to_owned(),
            };
            usage(m, &hint)
        }
        BaselineError::ArtifactChanged { baseline, fields } => Error::ArtifactChanged { baseline, fields },
    }
}

/// Shard evidence that cannot be merged.
pub(super) fn shard(e: ShardError) -> Error {
    match e {
        ShardError::File(e) => e.into(),
        ShardError::Pack(e) => Error::Pack(e),
        e @ ShardError::NoShards => usage(e, "pass the output directory of every shard"),
        e @ ShardError::LockMismatch { .. } => usage(
            e,
            "run every shard with the same sparsegate build, threads and pack lock fields (the CPU may differ)",
        ),
        e @ ShardError::PackVersions { .. } => usage(e, "run every shard from the same commit"),
        e @ ShardError::ArtifactVersions(_) => usage(
            e,
            "run every shard on the same checkpoint files (compare their digests)",
        ),
        e @ ShardError::Overlap { .. } => Error::OverlappingShards(e),
        e @ ShardError::PackChanged { .. } => usage(e, "merge the shards of this commit, or run them again"),
        e @ ShardError::Missing(_) => usage(e, "pass the output directory of every shard (K = 1..N)"),
    }
}

/// An import slice's results file that cannot be read: bad input, refused before anything
/// runs (exit 2).
pub(super) fn import(
    pack: &std::path::Path,
    slice: &crate::ingress::Slice,
    e: crate::execute::ExecError,
) -> Error {
    usage(
        format!("{}: slice `{}`: {e}", pack.display(), slice.id),
        "the file `import.file` names must be the tool's own unedited output; write it again, \
         or make the pack's `benchmark` / `ranges` name what it holds",
    )
}

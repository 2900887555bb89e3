//! The environment evidence is taken under, and the *lock*: the part of it that must match
//! for two measurements to be comparable (DESIGN.md §2).

use serde::{Deserialize, Serialize};
use sparsegate_kernels::cpu::{self, IsaLevel};
use std::collections::BTreeMap;
use std::path::Path;

/// Where and with what a measurement was taken.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Environment {
    /// sparsegate's version (the built-in kernels are part of it).
    pub tool_version: String,
    /// The compiler that built this binary.
    pub rustc: String,
    /// Versions of the kernel libraries linked in (e.g. `gemm`).
    pub kernel_libs: BTreeMap<String, String>,
    /// CPU model name.
    pub cpu_model: String,
    /// SIMD features the kernels may dispatch on, as detected at run time, less those
    /// `SPARSEGATE_MAX_ISA` withholds: a run capped at AVX2 is another class of runner.
    pub cpu_features: Vec<String>,
    /// The dense comparator's instruction-set path per precision (`bf16` →
    /// `avx512-bf16-shift`, …). Locked for the precision a slice runs: the features do not
    /// decide it alone, since the bf16 kernels measure whether `vdpbf16ps` outruns f32 FMA
    /// (issue 20), so a baseline of a bf16 slice taken on one bf16 kernel never compares
    /// silently with a run on the other, while an fp32 slice or a user's command is not
    /// refused for the bf16 pick ([`Environment::lock_diff_on`]). Baselines from before it
    /// was recorded lack it and show as drift.
    #[serde(default)]
    pub kernel_paths: BTreeMap<String, String>,
    /// The bf16 kernel this process ran and how it was chosen: measured by the timing
    /// probe, asked for with `SPARSEGATE_BF16_KERNEL`, or pinned from the golden baseline
    /// (issue 22). Recorded, not locked (`kernel_paths` locks the path itself); absent where
    /// the CPU runs neither bf16 kernel, and in baselines from before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bf16_pick: Option<super::bf16_pick::Bf16Pick>,
    /// Logical CPUs visible to the process.
    pub logical_cpus: usize,
    /// Worker threads the kernels use.
    pub threads: usize,
    /// Operating system and architecture, e.g. `linux-x86_64`.
    pub os: String,
    /// Kernel release, where known.
    pub os_release: String,
    /// Git state of the working directory, when it is a repository.
    pub git: Option<GitInfo>,
    /// The machine's measured roofs (peak FMA rate and memory bandwidth), when a CPU slice
    /// ran. Recorded, never locked: they vary from run to run on a shared machine, and the
    /// memo's roofline places each CPU slice against them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roofs: Option<MachineRoofs>,
    /// The packs' own lock fields (`lock.fields`, issue 24): name → value, locked like the
    /// built-in ones under `stack.<name>`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub stack: BTreeMap<String, String>,
}

/// The two roofs of this machine's roofline, measured at gate time by the execute stage
/// (`execute::roofs`): how fast it can multiply-add with every worker thread, and how fast
/// it can stream memory that does not fit in the caches.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MachineRoofs {
    /// Peak f32 FMA throughput in GFLOP/s (2 FLOPs per lane per FMA), best of the trials.
    pub peak_gflops: f64,
    /// Sustained memory bandwidth in GB/s (10⁹ B/s) of a STREAM-like triad, best of the passes.
    pub bandwidth_gbps: f64,
    /// The instruction set the FMA loop ran on (`avx512f`, `avx2+fma`, `portable`).
    pub isa: String,
    /// Worker threads both measurements used (the gate's thread count).
    pub threads: usize,
    /// Bytes the triad moved per pass (three arrays, counted STREAM-style without write
    /// allocation), chosen well beyond the last-level cache.
    pub triad_bytes: u64,
    /// Wall time the measurements took, seconds.
    pub measured_s: f64,
    /// The compute roofs of the precisions whose kernels run on an instruction of their own
    /// (bf16 `vdpbf16ps`, int8 `vpdpbusd`), where the CPU has it: a bf16 or int8 slice is
    /// placed against its own roof, not f32's (issue 20). fp16 multiplies on the f32 FMA.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub precision_peaks: Vec<PrecisionPeak>,
}

/// One precision's compute roof.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PrecisionPeak {
    /// The precision whose kernels run on it.
    pub precision: crate::domain::Precision,
    /// Peak throughput in G(FL)OP/s, 2 per product, best of the trials.
    pub peak_gops: f64,
    /// The instruction the probe ran (`vdpbf16ps`, `vpdpbusd`).
    pub instruction: String,
}

impl MachineRoofs {
    /// The compute roof a slice of `precision` is placed against, and what it is: the
    /// precision's own peak where one was measured, else the f32 FMA's (the kernels widen).
    pub fn peak_for(&self, precision: crate::domain::Precision) -> (f64, String) {
        match self.precision_peaks.iter().find(|p| p.precision == precision) {
            Some(p) => (
                p.peak_gops,
                format!("{} peak, {}", precision.as_str(), p.instruction),
            ),
            None => (self.peak_gflops, format!("f32 FMA peak, {}", self.isa)),
        }
    }

    /// The ridge point in FLOP/byte: below it a kernel cannot reach the compute roof, however
    /// good it is, because memory cannot feed it.
    pub fn ridge_flop_per_byte(&self) -> f64 {
        self.peak_gflops / self.bandwidth_gbps
    }
}

/// Git state, recorded (not locked): the commit under test differs on every PR.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GitInfo {
    /// HEAD commit id, or `unborn` in a repository without commits.
    pub commit: String,
    /// Branch name, when HEAD is on one.
    pub branch: Option<String>,
    /// Whether tracked or untracked files differ from HEAD.
    pub dirty: bool,
}

/// One lock field that differs between two environments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FieldDiff {
    /// The lock field, e.g. `cpu_model`.
    pub field: String,
    /// Value in the baseline.
    pub baseline: String,
    /// Value now.
    pub current: String,
}

impl Environment {
    /// Capture the environment of this process, with `threads` kernel workers, looking for a
    /// git repository at or above `dir`. Never fails: unknown parts are recorded as such.
    pub fn capture(threads: usize, dir: &Path) -> Environment {
        Environment {
            tool_version: env!("CARGO_PKG_VERSION").to_owned(),
            rustc: env!("SPARSEGATE_RUSTC_VERSION").to_owned(),
            kernel_libs: kernel_libs(),
            cpu_model: cpu_model(),
            cpu_features: cpu_features(),
            kernel_paths: kernel_paths(),
            bf16_pick: super::bf16_pick::Bf16Pick::of_this_process(),
            logical_cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            threads,
            os: format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH),
            os_release: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_owned())
                .unwrap_or_else(|_| "unknown".to_owned()),
            git: git_info(dir),
            roofs: None,
            stack: BTreeMap::new(),
        }
    }

    /// The fields that must match for timings to be comparable, by name.
    pub fn lock(&self) -> BTreeMap<String, String> {
        let built_in = BTreeMap::from([
            ("tool_version", self.tool_version.clone()),
            (
                "kernel_libs",
                self.kernel_libs
                    .iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
            ("cpu_model", self.cpu_model.clone()),
            ("cpu_features", self.cpu_features.join(",")),
            (
                "kernel_paths",
                self.kernel_paths
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            ("logical_cpus", self.logical_cpus.to_string()),
            ("threads", self.threads.to_string()),
            ("os", self.os.clone()),
        ]);
        built_in
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .chain(self.stack.iter().map(|(k, v)| (format!("stack.{k}"), v.clone())))
            .collect()
    }

    /// `kernel_paths` as the runner class keys it: the bf16 entry by what the CPU offers,
    /// not by the probe's pick between its two kernels (see [`lock_diff_on`](Self::lock_diff_on)).
    fn class_kernel_paths(&self) -> String {
        self.kernel_paths
            .iter()
            .map(|(k, v)| {
                let offered = k == "bf16"
                    && super::bf16_pick::kernel_of_path(v, self.bf16_pick.as_ref()).is_some()
                    && self.cpu_features.iter().any(|f| f == "avx512bf16");
                format!("{k}={}", if offered { "avx512-bf16" } else { v })
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The runner class: what must match for golden timings to be comparable on a kind of
    /// runner, without the tool's own version (issue 22): CPU model and features, the
    /// kernels' ISA paths, logical CPUs and threads. A readable prefix (CPU model, threads)
    /// and 8 hex digits of the fields' sha256, e.g. `amd-epyc-2t-3f9a1c2b`: a name a
    /// repository can keep golden baselines under, one directory per kind of runner.
    pub fn runner_class(&self) -> String {
        use sha2::{Digest, Sha256};
        let lock = self.lock();
        let fields = [
            "cpu_model",
            "cpu_features",
            "kernel_paths",
            "logical_cpus",
            "threads",
        ];
        let mut hash = Sha256::new();
        let kernel_paths = self.class_kernel_paths();
        for f in fields {
            hash.update(f.as_bytes());
            hash.update([0]);
            let value = if f == "kernel_paths" {
                kernel_paths.as_str()
            } else {
                lock.get(f).map_or("", String::as_str)
            };
            hash.update(value.as_bytes());
            hash.update([0]);
        }
        let digest = hash.finalize();
        let mut slug = String::new();
        for c in self.cpu_model.chars().flat_map(char::to_lowercase) {
            if c.is_ascii_alphanumeric() {
                slug.push(c);
            } else if !slug.is_empty() && !slug.ends_with('-') {
                slug.push('-');
            }
            if slug.len() >= 32 {
                break;
            }
        }
        let slug = slug.trim_end_matches('-');
        let slug = if slug.is_empty() { "cpu" } else { slug };
        let hex: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
        format!("{slug}-{}t-{hex}", self.threads)
    }

    /// This machine's [`runner_class`](Self::runner_class) with `threads` kernel workers,
    /// known before anything reads the bf16 kernel pick: the class keys the bf16 path by
    /// what the CPU offers, so a gate can find its golden baselines, and pin the bf16
    /// kernel they were blessed on, before it captures the environment (issue 22).
    pub fn runner_class_here(threads: usize) -> String {
        let mut kernel_paths = BTreeMap::new();
        for (precision, path) in kernel_paths_offered() {
            kernel_paths.insert(precision, path);
        }
        Environment {
            tool_version: String::new(),
            rustc: String::new(),
            kernel_libs: BTreeMap::new(),
            cpu_model: cpu_model(),
            cpu_features: cpu_features(),
            kernel_paths,
            bf16_pick: None,
            logical_cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            threads,
            os: String::new(),
            os_release: String::new(),
            git: None,
            roofs: None,
            stack: BTreeMap::new(),
        }
        .runner_class()
    }

    /// Every lock field that differs from `baseline`, in field order.
    pub fn lock_diff(&self, baseline: &Environment) -> Vec<FieldDiff> {
        self.lock_diff_on(baseline, KernelPathsUsed::All)
    }

    /// [`lock_diff`](Self::lock_diff) for timings that depend on only some of the CPU
    /// kernels' paths (`used`): the others' `kernel_paths` entries are not compared. The bf16
    /// kernel is picked by a timing probe in each process (issue 20), and on a loaded runner
    /// bless and gate can pick differently; an fp32 slice, or a command the user times, must
    /// not be refused for it (3 of 180 golden gates were, issue 22).
    pub fn lock_diff_on(&self, baseline: &Environment, used: KernelPathsUsed) -> Vec<FieldDiff> {
        let keep = |env: &Environment| -> BTreeMap<String, String> {
            let mut lock = env.lock();
            match used {
                KernelPathsUsed::All => {}
                KernelPathsUsed::None => {
                    lock.remove("kernel_paths");
                }
                KernelPathsUsed::One(p) => {
                    let entry = env
                        .kernel_paths
                        .get(p.as_str())
                        .map(|v| format!("{}={v}", p.as_str()));
                    lock.insert("kernel_paths".into(), entry.unwrap_or_default());
                }
            }
            lock
        };
        let now = keep(self);
        let mut diff: Vec<FieldDiff> = keep(baseline)
            .into_iter()
            .filter_map(|(field, before)| {
                let current = now.get(&field).cloned().unwrap_or_default();
                (current != before).then_some(FieldDiff {
                    field,
                    baseline: before,
                    current,
                })
            })
            .collect();
        diff.extend(self.hidden_bf16_pick_diff(baseline, used));
        diff
    }

    /// `bf16_kernel`, where the bf16 pick differs from `baseline`'s although the bf16
    /// `kernel_paths` entries agree: on a CPU with AMX the dense comparator runs on tiles
    /// whichever kernel the probe picks, but the block kernels follow the pick (issue 20).
    /// Baselines recorded before the pick was (issue 22) bind nothing here.
    fn hidden_bf16_pick_diff(&self, baseline: &Environment, used: KernelPathsUsed) -> Option<FieldDiff> {
        use crate::domain::Precision;
        if !matches!(used, KernelPathsUsed::All | KernelPathsUsed::One(Precision::Bf16)) {
            return None;
        }
        let bf16 = Precision::Bf16.as_str();
        let (before, now) = (baseline.bf16_pick.as_ref()?, self.bf16_pick.as_ref()?);
        (before.kernel != now.kernel && baseline.kernel_paths.get(bf16) == self.kernel_paths.get(bf16)).then(
            || FieldDiff {
                field: BF16_KERNEL_FIELD.to_owned(),
                baseline: before.kernel.name().to_owned(),
                current: now.kernel.name().to_owned(),
            },
        )
    }
}

/// The lock difference [`Environment::lock_diff_on`] reports for a bf16 pick that the
/// `kernel_paths` entries do not show.
pub const BF16_KERNEL_FIELD: &str = "bf16_kernel";

/// Which of the CPU kernels' ISA paths a slice's timings depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelPathsUsed {
    /// Every precision's (a model with a precision policy, or unknown).
    All,
    /// One precision's: a built-in kernels slice and its dense comparator.
    One(crate::domain::Precision),
    /// None: the simulator, a user's command, imported results.
    None,
}

/// Why a pack's lock field could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LockFieldError {
    /// The program could not be started.
    #[error("could not start `{program}`: {reason}")]
    Start {
        /// The program.
        program: String,
        /// The OS error.
        reason: String,
    },
    /// It ran past the time limit and was killed.
    #[error("`{program}` did not finish within {limit_s} s")]
    Timeout {
        /// The program.
        program: String,
        /// The limit.
        limit_s: u64,
    },
    /// It exited unsuccessfully.
    #[error("`{program}` exited with {status}")]
    Failed {
        /// The program.
        program: String,
        /// Its exit status.
        status: String,
    },
}

/// Longest a lock-field command may run.
const LOCK_FIELD_TIMEOUT_S: u64 = 10;
/// Most bytes of a lock field's value kept (and of its command's stdout read).
const LOCK_FIELD_MAX: usize = 256;

/// Read one pack-defined lock field: an environment variable (`unset` when absent) or the
/// stdout of a program run without a shell in `dir`, bounded in time and size, whitespace
/// collapsed. Its stderr is discarded, and its output never appears in an error message.
pub fn read_lock_field(
    field: &crate::ingress::pack::LockField,
    dir: &Path,
) -> Result<String, LockFieldError> {
    use std::io::Read;
    if let Some(var) = &field.env {
        return Ok(std::env::var(var).map_or_else(|_| "unset".to_owned(), |v| collapse(&v)));
    }
    let argv = field.command.as_deref().unwrap_or_default();
    let Some((program, args)) = argv.split_first() else {
        return Ok(String::new());
    };
    let mut child = std::process::Command::new(program)
        .args(args)
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| LockFieldError::Start {
            program: program.clone(),
            reason: e.to_string(),
        })?;
    let stdout = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut kept = Vec::new();
        if let Some(out) = stdout {
            let mut out = out;
            let _ = out.by_ref().take(64 * 1024).read_to_end(&mut kept);
            // Drain the rest so the program never blocks on a full pipe.
            let _ = std::io::copy(&mut out, &mut std::io::sink());
        }
        kept
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(LOCK_FIELD_TIMEOUT_S);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(LockFieldError::Timeout {
                    program: program.clone(),
                    limit_s: LOCK_FIELD_TIMEOUT_S,
                });
            }
        }
    };
    let out = reader.join().unwrap_or_default();
    if !status.success() {
        return Err(LockFieldError::Failed {
            program: program.clone(),
            status: status.to_string(),
        });
    }
    Ok(collapse(&String::from_utf8_lossy(&out)))
}

/// Whitespace runs to one space, trimmed, cut to [`LOCK_FIELD_MAX`] bytes on a char boundary.
/// Whether this machine has what a pack's `requires` names (issue 25). Read from what the
/// driver exposes, never by running a program: validate stays quick and side-effect free.
pub fn requirement_met(requirement: crate::ingress::pack::Requirement) -> bool {
    match requirement {
        crate::ingress::pack::Requirement::NvidiaGpu => nvidia_gpu_present(),
    }
}

/// The NVIDIA driver lists one directory per GPU under `/proc/driver/nvidia/gpus/` and
/// makes the device node `/dev/nvidia0`; a container given a GPU sees both.
fn nvidia_gpu_present() -> bool {
    let listed = std::fs::read_dir("/proc/driver/nvidia/gpus")
        .map(|mut dir| dir.next().is_some())
        .unwrap_or(false);
    listed || Path::new("/dev/nvidia0").exists()
}

fn collapse(text: &str) -> String {
    let mut s = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if s.len() > LOCK_FIELD_MAX {
        let mut end = LOCK_FIELD_MAX;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

fn kernel_libs() -> BTreeMap<String, String> {
    env!("SPARSEGATE_KERNEL_LIBS")
        .split(',')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// The dense comparator's path for each precision on this CPU, as the kernels choose it.
fn kernel_paths() -> BTreeMap<String, String> {
    use crate::domain::Precision;
    use sparsegate_kernels::isa::{Form, Operands, isa_path};
    [
        (Precision::Fp32, Operands::F32),
        (Precision::Fp16, Operands::F16),
        (Precision::Bf16, Operands::Bf16),
        (Precision::Int8, Operands::I8),
    ]
    .into_iter()
    .map(|(p, o)| (p.as_str().to_owned(), isa_path(o, Form::Dense).name().to_owned()))
    .collect()
}

/// [`kernel_paths`] without reading the bf16 pick (which a timing probe may make): bf16's
/// entry is the tiles where AMX-BF16 is granted (the comparator runs on them whatever the
/// pick), else the first kernel the CPU offers, as [`Environment::runner_class`] keys it.
fn kernel_paths_offered() -> Vec<(String, String)> {
    use crate::domain::Precision;
    use sparsegate_kernels::isa::{Form, IsaPath, Operands, isa_path, tiles_granted};
    let bf16 = if tiles_granted(Operands::Bf16) {
        IsaPath::AmxBf16.name()
    } else {
        super::bf16_pick::offered()
            .first()
            .map_or(IsaPath::WidenF32.name(), |k| k.many_tokens_path())
    };
    vec![
        (
            Precision::Fp32.as_str().to_owned(),
            isa_path(Operands::F32, Form::Dense).name().to_owned(),
        ),
        (
            Precision::Fp16.as_str().to_owned(),
            isa_path(Operands::F16, Form::Dense).name().to_owned(),
        ),
        (Precision::Bf16.as_str().to_owned(), bf16.to_owned()),
        (
            Precision::Int8.as_str().to_owned(),
            isa_path(Operands::I8, Form::Dense).name().to_owned(),
        ),
    ]
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_owned())
}

fn cpu_features() -> Vec<String> {
    #[allow(unused_mut)]
    let mut found: Vec<String> = Vec::new();
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    {
        macro_rules! probe {
            ($($f:tt),*) => {$(
                if std::is_x86_feature_detected!($f) { found.push($f.to_owned()); }
            )*};
        }
        probe!(
            "sse4.2",
            "avx",
            "avx2",
            "fma",
            "f16c",
            "avx512f",
            "avx512bw",
            "avx512vnni",
            "avx512vbmi",
            "avx512bf16",
            "avx512fp16"
        );
        // AMX: the matrix engines change what a dense bf16/int8 comparator can reach, so a
        // baseline taken on an AMX part must not compare silently with one taken without
        // (issue 20). `is_x86_feature_detected!` has no stable AMX names yet; CPUID leaf 7
        // says it (EDX bits 22 AMX-BF16, 24 AMX-TILE, 25 AMX-INT8).
        #[cfg(target_arch = "x86_64")]
        {
            let edx = std::arch::x86_64::__cpuid_count(7, 0).edx;
            for (bit, name) in [(24, "amx-tile"), (22, "amx-bf16"), (25, "amx-int8")] {
                if edx >> bit & 1 == 1 {
                    found.push(name.to_owned());
                }
            }
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        macro_rules! probe {
            ($($f:tt),*) => {$(
                if std::arch::is_aarch64_feature_detected!($f) { found.push($f.to_owned()); }
            )*};
        }
        probe!("neon", "fp16", "sve", "sve2", "bf16", "i8mm");
    }
    found.retain(|f| cpu::allows(IsaLevel::of_feature(f)));
    found
}

fn git_info(dir: &Path) -> Option<GitInfo> {
    let repo = git2::Repository::discover(dir).ok()?;
    let head = repo.head().ok();
    let commit = head
        .as_ref()
        .and_then(|h| h.peel_to_commit().ok())
        .map_or_else(|| "unborn".to_owned(), |c| c.id().to_string());
    let branch = head
        .as_ref()
        .filter(|h| h.is_branch())
        .and_then(|h| h.shorthand().ok().map(str::to_owned));
    let mut opts = git2::StatusOptions::new();
    opts.include_untracked(true)
        .include_ignored(false)
        .exclude_submodules(true);
    let dirty = repo
        .statuses(Some(&mut opts))
        .map(|s| !s.is_empty())
        .unwrap_or(true);
    Some(GitInfo {
        commit,
        branch,
        dirty,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_outside_a_repository_records_no_git() {
        let dir = tempfile::tempdir().unwrap();
        let env = Environment::capture(2, dir.path());
        assert!(env.git.is_none());
        assert_eq!(env.threads, 2);
        assert!(!env.tool_version.is_empty());
        assert!(env.kernel_libs.contains_key("gemm"), "{:?}", env.kernel_libs);
    }

    #[test]
    fn issue_22_the_runner_class_names_the_hardware_not_the_tool_version() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = Environment::capture(2, dir.path());
        a.cpu_model = "AMD EPYC 9R14 96-Core Processor".into();
        let class = a.runner_class();
        assert!(
            class.starts_with("amd-epyc-9r14-96-core-processor-2t-"),
            "{class}"
        );
        assert!(
            class.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
            "a directory name: {class}"
        );
        let mut b = a.clone();
        b.tool_version = "9.9.9".into();
        b.git = None;
        assert_eq!(b.runner_class(), class, "a new release keeps the class");
        b.threads = 4;
        assert_ne!(b.runner_class(), class);
        let mut c = a.clone();
        c.cpu_features.push("amx_tile".into());
        assert_ne!(
            c.runner_class(),
            class,
            "same model name, other features: another class"
        );
        let mut d = a.clone();
        d.cpu_model = "  ???  ".into();
        assert!(d.runner_class().starts_with("cpu-2t-"), "{}", d.runner_class());
    }

    /// Issue 22: the bf16 kernel pick flipped between bless and gate on a loaded runner and
    /// refused golden gates of slices that never ran bf16.
    /// Issue 22: a gate finds its golden baselines (and pins their bf16 kernel) before it
    /// captures the environment, by a runner class that must be the captured one's.
    #[test]
    fn the_runner_class_before_capture_is_the_captured_one() {
        let dir = tempfile::tempdir().unwrap();
        for threads in [1, 3] {
            assert_eq!(
                Environment::runner_class_here(threads),
                Environment::capture(threads, dir.path()).runner_class()
            );
        }
    }

    #[test]
    fn a_bf16_kernel_pick_only_matters_to_slices_that_run_bf16() {
        use crate::domain::Precision;
        let dir = tempfile::tempdir().unwrap();
        let mut a = Environment::capture(2, dir.path());
        a.cpu_features = vec!["avx512f".into(), "avx512bf16".into()];
        a.kernel_paths = BTreeMap::from([
            ("bf16".into(), "avx512-bf16".into()),
            ("fp32".into(), "avx512-f32".into()),
        ]);
        let mut b = a.clone();
        b.kernel_paths.insert("bf16".into(), "avx512-bf16-shift".into());
        assert_eq!(a.lock_diff(&b).len(), 1, "the whole lock still sees it");
        assert!(
            a.lock_diff_on(&b, KernelPathsUsed::One(Precision::Fp32))
                .is_empty()
        );
        assert!(a.lock_diff_on(&b, KernelPathsUsed::None).is_empty());
        let diff = a.lock_diff_on(&b, KernelPathsUsed::One(Precision::Bf16));
        assert_eq!(diff.len(), 1);
        assert_eq!(
            (diff[0].baseline.as_str(), diff[0].current.as_str()),
            ("bf16=avx512-bf16-shift", "bf16=avx512-bf16")
        );
        // The runner class keys on what the CPU offers: the pick does not move it.
        assert_eq!(a.runner_class(), b.runner_class());
        // Without AVX-512 BF16 the shift kernel is the only one: a different class.
        let mut c = b.clone();
        c.cpu_features = vec!["avx512f".into()];
        assert_ne!(b.runner_class(), c.runner_class());
        // Widening picked, the weights widen once at many tokens (`widen-f32`): the same
        // class, and a lock difference for bf16 only.
        use super::super::bf16_pick::{Bf16Kernel, Bf16Pick, Bf16Source};
        let mut d = a.clone();
        d.kernel_paths.insert("bf16".into(), "widen-f32".into());
        d.bf16_pick = Some(Bf16Pick {
            kernel: Bf16Kernel::Widen,
            source: Bf16Source::Measured,
            offered: vec![Bf16Kernel::Dot, Bf16Kernel::Widen],
        });
        assert_eq!(a.runner_class(), d.runner_class());
        assert_eq!(a.lock_diff_on(&d, KernelPathsUsed::One(Precision::Bf16)).len(), 1);
        assert!(
            a.lock_diff_on(&d, KernelPathsUsed::One(Precision::Fp32))
                .is_empty()
        );
        // `widen-f32` without a pick is the portable path of a CPU without AVX-512.
        d.bf16_pick = None;
        assert_ne!(a.runner_class(), d.runner_class());
        // A different fp32 path is drift for an fp32 slice, not for a command.
        b.kernel_paths.insert("fp32".into(), "avx2-f32".into());
        assert_eq!(a.lock_diff_on(&b, KernelPathsUsed::One(Precision::Fp32)).len(), 1);
        assert!(a.lock_diff_on(&b, KernelPathsUsed::None).is_empty());
    }

    /// Issue 20: where the bf16 comparator runs on AMX tiles both picks record
    /// `kernel_paths.bf16 = amx-bf16`, but the block kernels still follow the pick, so a
    /// bf16 slice sees the pick itself; an fp32 slice and a baseline without a pick do not.
    #[test]
    fn a_bf16_pick_behind_the_amx_tiles_is_still_a_lock_difference_for_bf16() {
        use super::super::bf16_pick::{Bf16Kernel, Bf16Pick, Bf16Source};
        use crate::domain::Precision;
        let dir = tempfile::tempdir().unwrap();
        let mut a = Environment::capture(2, dir.path());
        a.kernel_paths = BTreeMap::from([
            ("bf16".into(), "amx-bf16".into()),
            ("fp32".into(), "avx512-f32".into()),
        ]);
        let pick = |kernel| {
            Some(Bf16Pick {
                kernel,
                source: Bf16Source::Measured,
                offered: vec![Bf16Kernel::Dot, Bf16Kernel::Widen],
            })
        };
        a.bf16_pick = pick(Bf16Kernel::Dot);
        let mut b = a.clone();
        b.bf16_pick = pick(Bf16Kernel::Widen);
        let diff = a.lock_diff_on(&b, KernelPathsUsed::One(Precision::Bf16));
        assert_eq!(diff.len(), 1, "{diff:?}");
        assert_eq!(
            (
                diff[0].field.as_str(),
                diff[0].baseline.as_str(),
                diff[0].current.as_str()
            ),
            (BF16_KERNEL_FIELD, "widen", "dot")
        );
        assert_eq!(a.lock_diff(&b).len(), 1);
        assert!(
            a.lock_diff_on(&b, KernelPathsUsed::One(Precision::Fp32))
                .is_empty()
        );
        assert!(a.lock_diff_on(&b, KernelPathsUsed::None).is_empty());
        b.bf16_pick = None;
        assert!(
            a.lock_diff_on(&b, KernelPathsUsed::One(Precision::Bf16))
                .is_empty()
        );
        // Where the paths differ already, the paths say it, once.
        b.bf16_pick = pick(Bf16Kernel::Widen);
        b.kernel_paths.insert("bf16".into(), "avx512-bf16-shift".into());
        let diff = a.lock_diff_on(&b, KernelPathsUsed::One(Precision::Bf16));
        assert_eq!(diff.len(), 1);
        assert_eq!(diff[0].field, "kernel_paths");
    }

    #[test]
    fn lock_diff_names_each_differing_field() {
        let dir = tempfile::tempdir().unwrap();
        let a = Environment::capture(2, dir.path());
        let mut b = a.clone();
        assert!(a.lock_diff(&b).is_empty());
        b.cpu_model = "Other CPU".into();
        b.threads = 7;
        b.git = Some(GitInfo {
            commit: "abc".into(),
            branch: None,
            dirty: true,
        });
        let diff = a.lock_diff(&b);
        let fields: Vec<_> = diff.iter().map(|d| d.field.as_str()).collect();
        assert_eq!(fields, ["cpu_model", "threads"]);
        assert_eq!(diff[0].baseline, "Other CPU");
    }
}

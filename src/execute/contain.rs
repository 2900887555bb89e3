//! Containment of a `command` slice's processes (issue 23): a benchmark that daemonises
//! (`setsid`, a double fork into a new session) leaves the process group the gate kills,
//! and used to survive the gate and keep writing after it.
//!
//! Design: every invocation runs under a small supervisor, this very executable's hidden
//! `__contain -- argv…` command ([`supervise`]). The supervisor
//! 1. makes itself a *child subreaper* (`prctl(PR_SET_CHILD_SUBREAPER)`): any descendant
//!    whose parent dies is re-parented to it instead of to init, whatever session or
//!    group it moved to, so every live descendant of the command stays in its tree;
//! 2. starts the command in a process group of its own (a benchmark's `kill 0` reaches its
//!    own processes, not the supervisor), stdin from `/dev/null`, stdout and stderr the
//!    gate's pipes, inherited (no copying, the bounded capture stays in the gate);
//! 3. waits for the command, then kills every remaining descendant ([`kill_descendants`]:
//!    SIGKILL each child and the group it leads, reap, repeat until no child is left) and exits
//!    with the command's status (re-raising its signal, without a second core dump);
//! 4. treats the end of its stdin as "cancel": the gate holds the write end of that pipe
//!    and closes it at a timeout or an overflow (and the kernel closes it if the gate dies,
//!    however it dies), and the supervisor then kills the command and every descendant the
//!    same way and exits.
//!
//! Why this and not the alternatives: a subreaper on the gate itself would adopt the
//! orphans of *every* child the gate runs (child runs, `git`, `ssh-keygen`, the test
//! harness's threads in unit tests) and could not tell whose they are, nor reap them
//! without stealing another thread's exit status. `PR_SET_PDEATHSIG` fires when the
//! parent *thread* exits (the gate spawns from worker threads) and is cleared by setuid
//! execs, so it holds less than a pipe whose end any death of the gate closes. A signal
//! handler for SIGTERM would need `unsafe` and a signal the gate's SIGKILL of the group
//! never sends. The gate still SIGKILLs the supervisor's group as a backstop if it does
//! not exit within [`CANCEL_GRACE`].
//!
//! Cost: one start of this executable per invocation, some 5 ms on a loaded 2-core machine
//! (`__contain -- true` against `true`); it is outside the command's own latency records,
//! which are what the gate judges.
//!
//! What it does not hold against: a command that kills the supervisor itself (`kill -9
//! $PPID`) before the cleanup; its daemons then fall back to the process-group kill. On
//! platforms other than Linux (no subreapers) and where the library runs without the
//! binary (no supervisor installed), invocations run directly in their own process
//! group, killed as a group, as before.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

/// How long the gate waits for a cancelled supervisor to kill the command's processes
/// and exit before it SIGKILLs the supervisor's group itself.
pub const CANCEL_GRACE: Duration = Duration::from_secs(2);

/// The exit status with which a supervisor reports that the command could not start; its
/// last stderr line then starts with [`START_FAILED_PREFIX`] and ends in the OS error.
pub const START_FAILED_STATUS: i32 = 127;

/// The start of the supervisor's last stderr line when the command could not start.
pub const START_FAILED_PREFIX: &str = "sparsegate __contain: cannot start the command: os error ";

/// How to start the supervisor: a program and the arguments before `argv…`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Supervisor {
    /// The program (the running sparsegate executable).
    pub program: PathBuf,
    /// The arguments before the command's argv (`["__contain", "--"]`).
    pub args: Vec<OsString>,
}

static SUPERVISOR: OnceLock<Supervisor> = OnceLock::new();

/// Run every later `command` invocation under `supervisor` (the binary installs itself
/// at start-up, as it injects the child-run launcher: the library cannot know its own
/// executable). The first call wins; on platforms without subreapers it is ignored.
pub fn contain_commands_with(supervisor: Supervisor) {
    if cfg!(target_os = "linux") {
        let _ = SUPERVISOR.set(supervisor);
    }
}

/// The installed supervisor, if any.
pub(super) fn supervisor() -> Option<&'static Supervisor> {
    SUPERVISOR.get()
}

/// The supervisor's side (`sparsegate __contain -- argv…`): run `argv` contained, and
/// return the exit status to exit with. A command killed by a signal ends this process by
/// the same signal instead of returning.
#[cfg(target_os = "linux")]
pub fn supervise(argv: &[OsString]) -> i32 {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    use std::process::{Command, Stdio};
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Set once the gate cancelled: the main thread's wait may then lose the command to
    /// the cancelling thread's reaping, which is no error to report.
    static CANCELLED: AtomicBool = AtomicBool::new(false);

    let Some((program, args)) = argv.split_first() else {
        eprintln!("sparsegate __contain: no command given");
        return 2;
    };
    // `Some(pid)`: any non-zero value sets the attribute (`None` would clear it).
    if let Err(e) = rustix::process::set_child_subreaper(Some(rustix::process::getpid())) {
        // Without it the group kill still applies; say so, once.
        eprintln!("sparsegate __contain: cannot become a child subreaper ({e}); daemons may escape");
    }
    let mut child = match Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            eprintln!("{START_FAILED_PREFIX}{}", e.raw_os_error().unwrap_or(-1));
            return START_FAILED_STATUS;
        }
    };
    // Cancel: the gate closed our stdin (timeout, overflow) or died.
    std::thread::spawn(|| {
        let mut sink = [0u8; 64];
        let mut stdin = std::io::stdin().lock();
        while matches!(std::io::Read::read(&mut stdin, &mut sink), Ok(n) if n > 0) {}
        CANCELLED.store(true, Ordering::SeqCst);
        kill_descendants();
        std::process::exit(137);
    });
    let status = child.wait();
    kill_descendants();
    if CANCELLED.load(Ordering::SeqCst) {
        return 137;
    }
    match status {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => code,
            (None, Some(signal)) => reraise(signal),
            (None, None) => 1,
        },
        Err(e) => {
            eprintln!("sparsegate __contain: lost track of the command: {e}");
            1
        }
    }
}

/// End this process by `signal`, as the command ended, without dumping a second core;
/// `128 + signal` (the shell's convention) where the signal does not end it (SIGPIPE,
/// which the Rust runtime ignores).
#[cfg(target_os = "linux")]
fn reraise(signal: i32) -> i32 {
    use rustix::process::{Resource, Rlimit, Signal, getpid, kill_process, setrlimit};
    let _ = setrlimit(
        Resource::Core,
        Rlimit {
            current: Some(0),
            maximum: None,
        },
    );
    if let Some(sig) = Signal::from_named_raw(signal) {
        let _ = kill_process(getpid(), sig);
        // A fatal signal is delivered before `kill` returns; give it a moment anyway.
        std::thread::sleep(Duration::from_millis(50));
    }
    128 + signal
}

/// SIGKILL every descendant of this (subreaper) process: each child, and the process group
/// it leads if it leads one, then reap; the grandchildren of a killed child are re-parented
/// here and go in the next round. Ends when no child is left (`ECHILD`).
#[cfg(target_os = "linux")]
fn kill_descendants() {
    use rustix::process::{Pid, Signal, WaitOptions, kill_process, kill_process_group, wait};
    loop {
        for pid in children() {
            let Some(p) = Pid::from_raw(pid) else { continue };
            // The group first: a child that leads one (the command; a daemon that made
            // itself a session leader) takes its group along, which are its own
            // descendants, killed before they can fork again. A group id is never reused
            // while the group lives, and a child that leads none makes this ESRCH.
            let _ = kill_process_group(p, Signal::KILL);
            let _ = kill_process(p, Signal::KILL);
        }
        // Reap whatever died; block for one death so the loop never spins, and see the
        // orphans of that death (re-parented to us before it became reapable) next round.
        // `wait` is `waitpid(-1)`: any child. (`waitpid(None)` is `waitpid(0)`, children in
        // our own process group only, which no daemon is.)
        match wait(WaitOptions::empty()) {
            Ok(_) => while let Ok(Some(_)) = wait(WaitOptions::NOHANG) {},
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return, // ECHILD: no child, so no descendant, is left.
        }
    }
}

/// The pids whose parent is this process: `/proc/self/task/*/children` where the kernel
/// has it (CONFIG_PROC_CHILDREN), else a scan of `/proc/*/stat`.
#[cfg(target_os = "linux")]
fn children() -> Vec<i32> {
    children_listed().unwrap_or_else(children_scanned)
}

/// This process's children from `/proc/self/task/*/children` (every thread's: an orphan
/// is re-parented to any live thread of the subreaper); `None` where the kernel has none.
#[cfg(target_os = "linux")]
fn children_listed() -> Option<Vec<i32>> {
    let mut found = Vec::new();
    let mut listed = false;
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            listed = true;
            found.extend(text.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
        }
    }
    listed.then_some(found)
}

/// This process's children from a scan of every `/proc/<pid>/stat` (their parent field).
#[cfg(target_os = "linux")]
fn children_scanned() -> Vec<i32> {
    let me = rustix::process::getpid().as_raw_nonzero().get();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<i32>().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            (parse_stat(&stat)?.ppid == me).then_some(pid)
        })
        .collect()
}

/// The fields of `/proc/<pid>/stat` the cleanup reads.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
#[derive(Debug, PartialEq, Eq)]
struct Stat {
    ppid: i32,
}

/// Parse `pid (comm) state ppid …`; `comm` may hold spaces and parentheses, so the
/// fields start after its *last* `)`.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn parse_stat(stat: &str) -> Option<Stat> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(1);
    Some(Stat {
        ppid: fields.next()?.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_23_proc_stat_is_parsed_past_a_hostile_command_name() {
        let stat = "4242 (a) b (c) S 17 4242 4242 0 -1 4194304 98 0 0";
        assert_eq!(parse_stat(stat), Some(Stat { ppid: 17 }));
        assert_eq!(parse_stat("4242 (sh) S"), None);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn issue_23_this_process_finds_its_own_children() {
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let pid = child.id() as i32;
        let (found, scanned, listed) = (children(), children_scanned(), children_listed());
        let _ = child.kill();
        let _ = child.wait();
        assert!(found.contains(&pid), "{pid} not in {found:?}");
        // Both ways agree, where the kernel lists children at all.
        assert!(scanned.contains(&pid), "{pid} not in {scanned:?}");
        if let Some(listed) = listed {
            assert!(listed.contains(&pid), "{pid} not in {listed:?}");
        }
    }
}

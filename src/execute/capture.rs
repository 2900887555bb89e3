//! Bounded capture of a child process's pipes (issue 23): an endless printer reached 4 GB
//! of gate memory in 8 s when both pipes were read whole with `read_to_end`.
//!
//! A pipe is drained on a thread of its own (so a chatty child never blocks on a full pipe
//! while the caller waits on it, and reading never delays the caller's timeout kill) into
//! one of two bounded sinks:
//! - [`Keep::Head`]: everything up to a limit, and the drain *stops* at the first byte past
//!   it, reporting [`Drained::overflowed`] at once so the caller can kill the process: stdout
//!   carries records or a reply, and a truncated stream of them would be a lie;
//! - [`Keep::Tail`]: the pipe is read to its end, keeping only the last bytes in a ring
//!   buffer: stderr is for the failure message, and its end is where the error is.
//!
//! Memory per pipe is the limit plus one read buffer ([`CHUNK`]), whatever the child prints.

use std::io::Read;
use std::sync::mpsc;

/// Bytes read per `read` call (and the only allocation besides the kept bytes).
pub const CHUNK: usize = 64 << 10;

/// What to keep of a pipe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// The first `limit` bytes; one more byte stops the drain as an overflow.
    Head {
        /// Most bytes kept.
        limit: usize,
    },
    /// The last `limit` bytes; the pipe is read to its end.
    Tail {
        /// Most bytes kept.
        limit: usize,
    },
}

/// What a drained pipe left.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Drained {
    /// The bytes kept, in stream order.
    pub bytes: Vec<u8>,
    /// Bytes read from the pipe in all (for `Head`, up to the read that overflowed).
    pub total: u64,
    /// A `Head` pipe printed more than its limit; the drain stopped there.
    pub overflowed: bool,
}

/// Drain `pipe` on a new thread; its [`Drained`] arrives on the returned channel at the
/// pipe's end (EOF or a read error) or, for [`Keep::Head`], at once when it overflows.
pub fn spawn_drain(pipe: impl Read + Send + 'static, keep: Keep) -> mpsc::Receiver<Drained> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(drain(pipe, keep));
    });
    rx
}

/// Drain a spawned child's piped stdout (its first `stdout_limit` bytes) and stderr (its
/// last `stderr_keep` bytes) on threads of their own, so that a chatty child never blocks on
/// a full pipe while it is waited for, and an endless one cannot exhaust memory (issue 23).
pub fn spawn_drains(
    child: &mut std::process::Child,
    stdout_limit: usize,
    stderr_keep: usize,
) -> (Option<mpsc::Receiver<Drained>>, Option<mpsc::Receiver<Drained>>) {
    let stdout = child
        .stdout
        .take()
        .map(|p| spawn_drain(p, Keep::Head { limit: stdout_limit }));
    let stderr = child
        .stderr
        .take()
        .map(|p| spawn_drain(p, Keep::Tail { limit: stderr_keep }));
    (stdout, stderr)
}

/// Read `pipe` into a bounded sink until its end (or, for `Head`, its overflow).
pub fn drain(mut pipe: impl Read, keep: Keep) -> Drained {
    let mut chunk = vec![0u8; CHUNK];
    let mut total = 0u64;
    match keep {
        Keep::Head { limit } => {
            let mut head = Head::new(limit);
            loop {
                match pipe.read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) => {
                        total += n as u64;
                        if head.push(&chunk[..n]).is_err() {
                            return Drained {
                                bytes: Vec::new(),
                                total,
                                overflowed: true,
                            };
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            Drained {
                bytes: head.bytes,
                total,
                overflowed: false,
            }
        }
        Keep::Tail { limit } => {
            let mut tail = Tail::new(limit);
            loop {
                match pipe.read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) => {
                        total += n as u64;
                        tail.push(&chunk[..n]);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            Drained {
                bytes: tail.into_vec(),
                total,
                overflowed: false,
            }
        }
    }
}

/// The first `limit` bytes of a stream; a push past them is refused.
#[derive(Debug)]
struct Head {
    bytes: Vec<u8>,
    limit: usize,
}

/// A push would have passed the limit.
#[derive(Debug, PartialEq, Eq)]
struct Overflow;

impl Head {
    fn new(limit: usize) -> Head {
        Head {
            bytes: Vec::new(),
            limit,
        }
    }

    fn push(&mut self, data: &[u8]) -> Result<(), Overflow> {
        let needed = self.bytes.len() + data.len();
        if needed > self.limit {
            return Err(Overflow);
        }
        if needed > self.bytes.capacity() {
            // Double as `Vec` would, but never past the limit: the bound is on capacity,
            // not just on length.
            let want = (self.bytes.capacity() * 2).max(needed).min(self.limit);
            self.bytes.reserve_exact(want - self.bytes.len());
        }
        self.bytes.extend_from_slice(data);
        Ok(())
    }
}

/// The last `limit` bytes of a stream, in a ring buffer.
#[derive(Debug)]
struct Tail {
    /// Up to `limit` bytes; once full, `start` is where the oldest byte is.
    ring: Vec<u8>,
    start: usize,
    limit: usize,
}

impl Tail {
    fn new(limit: usize) -> Tail {
        Tail {
            ring: Vec::new(),
            start: 0,
            limit,
        }
    }

    fn push(&mut self, mut data: &[u8]) {
        if self.limit == 0 {
            return;
        }
        if data.len() >= self.limit {
            // The chunk alone fills the ring: nothing older survives.
            self.ring.clear();
            self.ring.extend_from_slice(&data[data.len() - self.limit..]);
            self.start = 0;
            return;
        }
        if self.ring.len() < self.limit {
            let room = (self.limit - self.ring.len()).min(data.len());
            self.ring.extend_from_slice(&data[..room]);
            data = &data[room..];
        }
        // Full: overwrite the oldest bytes, wrapping once at most (data < limit).
        while !data.is_empty() {
            let n = (self.limit - self.start).min(data.len());
            self.ring[self.start..self.start + n].copy_from_slice(&data[..n]);
            self.start = (self.start + n) % self.limit;
            data = &data[n..];
        }
    }

    fn into_vec(mut self) -> Vec<u8> {
        self.ring.rotate_left(self.start);
        self.ring
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tail kept of `pushes`, compared with the naive end of their concatenation.
    fn check_tail(limit: usize, pushes: &[&[u8]]) {
        let mut tail = Tail::new(limit);
        let mut all = Vec::new();
        for p in pushes {
            tail.push(p);
            all.extend_from_slice(p);
        }
        let expected = all[all.len().saturating_sub(limit)..].to_vec();
        assert_eq!(tail.into_vec(), expected, "limit {limit}, pushes {pushes:?}");
    }

    #[test]
    fn issue_23_the_ring_buffer_keeps_exactly_the_end_of_the_stream() {
        check_tail(4, &[]);
        check_tail(4, &[b"ab"]);
        check_tail(4, &[b"ab", b"cd"]);
        check_tail(4, &[b"ab", b"cde"]);
        check_tail(4, &[b"abc", b"def", b"ghi"]);
        check_tail(4, &[b"abcdefgh"]);
        check_tail(4, &[b"a", b"abcdefgh", b"x"]);
        check_tail(0, &[b"abc"]);
        // Every split of a longer stream into pushes of every size.
        let stream: Vec<u8> = (0u8..=99).collect();
        for limit in [1, 3, 7, 16, 50, 99, 100, 150] {
            for size in 1..=20 {
                let pushes: Vec<&[u8]> = stream.chunks(size).collect();
                check_tail(limit, &pushes);
            }
        }
    }

    #[test]
    fn issue_23_the_head_refuses_the_first_byte_past_its_limit() {
        let mut head = Head::new(5);
        assert_eq!(head.push(b"abc"), Ok(()));
        assert_eq!(head.push(b"de"), Ok(()));
        assert_eq!(head.push(b"f"), Err(Overflow));
        assert_eq!(head.bytes, b"abcde");
        assert!(head.bytes.capacity() <= 5, "capacity {}", head.bytes.capacity());
    }

    #[test]
    fn issue_23_an_endless_stream_overflows_the_head_and_keeps_the_tail_bounded() {
        // 1 GiB of zeros, far more than either limit; the head stops at its limit, the
        // tail reads it all through a ring of 1 KiB.
        let endless = std::io::repeat(0).take(1 << 30);
        let d = drain(endless, Keep::Head { limit: 1 << 20 });
        assert!(d.overflowed);
        assert!(d.total <= (1 << 20) + CHUNK as u64, "read {} bytes", d.total);
        assert!(d.bytes.is_empty());

        let stream = std::io::repeat(b'x').take(64 << 20).chain(&b"the real error"[..]);
        let d = drain(stream, Keep::Tail { limit: 1024 });
        assert!(!d.overflowed);
        assert_eq!(d.total, (64 << 20) + 14);
        assert_eq!(d.bytes.len(), 1024);
        assert!(d.bytes.ends_with(b"the real error"));
    }

    #[test]
    fn issue_23_a_head_within_its_limit_is_kept_whole() {
        let d = drain(&b"one\ntwo\n"[..], Keep::Head { limit: 8 });
        assert_eq!(
            d,
            Drained {
                bytes: b"one\ntwo\n".to_vec(),
                total: 8,
                overflowed: false
            }
        );
        let rx = spawn_drain(&b"x"[..], Keep::Tail { limit: 8 });
        assert_eq!(rx.recv().unwrap().bytes, b"x");
    }
}

#!/usr/bin/env python3
"""Run a command with Linux refusing AMX tile data, as a kernel before 5.16 does.

    python3 benches/without_amx.py cargo test --release
    python3 benches/without_amx.py ./target/release/sparsegate gate scenarios/quickstart.yaml

A seccomp filter makes `arch_prctl(ARCH_REQ_XCOMP_PERM, …)` fail with EPERM; every other
system call passes. sparsegate's detection then skips the AMX paths (issue 20: "the AMX
paths are skipped by detection, not by a flag"), so on an AMX machine this runs the
AVX-512 comparators and kernels that a CPU without AMX would, children included (the
filter is inherited across fork and exec). Linux x86-64 only; needs no privileges.
"""

import ctypes
import os
import struct
import sys

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
EPERM = 1
AUDIT_ARCH_X86_64 = 0xC000003E
SYS_ARCH_PRCTL = 158
ARCH_REQ_XCOMP_PERM = 0x1023
# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6].
OFFSET_NR, OFFSET_ARCH, OFFSET_ARG0 = 0, 4, 16
# Classic BPF opcodes.
LD_W_ABS = 0x20
JEQ_K = 0x15
RET_K = 0x06


def insn(code, jt, jf, k):
    return struct.pack("HBBI", code, jt, jf, k)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    program = b"".join(
        [
            insn(LD_W_ABS, 0, 0, OFFSET_ARCH),
            insn(JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
            insn(RET_K, 0, 0, SECCOMP_RET_ALLOW),
            insn(LD_W_ABS, 0, 0, OFFSET_NR),
            insn(JEQ_K, 0, 3, SYS_ARCH_PRCTL),
            insn(LD_W_ABS, 0, 0, OFFSET_ARG0),
            insn(JEQ_K, 0, 1, ARCH_REQ_XCOMP_PERM),
            insn(RET_K, 0, 0, SECCOMP_RET_ERRNO | EPERM),
            insn(RET_K, 0, 0, SECCOMP_RET_ALLOW),
        ]
    )
    filt = ctypes.create_string_buffer(program)
    # struct sock_fprog { unsigned short len; struct sock_filter *filter; }
    fprog = struct.pack("HxxxxxxQ", len(program) // 8, ctypes.addressof(filt))
    fprog_buf = ctypes.create_string_buffer(fprog)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0:
        sys.exit(f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog_buf), 0, 0) != 0:
        sys.exit(f"prctl(PR_SET_SECCOMP): {os.strerror(ctypes.get_errno())}")
    os.execvp(sys.argv[1], sys.argv[1:])


if __name__ == "__main__":
    main()

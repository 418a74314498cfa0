/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The run's system call filter: everything is allowed except what Python code
 * never needs and what widens the kernel's attack surface (tracing other
 * processes, BPF, perf, keyrings, userfaultfd, io_uring, mounts, namespaces,
 * modules, clocks, reboot, ...). Denied calls fail with EPERM, so Python sees
 * a clean PermissionError rather than a dead process; clone3 fails with ENOSYS
 * so that the C library falls back to clone, whose flags the filter can see.
 * socket() and socketpair() work for AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK
 * only: any other family fails with EAFNOSUPPORT, as if the kernel had none
 * (AF_VSOCK would otherwise reach the host's services with network=no).
 *
 * The filter is for the native architecture only. System calls of another
 * ABI (i386 via int 0x80, x32 on x86-64) kill the process: libseccomp sends
 * them to the "bad architecture" action, which closes the classic bypass of a
 * deny list through a second syscall table.
 *
 * Built with libseccomp and exported as classic BPF, the form bwrap's
 * --seccomp FD reads.
 */

#include <stddef.h>

/* The syscall names denied outright, NULL-terminated (for tests and documentation). */
extern const char *const sandbox_seccomp_denied[];

/* The socket families socket() and socketpair() accept, in increasing order, terminated by -1. */
extern const int sandbox_seccomp_socket_families[];

/* The filter, built once (libseccomp) and kept as its BPF program by whoever spawns runs (the runtime). */
typedef struct SandboxSeccomp SandboxSeccomp;
int sandbox_seccomp_new(SandboxSeccomp **ret);
SandboxSeccomp *sandbox_seccomp_free(SandboxSeccomp *s);
static inline void sandbox_seccomp_freep(SandboxSeccomp **s) {
        if (*s)
                sandbox_seccomp_free(*s);
}
/* A new memfd (O_CLOEXEC) holding the BPF program, positioned at its start, for one run's bwrap --seccomp;
 * returns the fd or -errno. */
int sandbox_seccomp_export(const SandboxSeccomp *s);

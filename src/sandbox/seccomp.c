/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sched.h>
#include <seccomp.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <linux/netlink.h>
#include <unistd.h>

#include "macro.h"
#include "seccomp.h"

const char *const sandbox_seccomp_denied[] = {
        /* Looking into or steering other processes */
        "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
        /* Large kernel attack surfaces no Python program needs */
        "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
        "keyctl", "add_key", "request_key", "fanotify_init", "modify_ldt", "lookup_dcookie",
        /* Mounts, namespaces, the root */
        "mount", "umount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsmount",
        "fsconfig", "fspick", "mount_setattr", "unshare", "setns",
        /* Files by handle (the classic container escape) */
        "open_by_handle_at", "name_to_handle_at",
        /* The machine: modules, kexec, reboot, swap, accounting, quotas, logs, clocks, names */
        "init_module", "finit_module", "delete_module", "create_module", "query_module", "get_kernel_syms",
        "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd",
        "syslog", "vhangup", "iopl", "ioperm", "settimeofday", "stime", "clock_settime", "clock_adjtime",
        "adjtimex", "sethostname", "setdomainname", "nfsservctl", "uselib", "_sysctl", "vm86", "vm86old",
        NULL,
};

/* The socket families a run may use: local sockets, the network (when it has one), and netlink, which the C
 * library asks for interfaces and addresses. Kept in increasing order. */
const int sandbox_seccomp_socket_families[] = { AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, -1 };

/* Namespace flags clone() must not carry. (CLONE_NEWTIME shares its bit with the exit signal in clone().) */
static const uint64_t clone_namespace_flags[] = {
        CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET,
};

DEFINE_TRIVIAL_CLEANUP_FUNC(scmp_filter_ctx, seccomp_release);

static int deny(scmp_filter_ctx ctx, const char *name, int error) {
        int nr = seccomp_syscall_resolve_name(name);

        /* Unknown to this libseccomp, or not a system call of this architecture: nothing to deny. */
        if (nr < 0)
                return 0;
        return seccomp_rule_add(ctx, SCMP_ACT_ERRNO(error), nr, 0);
}

/*
 * socket() and socketpair() with any other family fail with EAFNOSUPPORT, as where the kernel lacks it: AF_VSOCK
 * would reach the hypervisor's services whatever network= says, AF_PACKET, AF_XDP, AF_ALG, AF_KEY, AF_TIPC, AF_RDS,
 * ... large and rarely exercised kernel code. One comparison per rule: every value below the highest allowed family
 * that is not allowed, then everything above it. The comparison is of the whole 64-bit register, so a value the
 * kernel would truncate to an allowed family (high bits set) is refused too.
 */
static int deny_socket_families(scmp_filter_ctx ctx, int nr) {
        int last = -1, r;

        for (size_t i = 0; sandbox_seccomp_socket_families[i] >= 0; i++) {
                int allowed = sandbox_seccomp_socket_families[i];

                for (int af = last + 1; af < allowed; af++) {
                        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), nr, 1,
                                             SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t) af));
                        if (r < 0)
                                return r;
                }
                last = allowed;
        }
        return seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), nr, 1,
                                SCMP_A0(SCMP_CMP_GT, (scmp_datum_t) last));
}

static int build(scmp_filter_ctx ctx) {
        int r;

        /* Another ABI's system calls are not filtered by these rules: kill instead. The whole process where
         * the kernel (and libseccomp's view of it) can; else libseccomp's default, the thread. */
        (void) seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);

        for (size_t i = 0; sandbox_seccomp_denied[i]; i++) {
                r = deny(ctx, sandbox_seccomp_denied[i], EPERM);
                if (r < 0)
                        return r;
        }

        /* clone3() passes its flags in memory, out of the filter's sight: ENOSYS makes glibc use clone(). */
        r = deny(ctx, "clone3", ENOSYS);
        if (r < 0)
                return r;
        for (size_t i = 0; i < ELEMENTSOF(clone_namespace_flags); i++) {
                r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                                     SCMP_A0(SCMP_CMP_MASKED_EQ, clone_namespace_flags[i], clone_namespace_flags[i]));
                if (r < 0)
                        return r;
        }

        r = deny_socket_families(ctx, SCMP_SYS(socket));
        if (r < 0)
                return r;
        r = deny_socket_families(ctx, SCMP_SYS(socketpair));
        if (r < 0)
                return r;
        /* Netlink only for NETLINK_ROUTE (interfaces and addresses, what getifaddrs() asks): not audit, uevents,
         * xfrm, netfilter and the other protocols behind it. */
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPROTONOSUPPORT), SCMP_SYS(socket), 2,
                             SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t) AF_NETLINK),
                             SCMP_A2(SCMP_CMP_NE, (scmp_datum_t) NETLINK_ROUTE));
        if (r < 0)
                return r;

        /*
         * personality(): only PER_LINUX (0) and the query 0xffffffff. The kernel reads the argument as 32
         * bits; a 32-bit value other than all zeros and all ones has, going round, a set bit followed by a
         * clear one. One rule per such pair of neighbours denies exactly the rest (libseccomp allows one
         * comparison per argument and rule, and no allow rule under an allow default).
         */
        for (unsigned i = 0; i < 32; i++) {
                uint64_t bit = UINT64_C(1) << i, next = UINT64_C(1) << ((i + 1) % 32);
                r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(personality), 1,
                                     SCMP_A0(SCMP_CMP_MASKED_EQ, bit | next, bit));
                if (r < 0)
                        return r;
        }
        return 0;
}

/* The filter never changes while the daemon runs: built once, each run gets a fresh copy. */
struct SandboxSeccomp {
        uint8_t *bpf;
        size_t bpf_len;
};

int sandbox_seccomp_new(SandboxSeccomp **ret) {
        _cleanup_(seccomp_releasep) scmp_filter_ctx ctx = NULL;
        _cleanup_close_ int fd = -EBADF;
        SandboxSeccomp *s;
        struct stat st;
        int r;

        ctx = seccomp_init(SCMP_ACT_ALLOW);
        if (!ctx)
                return -ENOMEM;
        r = build(ctx);
        if (r < 0)
                return r;
        fd = memfd_create("seccomp-bpf", MFD_CLOEXEC);
        if (fd < 0)
                return -errno;
        r = seccomp_export_bpf(ctx, fd);
        if (r < 0)
                return r;
        if (fstat(fd, &st) < 0)
                return -errno;
        uint8_t *b = malloc((size_t) st.st_size);
        if (!b)
                return -ENOMEM;
        if (pread(fd, b, (size_t) st.st_size, 0) != st.st_size) {
                free(b);
                return -EIO;
        }
        s = calloc(1, sizeof(*s));
        if (!s) {
                free(b);
                return -ENOMEM;
        }
        s->bpf = b;
        s->bpf_len = (size_t) st.st_size;
        *ret = s;
        return 0;
}

SandboxSeccomp *sandbox_seccomp_free(SandboxSeccomp *s) {
        if (!s)
                return NULL;
        free(s->bpf);
        free(s);
        return NULL;
}

int sandbox_seccomp_export(const SandboxSeccomp *s) {
        _cleanup_close_ int fd = -EBADF;

        fd = memfd_create("seccomp-bpf", MFD_CLOEXEC);
        if (fd < 0)
                return -errno;
        for (size_t done = 0; done < s->bpf_len;) {
                ssize_t n = pwrite(fd, s->bpf + done, s->bpf_len - done, (off_t) done);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                done += (size_t) n;
        }
        return TAKE_FD(fd);
}

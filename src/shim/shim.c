/* SPDX-License-Identifier: MIT */

/*
 * mcp-python-sandbox: the command MCP clients launch as a stdio server.
 *
 * It finds the daemon's Unix socket and pumps bytes between stdin/stdout and
 * that socket. The one exception: a tools/call line with a "files" argument,
 * whose files it opens as the user and passes on as open file descriptors
 * (files.c); every other line goes byte for byte. When no daemon
 * answers it execs "mcp-python-sandboxd --stdio" with a per-user cache, so
 * the same client configuration works on a machine without the service.
 *
 * stdout carries the daemon's bytes only; everything we say goes to stderr.
 */

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <limits.h>
#include <stdint.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sysexits.h>

#include "files.h"
#include "macro.h"

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "unknown"
#endif
#ifndef RUNSTATEDIR
#define RUNSTATEDIR "/run"
#endif
#ifndef SBINDIR
#define SBINDIR "/usr/sbin"
#endif

#define PROGRAM "mcp-python-sandbox"
#define DAEMON "mcp-python-sandboxd"
#define SOCKET_SUFFIX "/mcp-python-sandbox/mcp.sock"
#define SYSTEM_SOCKET RUNSTATEDIR SOCKET_SUFFIX
#define DEFAULT_DAEMON SBINDIR "/" DAEMON
#define DEFAULT_GROUP "mcp-sandbox"
#define ENV_SOCKET "MCP_PYTHON_SANDBOX_SOCKET"
#define ENV_DAEMON "MCP_PYTHON_SANDBOXD"

/* Bytes buffered per direction; a full queue stops reading its source. */
#define QUEUE_SIZE (64U * 1024U)
/* The longest line held back until its end is seen (for "files"); a longer one goes as it comes. */
#define HOLD_MAX (16U * 1024U * 1024U)

static const char *arg_socket = NULL;
static bool arg_fallback = true;
static bool arg_quiet = false;

static void say(const char *format, ...) _printf_(1, 2);
static void say(const char *format, ...) {
        va_list ap;

        va_start(ap, format);
        fputs(PROGRAM ": ", stderr);
        vfprintf(stderr, format, ap);
        fputc('\n', stderr);
        va_end(ap);
}

#define info(...)                               \
        do {                                    \
                if (!arg_quiet)                 \
                        say(__VA_ARGS__);       \
        } while (false)

/* ---- the pump ------------------------------------------------------------ */

typedef struct Queue {
        char data[QUEUE_SIZE];
        size_t start;   /* first byte not yet written */
        size_t end;     /* one past the last byte read */
} Queue;

static size_t queue_used(const Queue *q) {
        return q->end - q->start;
}

static bool queue_full(const Queue *q) {
        return q->start == 0 && q->end == QUEUE_SIZE;
}

/* Read once into the queue: > 0 bytes read, 0 end of file, -EAGAIN, -errno. */
static ssize_t queue_fill(Queue *q, int fd) {
        ssize_t n;

        if (q->start == q->end)
                q->start = q->end = 0;
        else if (q->end == QUEUE_SIZE) {
                memmove(q->data, q->data + q->start, queue_used(q));
                q->end -= q->start;
                q->start = 0;
        }

        n = read(fd, q->data + q->end, QUEUE_SIZE - q->end);
        if (n < 0)
                return errno == EINTR || errno == EWOULDBLOCK ? -EAGAIN : negative_errno();
        q->end += (size_t) n;
        return n;
}

/* Write once from the queue: 0 or -errno (-EAGAIN when the fd is full). */
static int queue_drain(Queue *q, int fd, size_t max) {
        ssize_t n;

        n = write(fd, q->data + q->start, MIN(queue_used(q), max));
        if (n < 0)
                return errno == EINTR || errno == EWOULDBLOCK ? -EAGAIN : negative_errno();
        q->start += (size_t) n;
        if (q->start == q->end)
                q->start = q->end = 0;
        return 0;
}

/* ---- the way to the daemon: whole lines ------------------------------------ */

/*
 * What goes from stdin to the daemon. Bytes before ready may go; after it is a line whose end has not come yet
 * (at most HOLD_MAX bytes of it: then it goes as it comes, unexamined). A line the shim rewrote goes with its
 * fds attached to its first byte (fds_at), in a sendmsg() of its own; later lines wait until they went.
 */
typedef struct Outbox {
        char *data;
        size_t allocated;
        size_t start, ready, end;       /* [start, ready) to send, [ready, end) held */
        size_t scanned;                 /* [ready, ready + scanned) has no newline */
        bool streaming;                 /* the held line went over HOLD_MAX */
        int fds[SHIM_FILES_MAX];
        size_t n_fds, fds_at;
} Outbox;

static void outbox_done(Outbox *o) {
        for (size_t i = 0; i < o->n_fds; i++)
                safe_close(o->fds[i]);
        free(o->data);
        *o = (Outbox) {};
}

/* Drop everything (the daemon stopped reading). */
static void outbox_clear(Outbox *o) {
        for (size_t i = 0; i < o->n_fds; i++)
                safe_close(o->fds[i]);
        o->n_fds = 0;
        o->start = o->ready = o->end = o->scanned = 0;
        o->streaming = false;
}

static bool outbox_can_read(const Outbox *o) {
        return o->ready - o->start < QUEUE_SIZE && o->end - o->ready <= HOLD_MAX;
}

static bool outbox_empty(const Outbox *o) {
        return o->start == o->end;
}

static bool outbox_sendable(const Outbox *o) {
        return o->start < o->ready;
}

/* Room for n more bytes at end: move the unsent bytes to the front, grow. */
static int outbox_reserve(Outbox *o, size_t n) {
        if (o->start > 0) {
                memmove(o->data, o->data + o->start, o->end - o->start);
                o->ready -= o->start;
                o->end -= o->start;
                if (o->n_fds > 0)
                        o->fds_at -= o->start;
                o->start = 0;
        }
        if (o->allocated - o->end >= n)
                return 0;
        size_t want = MAX(o->end + n, MIN(o->allocated * 2, (size_t) HOLD_MAX * 2));
        char *p = realloc(o->data, want);
        if (!p)
                return -ENOMEM;
        o->data = p;
        o->allocated = want;
        return 0;
}

/* Read once from fd: as queue_fill(). */
static ssize_t outbox_fill(Outbox *o, int fd) {
        ssize_t n;

        if (outbox_reserve(o, QUEUE_SIZE) < 0)
                return -ENOMEM;
        n = read(fd, o->data + o->end, QUEUE_SIZE);
        if (n < 0)
                return errno == EINTR || errno == EWOULDBLOCK ? -EAGAIN : negative_errno();
        o->end += (size_t) n;
        return n;
}

/* Release the lines that are complete, rewriting those with "files". eof: what is held is all there is. */
static int outbox_process(Outbox *o, bool eof) {
        while (o->n_fds == 0 && o->ready < o->end) {
                char *nl = memchr(o->data + o->ready + o->scanned, '\n', o->end - o->ready - o->scanned);

                if (!nl) {
                        if (o->streaming || eof || o->end - o->ready > HOLD_MAX) {
                                o->streaming = !eof;
                                o->ready = o->end;
                                o->scanned = 0;
                        } else
                                o->scanned = o->end - o->ready;
                        return 0;
                }

                size_t len = (size_t) (nl - (o->data + o->ready)), n_fds = 0, new_len = 0;
                _cleanup_free_ char *line = NULL;
                int fds[SHIM_FILES_MAX], r;

                o->scanned = 0;
                if (o->streaming) {
                        /* The rest of a line too long to look at. */
                        o->streaming = false;
                        o->ready += len + 1;
                        continue;
                }
                r = shim_files_rewrite(o->data + o->ready, len, &line, &new_len, fds, &n_fds);
                if (r < 0)
                        return r;
                if (r == 0) {
                        o->ready += len + 1;
                        continue;
                }
                /* Put the rewritten line in the place of the old one. */
                if (new_len > len + 1) {
                        size_t at = o->ready - o->start;
                        r = outbox_reserve(o, new_len - len - 1);
                        if (r < 0) {
                                for (size_t i = 0; i < n_fds; i++)
                                        safe_close(fds[i]);
                                return r;
                        }
                        assert(o->start == 0 && o->ready == at);
                }
                memmove(o->data + o->ready + new_len, o->data + o->ready + len + 1, o->end - o->ready - len - 1);
                o->end = o->end - len - 1 + new_len;
                memcpy(o->data + o->ready, line, new_len);
                if (n_fds > 0) {
                        memcpy(o->fds, fds, n_fds * sizeof(int));
                        o->n_fds = n_fds;
                        o->fds_at = o->ready;
                }
                o->ready += new_len;
        }
        return 0;
}

/* Send once: the bytes up to the line that carries fds, or that line's bytes with its fds. 0 or -errno. */
static int outbox_send(Outbox *o, int fd) {
        size_t until = o->n_fds > 0 && o->start < o->fds_at ? o->fds_at : o->ready;
        struct iovec iov = { .iov_base = o->data + o->start, .iov_len = until - o->start };
        union {
                struct cmsghdr h;
                char space[CMSG_SPACE(sizeof(int) * SHIM_FILES_MAX)];
        } control = {};
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
        bool with_fds = o->n_fds > 0 && o->start == o->fds_at;
        ssize_t n;

        if (with_fds) {
                mh.msg_control = &control;
                mh.msg_controllen = CMSG_SPACE(sizeof(int) * o->n_fds);
                struct cmsghdr *c = &control.h;   /* the first header: msg_control points here */
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(int) * o->n_fds);
                memcpy(CMSG_DATA(c), o->fds, sizeof(int) * o->n_fds);
        }
        n = sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (n < 0)
                return errno == EINTR || errno == EWOULDBLOCK ? -EAGAIN : negative_errno();
        if (with_fds && n > 0) {
                /* The daemon has them now (its copies); ours go. */
                for (size_t i = 0; i < o->n_fds; i++)
                        safe_close(o->fds[i]);
                o->n_fds = 0;
        }
        o->start += (size_t) n;
        if (o->start == o->end)
                o->start = o->ready = o->end = 0;
        return 0;
}

enum { POLL_STDIN, POLL_SOCKET, POLL_STDOUT, _POLL_MAX };

/*
 * stdin -> socket and socket -> stdout until the daemon closes the
 * connection. stdin/stdout stay blocking (they are shared with our parent);
 * poll() tells us when they are ready. Returns an exit status.
 */
static int pump(int fd) {
        _cleanup_(outbox_done) Outbox to_daemon = {};
        Queue to_client = {};
        bool stdin_eof = false, sent_eof = false, daemon_eof = false;
        ssize_t n;
        int r;

        for (;;) {
                struct pollfd p[_POLL_MAX];

                /* Our input is all sent: tell the daemon, keep reading its replies. */
                if (outbox_process(&to_daemon, stdin_eof) < 0) {
                        say("out of memory");
                        return EX_IOERR;
                }
                if (stdin_eof && !sent_eof && outbox_empty(&to_daemon)) {
                        if (shutdown(fd, SHUT_WR) < 0 && errno != ENOTCONN) {
                                say("shutting down the socket for writing failed: %m");
                                return EX_IOERR;
                        }
                        sent_eof = true;
                }

                if (daemon_eof && queue_used(&to_client) == 0)
                        return EX_OK;

                /* A negative fd is skipped entirely, so no POLLHUP spin on an idle side. */
                p[POLL_STDIN] = (struct pollfd) {
                        .fd = stdin_eof || !outbox_can_read(&to_daemon) ? -1 : STDIN_FILENO,
                        .events = POLLIN,
                };
                p[POLL_SOCKET] = (struct pollfd) {
                        .fd = fd,
                        .events = (daemon_eof || queue_full(&to_client) ? 0 : POLLIN) |
                                  (outbox_sendable(&to_daemon) ? POLLOUT : 0),
                };
                if (p[POLL_SOCKET].events == 0)
                        p[POLL_SOCKET].fd = -1;
                p[POLL_STDOUT] = (struct pollfd) {
                        .fd = queue_used(&to_client) > 0 ? STDOUT_FILENO : -1,
                        .events = POLLOUT,
                };

                if (poll(p, _POLL_MAX, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        say("poll() failed: %m");
                        return EX_IOERR;
                }

                if (p[POLL_STDIN].revents & POLLNVAL)
                        stdin_eof = true;
                else if (p[POLL_STDIN].revents != 0) {
                        n = outbox_fill(&to_daemon, STDIN_FILENO);
                        if (n == 0)
                                stdin_eof = true;
                        else if (n < 0 && n != -EAGAIN) {
                                errno = (int) -n;
                                say("reading stdin failed: %m");
                                return EX_IOERR;
                        }
                }

                if (p[POLL_SOCKET].revents & (POLLOUT | POLLHUP | POLLERR) &&
                    outbox_sendable(&to_daemon)) {
                        r = outbox_send(&to_daemon, fd);
                        if (r == -EPIPE || r == -ECONNRESET) {
                                /* The daemon stopped reading: drop our input, still take its replies. */
                                outbox_clear(&to_daemon);
                                stdin_eof = sent_eof = true;
                        } else if (r < 0 && r != -EAGAIN) {
                                errno = -r;
                                say("writing to the daemon socket failed: %m");
                                return EX_IOERR;
                        }
                }

                if (p[POLL_SOCKET].revents & (POLLIN | POLLHUP | POLLERR) &&
                    !daemon_eof && !queue_full(&to_client)) {
                        n = queue_fill(&to_client, fd);
                        /* A reset is how a close with our bytes still unread looks: the same end. */
                        if (n == 0 || n == -ECONNRESET)
                                daemon_eof = true;
                        else if (n < 0 && n != -EAGAIN) {
                                errno = (int) -n;
                                say("reading from the daemon socket failed: %m");
                                return EX_IOERR;
                        }
                }

                if (p[POLL_STDOUT].revents != 0) {
                        /* stdout is blocking: once poll() says writable, a pipe takes PIPE_BUF
                         * bytes without blocking, so a slow client never stops us reading stdin. */
                        r = queue_drain(&to_client, STDOUT_FILENO, PIPE_BUF);
                        if (r < 0 && r != -EAGAIN) {
                                errno = -r;
                                say("writing to stdout failed: %m");
                                return EX_IOERR;
                        }
                }
        }
}

/* ---- finding the daemon -------------------------------------------------- */

static int connect_unix(const char *path, int *ret_fd) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        _cleanup_close_ int fd = -EBADF;
        size_t l = strlen(path);
        int flags;

        if (l == 0 || l >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        memcpy(sa.sun_path, path, l);

        /* Blocking connect(): it waits for a full backlog instead of failing with EAGAIN. */
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return negative_errno();
        if (connect(fd, (struct sockaddr *) &sa, offsetof(struct sockaddr_un, sun_path) + l + 1) < 0)
                return negative_errno();

        flags = fcntl(fd, F_GETFL);
        if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
                return negative_errno();

        *ret_fd = TAKE_FD(fd);
        return 0;
}

static bool in_group(gid_t gid) {
        _cleanup_free_ gid_t *groups = NULL;
        int n;

        if (getegid() == gid)
                return true;
        n = getgroups(0, NULL);
        if (n <= 0 || !(groups = calloc(n, sizeof(gid_t))))
                return false;
        n = getgroups(n, groups);
        for (int i = 0; i < n; i++)
                if (groups[i] == gid)
                        return true;
        return false;
}

/* Say what to do about EACCES/EPERM on a socket: join the group that owns it. */
static void explain_permission(const char *path) {
        char dir[PATH_MAX], gid_str[32];
        const char *group = DEFAULT_GROUP, *slash;
        const struct group *gr;
        struct stat st;
        bool found;

        /* If the socket cannot even be looked at, its directory is what keeps us out. */
        found = stat(path, &st) >= 0;
        slash = strrchr(path, '/');
        if (!found && slash && slash > path && (size_t) (slash - path) < sizeof(dir)) {
                memcpy(dir, path, slash - path);
                dir[slash - path] = '\0';
                found = stat(dir, &st) >= 0;
        }

        if (found) {
                gr = getgrgid(st.st_gid);
                if (gr)
                        group = gr->gr_name;
                else {
                        snprintf(gid_str, sizeof(gid_str), "%u", (unsigned) st.st_gid);
                        group = gid_str;
                }

                if (in_group(st.st_gid)) {
                        say("permission denied on %s, although this process is in group %s: "
                            "check the mode of the socket and of its directory (ls -ld %s)",
                            path, group, path);
                        return;
                }
        }

        /* Joining a group is the fix only where the socket is meant to be shared with a group, and never
         * for root's group: that would hand out far more than this socket. */
        if (found && st.st_gid != 0 && S_ISSOCK(st.st_mode) &&
            (st.st_mode & (S_IRGRP | S_IWGRP)) == (S_IRGRP | S_IWGRP)) {
                say("permission denied on %s: add yourself to the group that owns it "
                    "(sudo usermod -aG %s $USER, then log in again)", path, group);
                return;
        }
        say("permission denied on %s (group %s): it is not shared with a group you could join. "
            "The service's socket is meant to be mode 0660, group " DEFAULT_GROUP " "
            "(SocketMode= and SocketGroup= in " DAEMON ".socket); with that, "
            "sudo usermod -aG " DEFAULT_GROUP " $USER, then log in again", path, group);
}

/* Append "PATH (reason)" to the list of sockets tried. */
static void tried_add(char *tried, size_t size, const char *path, int error) {
        size_t l = strlen(tried);

        if (l + 1 < size)
                snprintf(tried + l, size - l, "%s%s (%s)", l > 0 ? ", " : "", path, strerror(error));
}

/*
 * Returns 0 when connected, else -errno after saying what matters: a socket
 * that is missing or has nobody listening is quietly skipped, unless it was
 * asked for explicitly.
 */
static int try_socket(const char *path, bool explicit, char *tried, size_t tried_size, int *ret_fd) {
        int r;

        r = connect_unix(path, ret_fd);
        if (r >= 0) {
                info("connected to %s", path);
                return 0;
        }

        tried_add(tried, tried_size, path, -r);
        errno = -r;
        if (r == -EACCES || r == -EPERM)
                explain_permission(path);
        else if (explicit || (r != -ENOENT && r != -ENOTDIR && r != -ECONNREFUSED))
                say("cannot connect to %s: %m", path);
        return r;
}

/* ---- the --stdio fallback ------------------------------------------------ */

static int mkdir_p(const char *path, mode_t mode) {
        char p[PATH_MAX];
        struct stat st;

        if (strlen(path) >= sizeof(p))
                return -ENAMETOOLONG;
        strcpy(p, path);

        for (char *s = p + 1;; s++) {
                bool last = *s == '\0';

                if (*s != '/' && !last)
                        continue;
                *s = '\0';
                if (mkdir(p, mode) < 0 && errno != EEXIST)
                        return negative_errno();
                if (last)
                        break;
                *s = '/';
        }

        if (stat(p, &st) < 0)
                return negative_errno();
        return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}


/* Whether a user who shares no group with the owners can pass through every directory down to dir itself. */
static bool others_can_search(const char *dir) {
        char p[PATH_MAX];
        struct stat st;

        if (!realpath(dir, p))
                return false;
        for (char *slash = p;; slash = strchr(slash + 1, '/')) {
                char c = slash ? *slash : 0;
                if (slash)
                        *slash = 0;
                if (stat(*p ? p : "/", &st) < 0 || !(st.st_mode & S_IXOTH))
                        return false;
                if (!slash)
                        return true;
                *slash = c;
        }
}

#define ROOT_CACHE_DIR LOCALSTATEDIR "/cache/" PROGRAM "-root"

/* $XDG_CACHE_HOME/mcp-python-sandbox, else ~/.cache/mcp-python-sandbox; for root when others cannot pass
 * through its home (the usual 0700 /root, which a root daemon's sandbox uids would have to),
 * /var/cache/mcp-python-sandbox-root. */
static int user_cache_dir(char *ret, size_t size) {
        const char *base = getenv("XDG_CACHE_HOME"), *home;
        const struct passwd *pw;
        int r;

        /* The XDG spec says a relative path is to be ignored. */
        if (base && base[0] == '/')
                r = snprintf(ret, size, "%s/" PROGRAM, base);
        else {
                home = getenv("HOME");
                if (!home || home[0] != '/') {
                        pw = getpwuid(getuid());
                        if (!pw || !pw->pw_dir || pw->pw_dir[0] != '/')
                                return -ENXIO;
                        home = pw->pw_dir;
                }
                if (getuid() == 0 && !others_can_search(home))
                        r = snprintf(ret, size, "%s", ROOT_CACHE_DIR);
                else
                        r = snprintf(ret, size, "%s/.cache/" PROGRAM, home);
        }
        return r < 0 || (size_t) r >= size ? -ENAMETOOLONG : 0;
}

/* Replace ourselves with the daemon serving this one session on our stdio. */
static int exec_daemon(const char *tried) {
        char cache[PATH_MAX], cache_arg[PATH_MAX + 16];
        const char *daemon = getenv(ENV_DAEMON);
        int r;

        if (!daemon || !*daemon)
                daemon = DEFAULT_DAEMON;

        r = user_cache_dir(cache, sizeof(cache));
        if (r < 0) {
                say("cannot tell where the per-user cache goes: set XDG_CACHE_HOME or HOME");
                return r;
        }
        /* Searchable, not listable: a root daemon's sandbox uids pass through to their environments. */
        r = mkdir_p(cache, 0711);
        if (r < 0) {
                errno = -r;
                say("cannot create the cache directory %s: %m", cache);
                return r;
        }
        snprintf(cache_arg, sizeof(cache_arg), "--cache-dir=%s", cache);

        info("no daemon socket answered (tried: %s); serving this session with %s --stdio (cache: %s)",
             tried, daemon, cache);

        /* stdin, stdout and stderr go over as they are; every other fd of ours is O_CLOEXEC. */
        (void) fflush(stderr);
        execv(daemon, (char *const[]) { (char *) daemon, (char *) "--stdio", cache_arg, NULL });
        r = negative_errno();
        say("the daemon binary %s could not be started: %m%s", daemon,
            r == -ENOENT ? " (install " DAEMON ", or point $" ENV_DAEMON " at it)" : "");
        return r;
}

/* ---- command line -------------------------------------------------------- */

static void help(void) {
        printf("%1$s [OPTIONS...]\n\n"
               "The stdio MCP server of the Python sandbox service: a byte pump between\n"
               "stdin/stdout and the %2$s socket. MCP client configuration:\n"
               "  {\"command\": \"%1$s\"}\n\n"
               "Options:\n"
               "  -h --help          Show this help\n"
               "     --version       Show the package version\n"
               "     --socket=PATH   Connect to this socket, and to no other\n"
               "     --no-fallback   Fail instead of running %2$s --stdio\n"
               "  -q --quiet         Do not say on stderr which mode is used\n\n"
               "The one message looked into: a tools/call whose arguments have \"files\":\n"
               "[{\"path\": ...}]. The files are opened here, as you, and passed on open.\n\n"
               "Sockets tried, the first that answers wins:\n"
               "  1. --socket=PATH, else $%3$s (then only that one, and no fallback)\n"
               "  2. $XDG_RUNTIME_DIR%5$s (per-user service)\n"
               "  3. %6$s (system service)\n"
               "When neither 2 nor 3 answers, %7$s --stdio\n"
               "serves this one session on our stdin/stdout, with the cache in\n"
               "$XDG_CACHE_HOME/%1$s or ~/.cache/%1$s\n"
               "(for root, when others cannot search its home: " ROOT_CACHE_DIR ").\n\n"
               "Environment:\n"
               "  %3$s  Socket to connect to, as --socket\n"
               "  %4$s        Daemon run when no socket answers\n"
               "  XDG_RUNTIME_DIR, XDG_CACHE_HOME, HOME\n\n"
               "Exit status:\n"
               "  0   the session ended normally\n"
               "  64  usage error\n"
               "  69  no daemon reachable and no fallback possible\n"
               "  74  I/O error on the socket or on stdin/stdout\n"
               "  77  permission denied on the socket and no fallback possible\n\n"
               "See %1$s(1).\n",
               PROGRAM, DAEMON, ENV_SOCKET, ENV_DAEMON, SOCKET_SUFFIX, SYSTEM_SOCKET, DEFAULT_DAEMON);
}

/* Returns > 0 to go on, 0 to exit successfully, or an exit status as -status. */
static int parse_argv(int argc, char *argv[]) {
        enum {
                ARG_VERSION = 0x100,
                ARG_SOCKET,
                ARG_NO_FALLBACK,
        };
        static const struct option options[] = {
                { "help",        no_argument,       NULL, 'h'             },
                { "version",     no_argument,       NULL, ARG_VERSION     },
                { "socket",      required_argument, NULL, ARG_SOCKET      },
                { "no-fallback", no_argument,       NULL, ARG_NO_FALLBACK },
                { "quiet",       no_argument,       NULL, 'q'             },
                {}
        };
        int c;

        while ((c = getopt_long(argc, argv, "hq", options, NULL)) >= 0)
                switch (c) {
                case 'h':
                        help();
                        return 0;
                case ARG_VERSION:
                        printf(PROGRAM " " PACKAGE_VERSION "\n");
                        return 0;
                case ARG_SOCKET:
                        if (!*optarg) {
                                say("--socket needs a path");
                                return -EX_USAGE;
                        }
                        arg_socket = optarg;
                        break;
                case ARG_NO_FALLBACK:
                        arg_fallback = false;
                        break;
                case 'q':
                        arg_quiet = true;
                        break;
                case '?':
                        say("try --help");
                        return -EX_USAGE;
                default:
                        abort();
                }

        if (optind < argc) {
                say("unexpected argument '%s' (try --help)", argv[optind]);
                return -EX_USAGE;
        }
        return 1;
}

static int run(int argc, char *argv[]) {
        char tried[2048] = "", user_socket[PATH_MAX];
        const char *candidates[2], *explicit, *runtime_dir;
        _cleanup_close_ int fd = -EBADF;
        bool denied = false;
        size_t n = 0;
        int r;

        r = parse_argv(argc, argv);
        if (r <= 0)
                return -r;

        /* An explicitly named socket is the only one tried. */
        explicit = arg_socket ?: getenv(ENV_SOCKET);
        if (explicit && !*explicit)
                explicit = NULL;
        if (explicit)
                candidates[n++] = explicit;
        else {
                runtime_dir = getenv("XDG_RUNTIME_DIR");
                if (runtime_dir && runtime_dir[0] == '/') {
                        r = snprintf(user_socket, sizeof(user_socket), "%s" SOCKET_SUFFIX, runtime_dir);
                        if (r > 0 && (size_t) r < sizeof(user_socket))
                                candidates[n++] = user_socket;
                }
                candidates[n++] = SYSTEM_SOCKET;
        }

        for (size_t i = 0; i < n; i++) {
                r = try_socket(candidates[i], explicit != NULL, tried, sizeof(tried), &fd);
                if (r >= 0) {
                        /* A closed stdout or socket must be an error return, not a signal. */
                        (void) signal(SIGPIPE, SIG_IGN);
                        return pump(fd);
                }
                if (r == -EACCES || r == -EPERM)
                        denied = true;
        }

        /* A socket named explicitly is what the user wants; a private daemon with default settings is not. */
        if (explicit) {
                if (arg_fallback)
                        say("the socket named by %s was not reachable; not falling back to " DAEMON " --stdio",
                            arg_socket ? "--socket" : "$" ENV_SOCKET);
        } else if (arg_fallback)
                (void) exec_daemon(tried);
        else if (!denied)
                say("no " PROGRAM " daemon is listening (tried: %s). Enable it: "
                    "sudo systemctl enable --now " DAEMON ".socket (system) or "
                    "systemctl --user enable --now " DAEMON ".socket (per user); "
                    "or drop --no-fallback", tried);

        return denied ? EX_NOPERM : EX_UNAVAILABLE;
}

int main(int argc, char *argv[]) {
        return run(argc, argv);
}

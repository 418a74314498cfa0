/* SPDX-License-Identifier: MIT */
/*
 * The network proxy's event-loop side: the context shared by all runs, each run's proxy, and their connections from
 * the CONNECT head through the lookup (a resolver child) and the connect to the relay. Over 800 lines, one file:
 * it is one state machine whose three private structures point at each other and whose callbacks free one another.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "charge.h"
#include "fs-util.h"
#include "macro.h"
#include "proxy.h"
#include "request.h"
#include "strv.h"

#define RELAY_BUF (64 * 1024)
#define ADDRS_MAX 16
#define LOOKUPS_MAX 32                  /* resolver children at once, all users together */
#define LOOKUPS_PER_USER_MAX 8          /* and of one user's runs */
#define LOOKUP_TIMEOUT_USEC (10ULL * 1000000ULL)
#define HEAD_TIMEOUT_USEC (30ULL * 1000000ULL)
#define CONNECTIONS_TOTAL_MAX 4096

struct NetProxyContext {
        sd_event *event;
        NetAllowlist allow;
        bool allow_private;
        char *bridge;
        /* The hook for the daemon's scheduler: a registry of our own, so that proxy connections and their buffers
         * count against their own limits, never against the session limits of the manager's registry. */
        ChargeRegistry *charges;
        unsigned lookups_per_user;
        /* The resolver children not yet reaped, whether their connection still waits or is gone. */
        sd_event_source *children[LOOKUPS_MAX * 2];
        size_t n_children;
};

typedef struct Addr {
        int family;
        uint8_t bytes[16];
} Addr;

typedef enum ConnState {
        CONN_HEAD,
        CONN_RESOLVING,
        CONN_CONNECTING,
        CONN_RELAY,
} ConnState;

typedef struct Conn Conn;
struct Conn {
        NetProxy *proxy;
        Conn *next, *prev;
        ConnState state;
        int client_fd, up_fd;
        sd_event_source *client_source, *up_source, *timer;
        Charge charge_conn, charge_bytes;

        NetRequest req;
        char *c2u, *u2c;                /* client to upstream, upstream to client */
        size_t c2u_len, c2u_cap, u2c_len, u2c_cap;
        bool client_eof, up_eof, up_shut, client_shut;

        /* The lookup: a child writes the addresses to a pipe. */
        pid_t resolver;
        Charge charge_lookup;           /* CHARGE_PROXY_LOOKUPS, held while the resolver runs */
        int resolver_fd;
        sd_event_source *resolver_source;
        uint8_t rbuf[ADDRS_MAX * sizeof(Addr)];
        size_t rlen;
        Addr addrs[ADDRS_MAX];
        size_t n_addrs, next_addr;
};

struct NetProxy {
        NetProxyContext *ctx;
        uid_t uid;
        int ctl_fd, listen_fd;
        sd_event_source *ctl_source, *listen_source;
        Conn *conns;
        char **refused;
};

static const char *bridge_candidates(char *buf, size_t size) {
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        char *slash;

        /* Beside the daemon first (the build tree), then where make install puts it. */
        if (n > 0) {
                self[n] = 0;
                slash = strrchr(self, '/');
                if (slash) {
                        *slash = 0;
                        int k = snprintf(buf, size, "%s/mcp-python-sandbox-netbridge", self);
                        if (k > 0 && (size_t) k < size && access(buf, X_OK) >= 0)
                                return buf;
                }
        }
#ifdef PKGLIBEXECDIR
        snprintf(buf, size, "%s/mcp-python-sandbox-netbridge", PKGLIBEXECDIR);
        if (access(buf, X_OK) >= 0)
                return buf;
#endif
        return NULL;
}

int net_proxy_context_new(NetProxyContext **ret, sd_event *e, ChargeRegistry *charges) {
        NetProxyContext *c = calloc(1, sizeof(*c));
        char buf[PATH_MAX];
        const char *b;

        if (!c)
                return -ENOMEM;
        c->charges = charges;
        b = bridge_candidates(buf, sizeof(buf));
        if (b && !(c->bridge = strdup(b))) {
                net_proxy_context_free(c);
                return -ENOMEM;
        }
        c->event = sd_event_ref(e);
        net_proxy_context_configure(c, &(NetAllowlist) {}, false, 64);
        *ret = c;
        return 0;
}

NetProxyContext *net_proxy_context_free(NetProxyContext *c) {
        if (!c)
                return NULL;
        net_allowlist_done(&c->allow);
        for (size_t i = 0; i < c->n_children; i++) {
                pid_t pid;
                if (sd_event_source_get_child_pid(c->children[i], &pid) >= 0)
                        (void) kill(pid, SIGKILL);
                sd_event_source_disable_unref(c->children[i]);
        }
        sd_event_unref(c->event);
        free(c->bridge);
        free(c);
        return NULL;
}

void net_proxy_context_configure(NetProxyContext *c, NetAllowlist *l, bool allow_private, unsigned max_per_user) {
        net_allowlist_done(&c->allow);
        c->allow = *l;
        *l = (NetAllowlist) {};
        c->allow_private = allow_private;
        if (max_per_user == 0)
                max_per_user = 64;
        charge_registry_set_limit(c->charges, CHARGE_PROXY_CONNECTIONS, max_per_user, CONNECTIONS_TOTAL_MAX);
        /* A lookup is a process: a few of them per user, whatever the connections, so that one user's slow names
         * cannot take every resolver. */
        c->lookups_per_user = MIN(max_per_user, LOOKUPS_PER_USER_MAX);
        charge_registry_set_limit(c->charges, CHARGE_PROXY_LOOKUPS, c->lookups_per_user, LOOKUPS_MAX);
        /* Each connection buffers at most two relay buffers and a request head. */
        charge_registry_set_limit(c->charges, CHARGE_PROXY_BYTES,
                                  (uint64_t) max_per_user * (2 * RELAY_BUF + NET_REQUEST_HEAD_MAX),
                                  (uint64_t) CONNECTIONS_TOTAL_MAX * (2 * RELAY_BUF + NET_REQUEST_HEAD_MAX) / 4);
}

bool net_proxy_context_enabled(const NetProxyContext *c) {
        return c && c->allow.n > 0;
}

const char *net_proxy_context_bridge(const NetProxyContext *c) {
        return c->bridge;
}

/* ---- connections ----------------------------------------------------------- */

/* A resolver child exited and is reaped: forget it. */
static int on_resolver_exit(sd_event_source *s, const siginfo_t *si, void *userdata) {
        NetProxyContext *ctx = userdata;

        for (size_t i = 0; i < ctx->n_children; i++)
                if (ctx->children[i] == s) {
                        ctx->children[i] = ctx->children[--ctx->n_children];
                        sd_event_source_unref(s);
                        break;
                }
        return 0;
}

static bool child_running(NetProxyContext *ctx, pid_t pid) {
        pid_t p;

        for (size_t i = 0; i < ctx->n_children; i++)
                if (sd_event_source_get_child_pid(ctx->children[i], &p) >= 0 && p == pid)
                        return true;
        return false;
}

/* The lookup is over or abandoned: close the pipe; an abandoned child still running is killed (the event loop
 * reaps it). */
static void conn_stop_lookup(Conn *c, bool kill_child) {
        NetProxyContext *ctx = c->proxy->ctx;

        c->resolver_source = sd_event_source_disable_unref(c->resolver_source);
        c->resolver_fd = safe_close(c->resolver_fd);
        if (c->resolver > 0) {
                if (kill_child && child_running(ctx, c->resolver))
                        (void) kill(c->resolver, SIGKILL);
                c->resolver = 0;
        }
        charge_release(&c->charge_lookup);
}

static Conn *conn_free(Conn *c) {
        NetProxy *p;

        if (!c)
                return NULL;
        p = c->proxy;
        conn_stop_lookup(c, true);
        if (c->prev)
                c->prev->next = c->next;
        else
                p->conns = c->next;
        if (c->next)
                c->next->prev = c->prev;
        sd_event_source_disable_unref(c->client_source);
        sd_event_source_disable_unref(c->up_source);
        sd_event_source_disable_unref(c->timer);
        safe_close(c->client_fd);
        safe_close(c->up_fd);
        net_request_done(&c->req);
        free(c->c2u);
        free(c->u2c);
        charge_release(&c->charge_conn);
        charge_release(&c->charge_bytes);
        free(c);
        return NULL;
}

/* Answer the client with an error of ours and close. Best effort: the answer is small, the socket new. */
static void conn_reply_close(Conn *c, int status, const char *reason, const char *body) {
        char buf[1024];
        int n = snprintf(buf, sizeof(buf),
                         "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %zu\r\n"
                         "Connection: close\r\nProxy-Agent: mcp-python-sandboxd\r\n\r\n%s",
                         status, reason, strlen(body), body);
        if (n > 0)
                (void) send(c->client_fd, buf, MIN((size_t) n, sizeof(buf) - 1), MSG_NOSIGNAL | MSG_DONTWAIT);
        (void) shutdown(c->client_fd, SHUT_WR);
        /* Closing with unread bytes sends a reset, which can overtake the answer: read what already came (a
         * bounded amount; this never waits). */
        for (size_t total = 0; total < 256 * 1024;) {
                char junk[4096];
                ssize_t k = recv(c->client_fd, junk, sizeof(junk), MSG_DONTWAIT);
                if (k <= 0)
                        break;
                total += (size_t) k;
        }
        conn_free(c);
}

static void proxy_note_refused(NetProxy *p, const char *host, uint16_t port) {
        char s[NET_HOST_MAX + 16];

        snprintf(s, sizeof(s), strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, (unsigned) port);
        if (strv_contains(p->refused, s) || strv_length(p->refused) >= NET_PROXY_REFUSED_MAX)
                return;
        (void) strv_extend(&p->refused, s);
}

static void conn_refuse(Conn *c, const char *why) {
        char body[NET_HOST_MAX + 512];

        proxy_note_refused(c->proxy, c->req.host, c->req.port);
        snprintf(body, sizeof(body), "%s\n", why);
        conn_reply_close(c, 403, "Forbidden", body);
}

static int set_events(sd_event_source *s, uint32_t events) {
        int k;

        if (!s)
                return 0;
        if (events == 0)
                return sd_event_source_set_enabled(s, SD_EVENT_OFF);
        k = sd_event_source_set_io_events(s, events);
        if (k < 0)
                return k;
        return sd_event_source_set_enabled(s, SD_EVENT_ON);
}

/* Move bytes from fd into buf; 0 on EOF seen (*eof set), -errno on a real error. */
static int fill(int fd, char *buf, size_t *len, size_t cap, bool *eof) {
        ssize_t n;

        if (*eof || *len >= cap)
                return 0;
        n = recv(fd, buf + *len, cap - *len, MSG_DONTWAIT);
        if (n < 0)
                return errno == EAGAIN || errno == EINTR ? 0 : -errno;
        if (n == 0)
                *eof = true;
        *len += (size_t) n;
        return 0;
}

static int drain(int fd, char *buf, size_t *len) {
        ssize_t n;

        if (*len == 0)
                return 0;
        n = send(fd, buf, *len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0)
                return errno == EAGAIN || errno == EINTR ? 0 : -errno;
        memmove(buf, buf + n, *len - (size_t) n);
        *len -= (size_t) n;
        return 0;
}

static void conn_pump(Conn *c) {
        if (fill(c->client_fd, c->c2u, &c->c2u_len, c->c2u_cap, &c->client_eof) < 0 ||
            drain(c->up_fd, c->c2u, &c->c2u_len) < 0 ||
            fill(c->up_fd, c->u2c, &c->u2c_len, c->u2c_cap, &c->up_eof) < 0 ||
            drain(c->client_fd, c->u2c, &c->u2c_len) < 0) {
                conn_free(c);
                return;
        }
        if (c->client_eof && c->c2u_len == 0 && !c->up_shut) {
                (void) shutdown(c->up_fd, SHUT_WR);
                c->up_shut = true;
        }
        if (c->up_eof && c->u2c_len == 0 && !c->client_shut) {
                (void) shutdown(c->client_fd, SHUT_WR);
                c->client_shut = true;
        }
        if (c->up_shut && c->client_shut) {
                conn_free(c);
                return;
        }
        if (set_events(c->client_source, (!c->client_eof && c->c2u_len < c->c2u_cap ? EPOLLIN : 0) |
                                         (c->u2c_len > 0 ? EPOLLOUT : 0)) < 0 ||
            set_events(c->up_source, (!c->up_eof && c->u2c_len < c->u2c_cap ? EPOLLIN : 0) |
                                     (c->c2u_len > 0 ? EPOLLOUT : 0)) < 0)
                conn_free(c);
}

static int on_relay(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        conn_pump(userdata);
        return 0;
}

static void conn_connect_next(Conn *c);

static void conn_connected(Conn *c) {
        static const char established[] = "HTTP/1.1 200 Connection established\r\nProxy-Agent: mcp-python-sandboxd\r\n\r\n";
        size_t need;

        c->state = CONN_RELAY;
        c->timer = sd_event_source_disable_unref(c->timer);
        /* What goes upstream first: the rewritten head of a plain request, then what the client sent after its
         * head (the c2u buffer holds it, at its start). */
        need = c->req.connect ? 0 : c->req.upstream_len;
        if (need > 0) {
                if (c->c2u_len + need > c->c2u_cap) {
                        char *b = realloc(c->c2u, c->c2u_len + need);
                        if (!b)
                                return (void) conn_free(c);
                        c->c2u = b;
                        c->c2u_cap = c->c2u_len + need;
                }
                memmove(c->c2u + need, c->c2u, c->c2u_len);
                memcpy(c->c2u, c->req.upstream, need);
                c->c2u_len += need;
        }
        c->u2c = malloc(RELAY_BUF);
        if (!c->u2c)
                return (void) conn_free(c);
        c->u2c_cap = RELAY_BUF;
        if (c->c2u_cap < RELAY_BUF) {
                char *b = realloc(c->c2u, RELAY_BUF);
                if (!b)
                        return (void) conn_free(c);
                c->c2u = b;
                c->c2u_cap = RELAY_BUF;
        }
        if (charge_resize(&c->charge_bytes, c->c2u_cap + c->u2c_cap, true) < 0)
                return (void) conn_free(c);
        if (c->req.connect) {
                memcpy(c->u2c, established, sizeof(established) - 1);
                c->u2c_len = sizeof(established) - 1;
        }
        c->up_source = sd_event_source_disable_unref(c->up_source);
        if (sd_event_add_io(c->proxy->ctx->event, &c->client_source, c->client_fd, EPOLLIN, on_relay, c) < 0)
                return (void) conn_free(c);
        if (sd_event_add_io(c->proxy->ctx->event, &c->up_source, c->up_fd, EPOLLIN, on_relay, c) < 0)
                return (void) conn_free(c);
        conn_pump(c);
}

static int on_connect(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Conn *c = userdata;
        int err = 0;
        socklen_t len = sizeof(err);

        if (getsockopt(c->up_fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
                err = errno;
        if (err != 0) {
                c->up_source = sd_event_source_disable_unref(c->up_source);
                c->up_fd = safe_close(c->up_fd);
                conn_connect_next(c);
                return 0;
        }
        conn_connected(c);
        return 0;
}

static void conn_connect_next(Conn *c) {
        while (c->next_addr < c->n_addrs) {
                const Addr *a = &c->addrs[c->next_addr++];
                union {
                        struct sockaddr sa;
                        struct sockaddr_in in;
                        struct sockaddr_in6 in6;
                } u = {};
                socklen_t len;

                if (a->family == AF_INET) {
                        u.in.sin_family = AF_INET;
                        u.in.sin_port = htons(c->req.port);
                        memcpy(&u.in.sin_addr, a->bytes, 4);
                        len = sizeof(u.in);
                } else {
                        u.in6.sin6_family = AF_INET6;
                        u.in6.sin6_port = htons(c->req.port);
                        memcpy(&u.in6.sin6_addr, a->bytes, 16);
                        len = sizeof(u.in6);
                }
                c->up_fd = socket(a->family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
                if (c->up_fd < 0)
                        continue;
                if (connect(c->up_fd, &u.sa, len) < 0 && errno != EINPROGRESS) {
                        c->up_fd = safe_close(c->up_fd);
                        continue;
                }
                c->state = CONN_CONNECTING;
                if (sd_event_add_io(c->proxy->ctx->event, &c->up_source, c->up_fd, EPOLLOUT, on_connect, c) < 0)
                        return (void) conn_free(c);
                return;
        }
        char body[NET_HOST_MAX + 128];
        snprintf(body, sizeof(body), "the proxy could not connect to %s port %u\n", c->req.host, (unsigned) c->req.port);
        conn_reply_close(c, 502, "Bad Gateway", body);
}

static const char *class_name(const Addr *a) {
        union {
                struct sockaddr sa;
                struct sockaddr_in in;
                struct sockaddr_in6 in6;
        } u = {};

        if (a->family == AF_INET) {
                u.in.sin_family = AF_INET;
                memcpy(&u.in.sin_addr, a->bytes, 4);
        } else {
                u.in6.sin6_family = AF_INET6;
                memcpy(&u.in6.sin6_addr, a->bytes, 16);
        }
        switch (net_addr_class(&u.sa)) {
        case NET_ADDR_PUBLIC:
                return NULL;
        case NET_ADDR_PRIVATE:
                return "private";
        default:
                return "forbidden";
        }
}

/* The addresses are known: keep those the entry may lead to, then connect. */
static void conn_addresses(Conn *c, bool literal_entry) {
        const char *why = NULL;
        char shown[INET6_ADDRSTRLEN] = "";
        size_t kept = 0;

        for (size_t i = 0; i < c->n_addrs; i++) {
                const char *cls = class_name(&c->addrs[i]);
                bool ok = !cls || (streq(cls, "private") && (literal_entry || c->proxy->ctx->allow_private));
                if (ok) {
                        c->addrs[kept++] = c->addrs[i];
                        continue;
                }
                why = cls;
                (void) inet_ntop(c->addrs[i].family, c->addrs[i].bytes, shown, sizeof(shown));
        }
        c->n_addrs = kept;
        c->next_addr = 0;
        if (kept == 0 && why) {
                char body[NET_HOST_MAX + 512];
                snprintf(body, sizeof(body),
                         streq(why, "private")
                                 ? "host %s resolves to %s, a private address; the proxy reaches private addresses "
                                   "only for an allowlist entry that is that address, or with network-allow-private=yes"
                                 : "host %s resolves to %s, a loopback, link-local, multicast or reserved address, "
                                   "which the proxy never connects to whatever the administrator's network allowlist "
                                   "(network-allow) says",
                         c->req.host, shown);
                return conn_refuse(c, body);
        }
        if (kept == 0) {
                char body[NET_HOST_MAX + 128];
                snprintf(body, sizeof(body), "host %s could not be resolved\n", c->req.host);
                return conn_reply_close(c, 502, "Bad Gateway", body);
        }
        conn_connect_next(c);
}

static int on_resolver_output(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Conn *c = userdata;
        ssize_t n = read(fd, c->rbuf + c->rlen, sizeof(c->rbuf) - c->rlen);

        if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return 0;
        if (n > 0) {
                c->rlen += (size_t) n;
                if (c->rlen < sizeof(c->rbuf))
                        return 0;
        }
        /* EOF, an error or all the child may send: what came is the answer. */
        c->n_addrs = c->rlen / sizeof(Addr);
        memcpy(c->addrs, c->rbuf, c->n_addrs * sizeof(Addr));
        conn_stop_lookup(c, false);
        for (size_t i = 0; i < c->n_addrs; i++)
                if (c->addrs[i].family != AF_INET && c->addrs[i].family != AF_INET6)
                        c->n_addrs = 0;
        conn_addresses(c, false);
        return 0;
}

_noreturn_ static void resolver_child(int fd, const char *host) {
        struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_family = AF_UNSPEC }, *res = NULL;
        Addr out[ADDRS_MAX] = {};
        size_t n = 0;

        alarm(LOOKUP_TIMEOUT_USEC / 1000000ULL + 5);
        if (getaddrinfo(host, NULL, &hints, &res) == 0)
                for (struct addrinfo *ai = res; ai && n < ADDRS_MAX; ai = ai->ai_next) {
                        if (ai->ai_family == AF_INET) {
                                out[n].family = AF_INET;
                                memcpy(out[n].bytes, &((struct sockaddr_in *) ai->ai_addr)->sin_addr, 4);
                        } else if (ai->ai_family == AF_INET6) {
                                out[n].family = AF_INET6;
                                memcpy(out[n].bytes, &((struct sockaddr_in6 *) ai->ai_addr)->sin6_addr, 16);
                        } else
                                continue;
                        n++;
                }
        (void) write(fd, out, n * sizeof(Addr));
        _exit(0);
}

static void conn_resolve(Conn *c) {
        NetProxyContext *ctx = c->proxy->ctx;
        int fds[2];
        pid_t pid;

        /* The children not reaped yet are bounded too: an abandoned lookup's child is killed, but reaped later. */
        if (ctx->n_children >= ELEMENTSOF(ctx->children))
                return conn_reply_close(c, 503, "Service Unavailable",
                                        "the proxy is looking up too many names at once; try again\n");
        switch (charge_take(ctx->charges, &c->charge_lookup, c->proxy->uid, CHARGE_PROXY_LOOKUPS, 1)) {
        case 0:
                break;
        case CHARGE_QUOTA:
                return conn_reply_close(c, 503, "Service Unavailable",
                                        charge_registry_used(ctx->charges, c->proxy->uid, CHARGE_PROXY_LOOKUPS) <
                                                                ctx->lookups_per_user
                                                ? "the proxy is looking up too many names at once; try again\n"
                                                : "too many name lookups of this user at once; try again when one "
                                                  "is done\n");
        default:
                return conn_reply_close(c, 502, "Bad Gateway", "the proxy could not look the name up\n");
        }
        if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) < 0) {
                charge_release(&c->charge_lookup);
                return conn_reply_close(c, 502, "Bad Gateway", "the proxy could not look the name up\n");
        }
        pid = fork();
        if (pid < 0) {
                safe_close(fds[0]);
                safe_close(fds[1]);
                charge_release(&c->charge_lookup);
                return conn_reply_close(c, 502, "Bad Gateway", "the proxy could not look the name up\n");
        }
        if (pid == 0) {
                /* Only getaddrinfo() here: no event loop, nothing of the parent's state. Named, so that ps tells it
                 * from the daemon. */
                /* Nothing of the daemon's (other users' connections) for the length of a lookup. */
                (void) close_all_fds_except(&fds[1], 1);
                (void) prctl(PR_SET_NAME, (unsigned long) "mcp-resolve", 0, 0, 0);
                resolver_child(fds[1], c->req.host);
        }
        safe_close(fds[1]);
        c->resolver = pid;
        c->resolver_fd = fds[0];
        c->state = CONN_RESOLVING;
        if (sd_event_add_child(ctx->event, &ctx->children[ctx->n_children], pid, WEXITED, on_resolver_exit, ctx) < 0) {
                (void) kill(pid, SIGKILL);
                (void) waitpid(pid, NULL, 0);
                c->resolver = 0;
                return (void) conn_free(c);
        }
        ctx->n_children++;
        if (sd_event_add_io(ctx->event, &c->resolver_source, c->resolver_fd, EPOLLIN, on_resolver_output, c) < 0)
                return (void) conn_free(c);
}

static void conn_request(Conn *c, size_t consumed) {
        NetProxyContext *ctx = c->proxy->ctx;
        const NetAllowEntry *e;
        char body[NET_HOST_MAX + 256];

        /* The head is done with; what followed it stays at the start of c2u. */
        memmove(c->c2u, c->c2u + consumed, c->c2u_len - consumed);
        c->c2u_len -= consumed;
        c->client_source = sd_event_source_disable_unref(c->client_source);

        e = net_allowlist_match(&ctx->allow, c->req.host, c->req.port);
        if (!e) {
                snprintf(body, sizeof(body),
                         "host %s is not in the administrator's network allowlist (network-allow)%s",
                         c->req.host, c->req.port != 80 && c->req.port != 443 ? " for this port" : "");
                return conn_refuse(c, body);
        }
        if (e->literal) {
                Addr a = {};
                a.family = strchr(c->req.host, ':') ? AF_INET6 : AF_INET;
                if (inet_pton(a.family, c->req.host, a.bytes) != 1)
                        return conn_reply_close(c, 400, "Bad Request", "bad address\n");
                c->addrs[0] = a;
                c->n_addrs = 1;
                return conn_addresses(c, true);
        }
        conn_resolve(c);
}

static int on_head(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Conn *c = userdata;
        size_t consumed = 0;
        int k;

        k = fill(c->client_fd, c->c2u, &c->c2u_len, c->c2u_cap, &c->client_eof);
        if (k < 0) {
                conn_free(c);
                return 0;
        }
        k = net_request_parse(c->c2u, c->c2u_len, &c->req, &consumed);
        if (k == NET_REQUEST_MORE) {
                if (c->client_eof)
                        conn_free(c);
                return 0;
        }
        if (k == -E2BIG)
                conn_reply_close(c, 431, "Request Header Fields Too Large", "the request head is too large\n");
        else if (k == -ENOMEM)
                conn_free(c);
        else if (k < 0)
                conn_reply_close(c, 400, "Bad Request",
                                 "the proxy takes CONNECT host:port and http:// requests of HTTP/1.x\n");
        else
                conn_request(c, consumed);
        return 0;
}

static int on_conn_timeout(sd_event_source *s, uint64_t usec, void *userdata) {
        Conn *c = userdata;

        if (c->state == CONN_HEAD)
                conn_reply_close(c, 408, "Request Timeout", "the request head took too long\n");
        else
                conn_reply_close(c, 504, "Gateway Timeout", "the proxy could not reach the host in time\n");
        return 0;
}

static int on_accept(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        NetProxy *p = userdata;
        NetProxyContext *ctx = p->ctx;
        _cleanup_close_ int cfd = -EBADF;
        Conn *c;
        uint64_t now;
        int k;

        cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (cfd < 0)
                return 0;
        c = calloc(1, sizeof(*c));
        if (!c)
                return 0;
        *c = (Conn) { .proxy = p, .client_fd = TAKE_FD(cfd), .up_fd = -EBADF, .resolver_fd = -EBADF };
        c->next = p->conns;
        if (p->conns)
                p->conns->prev = c;
        p->conns = c;

        k = charge_take(ctx->charges, &c->charge_conn, p->uid, CHARGE_PROXY_CONNECTIONS, 1);
        if (k == 0)
                k = charge_take(ctx->charges, &c->charge_bytes, p->uid, CHARGE_PROXY_BYTES, NET_REQUEST_HEAD_MAX);
        if (k != 0) {
                conn_reply_close(c, 503, "Service Unavailable",
                                 "too many proxy connections of this user at once (network-max-connections-per-user)\n");
                return 0;
        }
        c->c2u = malloc(NET_REQUEST_HEAD_MAX);
        if (!c->c2u) {
                conn_free(c);
                return 0;
        }
        c->c2u_cap = NET_REQUEST_HEAD_MAX;
        (void) sd_event_now(ctx->event, CLOCK_MONOTONIC, &now);
        if (sd_event_add_io(ctx->event, &c->client_source, c->client_fd, EPOLLIN, on_head, c) < 0 ||
            sd_event_add_time(ctx->event, &c->timer, CLOCK_MONOTONIC, now + HEAD_TIMEOUT_USEC, 0, on_conn_timeout, c) < 0)
                conn_free(c);
        return 0;
}

/* ---- the run's proxy -------------------------------------------------------- */

/* The bridge sends its listening socket: take it if it is one, a TCP socket that listens. */
static int on_ctl(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        NetProxy *p = userdata;
        char data[8], cbuf[CMSG_SPACE(sizeof(int) * 4)];
        struct iovec iov = { data, sizeof(data) };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf) };
        int got = -EBADF, type = 0, domain = 0, listening = 0;
        socklen_t len;
        ssize_t n;

        n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return 0;
        for (struct cmsghdr *cm = n >= 0 ? CMSG_FIRSTHDR(&mh) : NULL; cm; cm = CMSG_NXTHDR(&mh, cm)) {
                if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                        continue;
                size_t nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                int *fds = (int *) CMSG_DATA(cm);
                for (size_t i = 0; i < nfd; i++) {
                        if (got < 0)
                                got = fds[i];
                        else
                                safe_close(fds[i]);
                }
        }
        /* One message only, whatever it held: the sandbox has no more to say. */
        p->ctl_source = sd_event_source_disable_unref(p->ctl_source);
        p->ctl_fd = safe_close(p->ctl_fd);
        if (got < 0)
                return 0;
        len = sizeof(int);
        if (getsockopt(got, SOL_SOCKET, SO_DOMAIN, &domain, &len) < 0 || (domain != AF_INET && domain != AF_INET6) ||
            (len = sizeof(int), getsockopt(got, SOL_SOCKET, SO_TYPE, &type, &len)) < 0 || type != SOCK_STREAM ||
            (len = sizeof(int), getsockopt(got, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len)) < 0 || !listening ||
            fcntl(got, F_SETFL, O_NONBLOCK) < 0) {
                safe_close(got);
                return 0;
        }
        p->listen_fd = got;
        if (sd_event_add_io(p->ctx->event, &p->listen_source, p->listen_fd, EPOLLIN, on_accept, p) < 0) {
                p->listen_fd = safe_close(p->listen_fd);
                return 0;
        }
        /* accept() failing for want of fds would wake the loop at once, again and again: at most 1000 a second. */
        (void) sd_event_source_set_ratelimit(p->listen_source, 1000000, 1000);
        return 0;
}

int net_proxy_socket_pair(int *ret_ctl_fd, int *ret_sandbox_fd) {
        int pair[2];

        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0)
                return -errno;
        /* Nothing goes to the sandbox; the daemon only receives. */
        (void) shutdown(pair[0], SHUT_WR);
        *ret_ctl_fd = pair[0];
        *ret_sandbox_fd = pair[1];
        return 0;
}

int net_proxy_adopt(NetProxyContext *c, uid_t uid, int ctl_fd, NetProxy **ret) {
        NetProxy *p;
        int k;

        p = calloc(1, sizeof(*p));
        if (!p) {
                safe_close(ctl_fd);
                return -ENOMEM;
        }
        *p = (NetProxy) { .ctx = c, .uid = uid, .ctl_fd = ctl_fd, .listen_fd = -EBADF, .refused = strv_new() };
        if (!p->refused) {
                net_proxy_free(p);
                return -ENOMEM;
        }
        k = sd_event_add_io(c->event, &p->ctl_source, p->ctl_fd, EPOLLIN, on_ctl, p);
        if (k < 0) {
                net_proxy_free(p);
                return k;
        }
        *ret = p;
        return 0;
}

int net_proxy_new(NetProxyContext *c, uid_t uid, NetProxy **ret, int *ret_sandbox_fd) {
        int ctl = -EBADF, theirs = -EBADF, k;

        if (!c->bridge)
                return -ENOENT;
        k = net_proxy_socket_pair(&ctl, &theirs);
        if (k < 0)
                return k;
        k = net_proxy_adopt(c, uid, ctl, ret);
        if (k < 0) {
                safe_close(theirs);
                return k;
        }
        *ret_sandbox_fd = theirs;
        return 0;
}

NetProxy *net_proxy_free(NetProxy *p) {
        if (!p)
                return NULL;
        while (p->conns)
                conn_free(p->conns);
        sd_event_source_disable_unref(p->ctl_source);
        sd_event_source_disable_unref(p->listen_source);
        safe_close(p->ctl_fd);
        safe_close(p->listen_fd);
        strv_free(p->refused);
        free(p);
        return NULL;
}

char *const *net_proxy_refused(const NetProxy *p) {
        return p->refused;
}

char **net_proxy_refused_take(NetProxy *p) {
        char **fresh = strv_new(), **l;

        if (!fresh)
                return NULL;
        l = p->refused;
        p->refused = fresh;
        return l;
}

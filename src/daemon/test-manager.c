/* SPDX-License-Identifier: MIT */
/*
 * The manager's connection handling: a configuration made as main() makes it (a file, then the command line),
 * the listening socket at a path in a temporary directory (--listen), and the manager's event loop run step by
 * step by the test, which is the clients. manager_run() is not called: nothing starts the runtime's probes, so
 * no script and no uv runs; what is checked is accepting, the per-uid connection cap and its refusal, the idle
 * exit, SIGHUP (a reload keeps the connections and applies the new caps) and SIGTERM.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "buf.h"
#include "daemon/manager.h"
#include "executor/process.h"
#include "fs-util.h"
#include "json-util.h"
#include "jsonrpc/jsonrpc.h"
#include "log.h"
#include "macro.h"
#include "runtime/runtime.h"
#include "scheduler/scheduler.h"
#include "time-util.h"

#define OTHER_UID 65534

static char dir[] = "/tmp/test-manager-XXXXXX";
static char sock_path[64], cache_arg[128], listen_arg[128], conf_path[128];
static char *argv[] = { (char *) "mcp-python-sandboxd", listen_arg, cache_arg, (char *) "--prestart=0",
                        (char *) "--log-level=notice", NULL };
static Config config;
static Manager *m;

/* ---- the daemon ---------------------------------------------------------- */

static void write_conf(const char *text) {
        _cleanup_free_ char *tmp = NULL;
        FILE *f;

        ck_assert_int_ge(asprintf(&tmp, "%s.new", conf_path), 0);
        f = fopen(tmp, "we");
        ck_assert_ptr_nonnull(f);
        ck_assert_int_ge(fputs(text, f), 0);
        ck_assert_int_eq(fclose(f), 0);
        ck_assert_int_eq(rename(tmp, conf_path), 0);
}

/* The daemon with that configuration file, listening. */
static void start(const char *conf) {
        const char *file = NULL;
        bool check = false;

        write_conf(conf);
        config_init(&config);
        ck_assert_int_eq(config_load(&config, conf_path), 0);
        ck_assert_int_eq(config_parse_argv(&config, (int) ELEMENTSOF(argv) - 1, argv, &file, &check), 0);
        log_set_max_level(config.log_level);
        ck_assert_int_ge(config_resolve_access(&config), 0);
        ck_assert_int_ge(config_verify(&config), 0);
        ck_assert_int_eq(manager_new(&m, &config), 0);
        m->argc = (int) ELEMENTSOF(argv) - 1;
        m->argv = argv;
        m->config_file = conf_path;
        ck_assert_int_eq(manager_listen(m), 0);
}

static void setup(void) {
        sigset_t ss;

        /* As main() has them: sd-event takes these signals through a signalfd. */
        sigemptyset(&ss);
        sigaddset(&ss, SIGCHLD);
        sigaddset(&ss, SIGTERM);
        sigaddset(&ss, SIGINT);
        sigaddset(&ss, SIGHUP);
        ck_assert_int_eq(sigprocmask(SIG_BLOCK, &ss, NULL), 0);
        signal(SIGPIPE, SIG_IGN);
        /* Not under a service manager, whatever runs the test. */
        unsetenv("NOTIFY_SOCKET");
        unsetenv("LISTEN_FDS");
        unsetenv("LISTEN_PID");

        strcpy(dir, "/tmp/test-manager-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(dir));
        /* A root daemon's sandbox uids pass through it to the cache. */
        ck_assert_int_eq(chmod(dir, 0711), 0);
        snprintf(sock_path, sizeof(sock_path), "%s/mcp.sock", dir);
        snprintf(listen_arg, sizeof(listen_arg), "--listen=%s", sock_path);
        snprintf(cache_arg, sizeof(cache_arg), "--cache-dir=%s/cache", dir);
        snprintf(conf_path, sizeof(conf_path), "%s/mcp-python-sandboxd.conf", dir);
}

static void teardown(void) {
        m = manager_free(m);
        config_done(&config);
        ck_assert_int_ge(rm_rf(dir), 0);
}

static bool exiting(void) {
        int code = 0;

        return sd_event_get_exit_code(m->event, &code) >= 0;
}

static void step(uint64_t timeout) {
        ck_assert_int_ge(sd_event_run(m->event, timeout), 0);
}

/* Run the loop until cond holds or about 5 s have passed. */
#define RUN_UNTIL(cond)                                                                                              \
        do {                                                                                                         \
                for (unsigned _i = 0; !(cond) && _i < 500; _i++)                                                     \
                        step(10 * USEC_PER_MSEC);                                                                    \
        } while (0)

static void run_for(uint64_t usec) {
        uint64_t start = now_usec();

        while (now_usec() < start + usec && !exiting())
                step(10 * USEC_PER_MSEC);
}

/* ---- clients ------------------------------------------------------------- */

typedef struct Client {
        int fd;
        Buf in;
        bool eof;
} Client;

static void client_done(Client *c) {
        c->fd = safe_close(c->fd);
        buf_clear(&c->in);
}

static Client client_connect(void) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        Client c = { .fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0) };

        ck_assert_int_ge(c.fd, 0);
        strcpy(sa.sun_path, sock_path);
        ck_assert_int_eq(connect(c.fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
        ck_assert_int_eq(fcntl(c.fd, F_SETFL, O_NONBLOCK), 0);
        return c;
}

static void send_fd(int sock, int fd) {
        char cbuf[CMSG_SPACE(sizeof(int))] = {};
        struct iovec iov = { .iov_base = (char *) "f", .iov_len = 1 };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf) };
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);

        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &fd, sizeof(int));
        (void) sendmsg(sock, &mh, MSG_NOSIGNAL);
}

static int recv_fd(int sock) {
        char cbuf[CMSG_SPACE(sizeof(int))] = {}, b;
        struct iovec iov = { .iov_base = &b, .iov_len = 1 };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf) };
        struct cmsghdr *cm;
        int fd = -EBADF;

        if (recvmsg(sock, &mh, MSG_CMSG_CLOEXEC) != 1)
                return -EBADF;
        cm = CMSG_FIRSTHDR(&mh);
        if (cm && cm->cmsg_type == SCM_RIGHTS)
                memcpy(&fd, CMSG_DATA(cm), sizeof(int));
        return fd;
}

/* A connection made by another uid (the kernel's SO_PEERCRED says so): a child takes that uid, connects, and hands
 * the socket over. */
static Client client_connect_as(uid_t uid) {
        int sv[2], status = 0;
        Client c = { .fd = -EBADF };
        pid_t pid;

        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        ck_assert_int_eq(chmod(sock_path, 0666), 0);
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                struct sockaddr_un sa = { .sun_family = AF_UNIX };
                int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

                strcpy(sa.sun_path, sock_path);
                if (fd < 0 || setgroups(0, NULL) < 0 || setresgid(uid, uid, uid) < 0 || setresuid(uid, uid, uid) < 0 ||
                    connect(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0)
                        _exit(1);
                send_fd(sv[1], fd);
                _exit(0);
        }
        safe_close(sv[1]);
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child could not connect as uid %u",
                      (unsigned) uid);
        c.fd = recv_fd(sv[0]);
        safe_close(sv[0]);
        ck_assert_int_ge(c.fd, 0);
        ck_assert_int_eq(fcntl(c.fd, F_SETFL, O_NONBLOCK), 0);
        return c;
}

static void client_send(Client *c, const char *text) {
        ck_assert_int_eq(write(c->fd, text, strlen(text)), (ssize_t) strlen(text));
}

static void client_pull(Client *c) {
        char chunk[4096];

        for (;;) {
                ssize_t n = read(c->fd, chunk, sizeof(chunk));
                if (n < 0 && errno == EAGAIN)
                        return;
                if (n <= 0) {
                        c->eof = true;
                        return;
                }
                ck_assert_int_ge(buf_append(&c->in, chunk, (size_t) n), 0);
        }
}

/* The next line the client reads, running the daemon for it; NULL at the end of the stream. */
static json_object *client_read(Client *c) {
        for (unsigned i = 0; i < 500; i++) {
                const char *nl = memchr(buf_data(&c->in), '\n', buf_size(&c->in));
                if (nl) {
                        size_t len = (size_t) (nl - buf_data(&c->in));
                        json_object *j = json_tokener_parse(strndupa(buf_data(&c->in), len));
                        ck_assert_msg(j, "not JSON: %.*s", (int) len, buf_data(&c->in));
                        buf_consume(&c->in, len + 1);
                        return j;
                }
                if (c->eof)
                        return NULL;
                client_pull(c);
                if (!c->eof && !memchr(buf_data(&c->in), '\n', buf_size(&c->in)))
                        step(10 * USEC_PER_MSEC);
        }
        ck_abort_msg("no line came");
        return NULL;
}

/* The connection is served: a ping is answered. */
static void assert_served(Client *c, int id) {
        char line[128];

        snprintf(line, sizeof(line), "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"ping\"}\n", id);
        client_send(c, line);
        _cleanup_json_ json_object *r = client_read(c);
        ck_assert_msg(r && json_object_object_get_ex(r, "result", NULL), "no answer to a ping: %s",
                      r ? json_object_to_json_string(r) : "(the connection ended)");
        int64_t got = -1;
        ck_assert(json_get_int64(r, "id", &got));
        ck_assert_int_eq(got, id);
}

/* The connection was refused: one error line that names the setting, then the end. */
static void assert_refused(Client *c, const char *setting) {
        _cleanup_json_ json_object *e = client_read(c);
        json_object *err = e ? json_get(e, "error", json_type_object) : NULL;
        int64_t code = 0;

        ck_assert_msg(err, "not refused: %s", e ? json_object_to_json_string(e) : "(the connection ended)");
        ck_assert(json_get_int64(err, "code", &code));
        ck_assert_int_eq(code, JSONRPC_SERVER_LIMIT);
        ck_assert_msg(strstr(json_get_string(err, "message"), setting), "%s", json_get_string(err, "message"));
        ck_assert_str_eq(json_get_string(json_get(err, "data", json_type_object), "setting"), setting);
        ck_assert_ptr_null(client_read(c));
}

static void initialize(Client *c) {
        client_send(c, "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
                       "\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}\n");
        _cleanup_json_ json_object *r = client_read(c);
        ck_assert_msg(r && json_object_object_get_ex(r, "result", NULL), "initialize failed");
        client_send(c, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n");
        /* A ping answered after it: the notification was read before whatever the test does next (the loop does
         * not promise which of two ready connections it serves first). */
        assert_served(c, 1000);
}

static void send_signal(int sig) {
        ck_assert_int_eq(kill(getpid(), sig), 0);
}

/* ---- accepting and the per-uid cap --------------------------------------- */

START_TEST(test_accepts) {
        start("");
        Client a = client_connect(), b = client_connect();

        assert_served(&a, 1);
        assert_served(&b, 2);
        ck_assert_uint_eq(m->n_sessions, 2);
        ck_assert_uint_eq(charge_registry_used(m->charges, geteuid(), CHARGE_CONNECTIONS), 2);

        client_done(&a);
        RUN_UNTIL(m->n_sessions == 1);
        ck_assert_uint_eq(m->n_sessions, 1);
        ck_assert_uint_eq(charge_registry_used(m->charges, geteuid(), CHARGE_CONNECTIONS), 1);
        assert_served(&b, 3);
        client_done(&b);
        RUN_UNTIL(m->n_sessions == 0);
        ck_assert_uint_eq(m->total_sessions, 2);
        ck_assert_uint_eq(charge_registry_used(m->charges, geteuid(), CHARGE_CONNECTIONS), 0);
}
END_TEST

START_TEST(test_per_uid_cap) {
        start("max-connections-per-user = 2\n");
        Client a = client_connect(), b = client_connect(), c = client_connect();

        assert_served(&a, 1);
        assert_served(&b, 2);
        /* The third of the same uid: refused, with the reason. */
        assert_refused(&c, "max-connections-per-user");
        ck_assert_uint_eq(m->n_sessions, 2);
        ck_assert_uint_eq(charge_registry_used(m->charges, geteuid(), CHARGE_CONNECTIONS), 2);
        /* The two it holds are still served. */
        assert_served(&a, 3);
        assert_served(&b, 4);

        /* One closed: room for one more, and no more than that. */
        client_done(&a);
        RUN_UNTIL(m->n_sessions == 1);
        Client d = client_connect(), e = client_connect();
        assert_served(&d, 5);
        assert_refused(&e, "max-connections-per-user");

        client_done(&b);
        client_done(&c);
        client_done(&d);
        client_done(&e);
}
END_TEST

/* One uid at its cap takes nothing from another. */
START_TEST(test_per_uid_cap_is_per_uid) {
        if (geteuid() != 0) {
                /* Connecting as another uid takes root; the cap itself is checked above. */
                fprintf(stderr, "test_per_uid_cap_is_per_uid: not root, not checked\n");
                return;
        }
        start("max-connections-per-user = 1\n");
        Client a = client_connect(), b = client_connect();

        assert_served(&a, 1);
        assert_refused(&b, "max-connections-per-user");

        Client o = client_connect_as(OTHER_UID);
        assert_served(&o, 2);
        ck_assert_uint_eq(m->n_sessions, 2);
        ck_assert_uint_eq(charge_registry_used(m->charges, OTHER_UID, CHARGE_CONNECTIONS), 1);
        ck_assert_uint_eq(charge_registry_used(m->charges, geteuid(), CHARGE_CONNECTIONS), 1);
        /* Its own cap holds for it too. */
        Client o2 = client_connect_as(OTHER_UID);
        assert_refused(&o2, "max-connections-per-user");

        client_done(&a);
        client_done(&b);
        client_done(&o);
        client_done(&o2);
}
END_TEST

START_TEST(test_global_cap) {
        start("max-connections = 2\nmax-connections-per-user = 2\n");
        Client a = client_connect(), b = client_connect(), c = client_connect();

        assert_served(&a, 1);
        assert_served(&b, 2);
        assert_refused(&c, "max-connections");
        ck_assert_uint_eq(m->n_sessions, 2);
        client_done(&a);
        client_done(&b);
        client_done(&c);
}
END_TEST

/* allowed-users: anyone else is closed on without a word, and holds nothing. */
START_TEST(test_allowed_users) {
        char conf[64];

        /* Somebody else: as root, the uid the test can also connect as. */
        snprintf(conf, sizeof(conf), "allowed-users = %u\n", geteuid() == OTHER_UID ? 4242u : (unsigned) OTHER_UID);
        start(conf);
        Client a = client_connect();

        ck_assert_ptr_null(client_read(&a));
        ck_assert_uint_eq(m->n_sessions, 0);
        ck_assert_uint_eq(m->total_sessions, 0);
        ck_assert_uint_eq(charge_registry_used(m->charges, geteuid(), CHARGE_CONNECTIONS), 0);
        if (geteuid() == 0) {
                /* The one listed is served. */
                Client o = client_connect_as(OTHER_UID);
                assert_served(&o, 1);
                ck_assert_uint_eq(m->n_sessions, 1);
                client_done(&o);
        }
        client_done(&a);
}
END_TEST

/* ---- idle exit ----------------------------------------------------------- */

START_TEST(test_idle_exit) {
        start("exit-idle-time = 100ms\n");
        Client a = client_connect();
        SchedTicket t = {};

        assert_served(&a, 1);
        /* A connection, however quiet, keeps the daemon. */
        run_for(300 * USEC_PER_MSEC);
        ck_assert(!exiting());

        /* Work still running keeps it too, after the last connection is gone. */
        ck_assert_int_eq(scheduler_try_acquire(runtime_scheduler(m->runtime), &t, SCHED_RUN, 1000), 0);
        ck_assert(!runtime_is_idle(m->runtime));
        client_done(&a);
        RUN_UNTIL(m->n_sessions == 0);
        run_for(300 * USEC_PER_MSEC);
        ck_assert(!exiting());

        /* Nothing left: it exits. */
        scheduler_release(&t);
        RUN_UNTIL(exiting());
        ck_assert(exiting());
        int code = -1;
        ck_assert_int_eq(sd_event_get_exit_code(m->event, &code), 0);
        ck_assert_int_eq(code, 0);
}
END_TEST

START_TEST(test_no_idle_exit_when_off) {
        start("exit-idle-time = 0\n");
        Client a = client_connect();

        assert_served(&a, 1);
        client_done(&a);
        RUN_UNTIL(m->n_sessions == 0);
        run_for(300 * USEC_PER_MSEC);
        ck_assert(!exiting());
}
END_TEST

/* ---- signals ------------------------------------------------------------- */

START_TEST(test_reload_keeps_connections) {
        start("max-connections-per-user = 1\n");
        Client a = client_connect(), b = client_connect();
        bool told = false;

        initialize(&a);
        assert_refused(&b, "max-connections-per-user");
        client_done(&b);

        /* A new cap, and a default timeout the tools' descriptions state. */
        write_conf("max-connections-per-user = 3\ndefault-timeout = 77\n");
        send_signal(SIGHUP);
        RUN_UNTIL(config.max_connections_per_user == 3);
        ck_assert_uint_eq(config.max_connections_per_user, 3);
        ck_assert_uint_eq(config.default_timeout_usec, 77 * USEC_PER_SEC);

        /* The connection stays, and is told the tools changed. */
        ck_assert_uint_eq(m->n_sessions, 1);
        for (unsigned i = 0; i < 4 && !told; i++) {
                _cleanup_json_ json_object *n = client_read(&a);
                ck_assert_ptr_nonnull(n);
                told = streq(strempty(json_get_string(n, "method")), "notifications/tools/list_changed");
        }
        ck_assert(told);
        assert_served(&a, 2);
        /* The new cap holds. */
        Client c = client_connect(), d = client_connect(), e = client_connect();
        assert_served(&c, 3);
        assert_served(&d, 4);
        assert_refused(&e, "max-connections-per-user");
        ck_assert_uint_eq(m->n_sessions, 3);

        /* A configuration with errors is not applied: the running one stays, and so do the connections. */
        write_conf("max-connections-per-user = many\n");
        send_signal(SIGHUP);
        run_for(100 * USEC_PER_MSEC);
        ck_assert_uint_eq(config.max_connections_per_user, 3);
        ck_assert_uint_eq(m->n_sessions, 3);
        assert_served(&a, 5);

        client_done(&a);
        client_done(&c);
        client_done(&d);
        client_done(&e);
}
END_TEST

START_TEST(test_sigterm) {
        start("");
        Client a = client_connect();

        assert_served(&a, 1);
        send_signal(SIGTERM);
        /* An idle connection is closed at once, and then the daemon exits; no new connection is served. */
        RUN_UNTIL(exiting());
        ck_assert(exiting());
        ck_assert_uint_eq(m->n_sessions, 0);
        ck_assert_ptr_null(client_read(&a));
        client_done(&a);
}
END_TEST

static Suite *manager_suite(void) {
        Suite *s = suite_create("manager");
        TCase *tc;

        tc = tcase_create("connections");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 30);
        tcase_add_test(tc, test_accepts);
        tcase_add_test(tc, test_per_uid_cap);
        tcase_add_test(tc, test_per_uid_cap_is_per_uid);
        tcase_add_test(tc, test_global_cap);
        tcase_add_test(tc, test_allowed_users);
        suite_add_tcase(s, tc);

        tc = tcase_create("lifetime");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 30);
        tcase_add_test(tc, test_idle_exit);
        tcase_add_test(tc, test_no_idle_exit_when_off);
        tcase_add_test(tc, test_reload_keeps_connections);
        tcase_add_test(tc, test_sigterm);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(manager_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

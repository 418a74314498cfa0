/* SPDX-License-Identifier: MIT */
/*
 * The session's state machine, driven through a socketpair: the test is the client at one end, the session
 * serves the other on an sd-event loop the test runs step by step. The tools are fakes that answer now, later
 * (when the test says) or never (until cancelled), so what is checked is the connection itself: the handshake,
 * framing and its size cap, the deadlines, backpressure and the bound on queued replies, and what closing does
 * to calls in flight; also the stdio shapes (two pipes, a regular file as input).
 *
 * Over 800 lines: one state machine, one suite, its cases sharing the fake client and tools above them.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "buf.h"
#include "charge.h"
#include "json-util.h"
#include "jsonrpc/jsonrpc.h"
#include "macro.h"
#include "mcp/mcp.h"
#include "session/session.h"
#include "strv.h"

#define MAX_HELD 64

static sd_event *event;
static Session *session;
static int client = -EBADF;
static int client_out = -EBADF;         /* where the client writes, when not to client (pipes) */
static Buf inbox;                       /* what the client read and did not take yet */
static bool client_eof;
static bool closed;                     /* the closed callback ran */
static ChargeRegistry *charges;

static unsigned n_started;              /* tool calls begun, all tools together */
static unsigned n_cancelled;            /* cancel hooks run */
static ToolCall *held[MAX_HELD];        /* calls of "later" and "never", until the test lets them go */
static size_t n_held;

/* ---- the fake tools ------------------------------------------------------ */

static int now_call(ToolCall *c, json_object *args) {
        n_started++;
        tool_call_finish_text(c, false, "%s", json_get_string(args, "text") ?: "now");
        return 0;
}

/* Answers with as many bytes as it is asked for. */
static int big_call(ToolCall *c, json_object *args) {
        int64_t n = 0;
        _cleanup_free_ char *text = NULL;

        n_started++;
        ck_assert(json_get_int64(args, "bytes", &n));
        text = malloc((size_t) n + 1);
        ck_assert_ptr_nonnull(text);
        memset(text, 'b', (size_t) n);
        text[n] = 0;
        tool_call_finish_text(c, false, "%s", text);
        return 0;
}

static void on_cancel(ToolCall *c, void *userdata) {
        ck_assert_ptr_eq(userdata, &n_cancelled);
        ck_assert(!tool_call_is_live(c));
        n_cancelled++;
}

/* Held until the test finishes it (or it is cancelled). */
static int later_call(ToolCall *c, json_object *args) {
        n_started++;
        ck_assert_uint_lt(n_held, MAX_HELD);
        tool_call_set_cancel(c, on_cancel, &n_cancelled);
        held[n_held++] = tool_call_ref(c);
        return 0;
}

#define ANY_ARGS "{\"type\":\"object\"}"

static const Tool tool_now = { .name = "now", .description = "Answers at once.", .input_schema = ANY_ARGS,
                               .call = now_call };
static const Tool tool_big = { .name = "big", .description = "Answers with many bytes.", .input_schema = ANY_ARGS,
                               .call = big_call };
static const Tool tool_later = { .name = "later", .description = "Answers when the test says.",
                                 .input_schema = ANY_ARGS, .call = later_call };
static const Tool tool_never = { .name = "never", .description = "Never answers.", .input_schema = ANY_ARGS,
                                 .call = later_call };
static const Tool *const tools[] = { &tool_now, &tool_big, &tool_later, &tool_never, NULL };

static const McpServer server = {
        .name = "test-session",
        .version = "1",
        .tools = tools,
        .page_size = 100,
        .max_calls = MAX_HELD,
        .max_depth = 64,
        .tools_ttl_ms = 1000,
};

/* ---- the connection ------------------------------------------------------ */

static void on_closed(Session *s, void *userdata) {
        ck_assert_ptr_eq(s, session);
        ck_assert_ptr_eq(userdata, &closed);
        ck_assert(!closed);
        closed = true;
        /* The owner frees it, as the manager does. */
        session = session_free(s);
}

static SessionLimits default_limits(void) {
        return (SessionLimits) {
                .max_message_size = 4096,
                .output_high_water = 64 * 1024,
                .max_reply_buffer = 256 * 1024,
                .charges = charges,
        };
}

static void start(const SessionLimits *limits) {
        int sv[2];

        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        client = sv[0];
        ck_assert_int_eq(fcntl(client, F_SETFL, O_NONBLOCK), 0);
        ck_assert_int_eq(session_new(&session, event, 1, sv[1], sv[1], &server, limits, on_closed, &closed), 0);
}

/* As --stdio serves a client: input and output are two pipes. in_fd: the session's input, when not a pipe. */
static void start_pipes(const SessionLimits *limits, int in_fd) {
        int in[2] = { -EBADF, -EBADF }, out[2];

        if (in_fd < 0) {
                ck_assert_int_eq(pipe2(in, O_CLOEXEC), 0);
                client_out = in[1];
                in_fd = in[0];
        }
        ck_assert_int_eq(pipe2(out, O_CLOEXEC), 0);
        client = out[0];
        ck_assert_int_eq(fcntl(client, F_SETFL, O_NONBLOCK), 0);
        ck_assert_int_eq(session_new(&session, event, 1, in_fd, out[1], &server, limits, on_closed, &closed), 0);
}

static void setup(void) {
        ck_assert_int_ge(sd_event_new(&event), 0);
        ck_assert_int_eq(charge_registry_new(&charges), 0);
        buf_clear(&inbox);
        client_eof = closed = false;
        n_started = n_cancelled = 0;
        n_held = 0;
}

static void teardown(void) {
        session = session_free(session);
        for (size_t i = 0; i < n_held; i++)
                tool_call_unref(held[i]);
        n_held = 0;
        client = safe_close(client);
        client_out = safe_close(client_out);
        buf_clear(&inbox);
        /* Every charge was given back. */
        ck_assert_uint_eq(charge_registry_n_users(charges), 0);
        charges = charge_registry_free(charges);
        event = sd_event_unref(event);
}

/* One step of the loop: dispatch what is due, waiting at most timeout. */
static void step(uint64_t timeout) {
        ck_assert_int_ge(sd_event_run(event, timeout), 0);
}

/* Run the loop until nothing more is ready now. */
static void settle(void) {
        for (unsigned i = 0; i < 10000; i++)
                if (sd_event_run(event, 0) == 0)
                        return;
        ck_abort_msg("the loop never settled");
}

/* Run the loop for about usec, whatever happens. */
static void run_for(uint64_t usec) {
        uint64_t start = 0, now = 0;

        ck_assert_int_ge(sd_event_now(event, CLOCK_MONOTONIC, &start), 0);
        do {
                step(10 * USEC_PER_MSEC);
                ck_assert_int_ge(sd_event_now(event, CLOCK_MONOTONIC, &now), 0);
        } while (now < start + usec);
}

static void client_send(const char *text) {
        size_t n = strlen(text);

        while (n > 0) {
                ssize_t k = write(client_out >= 0 ? client_out : client, text, n);
                if (k < 0 && errno == EAGAIN) {
                        step(10 * USEC_PER_MSEC);
                        continue;
                }
                ck_assert_int_gt(k, 0);
                text += k;
                n -= (size_t) k;
        }
}

static void client_sendf(const char *format, ...) _printf_(1, 2);
static void client_sendf(const char *format, ...) {
        _cleanup_free_ char *line = NULL;
        va_list ap;
        int r;

        va_start(ap, format);
        r = vasprintf(&line, format, ap);
        va_end(ap);
        ck_assert_int_ge(r, 0);
        client_send(line);
}

/* Read what the session wrote so far, without waiting. */
static void client_pull(void) {
        char chunk[64 * 1024];

        for (;;) {
                ssize_t n = read(client, chunk, sizeof(chunk));
                if (n < 0 && errno == EAGAIN)
                        return;
                /* The session closed with a request of ours unread: the end, for us. */
                if (n < 0 && errno == ECONNRESET)
                        n = 0;
                ck_assert_int_ge(n, 0);
                if (n == 0) {
                        client_eof = true;
                        return;
                }
                ck_assert_int_ge(buf_append(&inbox, chunk, (size_t) n), 0);
        }
}

/* The next line the client reads, parsed, running the loop for it; NULL at the end of the stream (or after about
 * 3 s without one). */
static json_object *client_read(void) {
        for (unsigned i = 0; i < 300; i++) {
                const char *nl = memchr(buf_data(&inbox), '\n', buf_size(&inbox));
                if (nl) {
                        size_t len = (size_t) (nl - (const char *) buf_data(&inbox));
                        json_object *m = json_tokener_parse(strndupa(buf_data(&inbox), len));
                        ck_assert_msg(m, "not JSON: %.*s", (int) len, (const char *) buf_data(&inbox));
                        buf_consume(&inbox, len + 1);
                        return m;
                }
                if (client_eof)
                        return NULL;
                client_pull();
                if (!client_eof && !memchr(buf_data(&inbox), '\n', buf_size(&inbox)))
                        step(10 * USEC_PER_MSEC);
        }
        return NULL;
}

/* Nothing arrives now (after the loop settled). */
static void assert_nothing_read(void) {
        settle();
        client_pull();
        ck_assert_msg(buf_size(&inbox) == 0, "unexpected: %.*s", (int) buf_size(&inbox),
                      (const char *) buf_data(&inbox));
}

static json_object *jget(json_object *o, const char *a, const char *b) {
        json_object *v = NULL;

        if (!o || !json_object_object_get_ex(o, a, &v))
                return NULL;
        if (b && (!v || !json_object_object_get_ex(v, b, &v)))
                return NULL;
        return v;
}

static int64_t id_of(json_object *m) {
        json_object *id = jget(m, "id", NULL);

        ck_assert_msg(id && json_object_is_type(id, json_type_int), "no integer id: %s",
                      json_object_to_json_string(m));
        return json_object_get_int64(id);
}

/* m is a JSON-RPC error with that code; id < 0: "id": null. Returns its message. */
static const char *assert_error(json_object *m, int64_t id, int code) {
        json_object *e = jget(m, "error", NULL);
        int64_t c = 0;

        ck_assert_msg(e, "not an error: %s", m ? json_object_to_json_string(m) : "(nothing)");
        ck_assert(json_get_int64(e, "code", &c));
        ck_assert_msg(c == code, "code %lld, not %d: %s", (long long) c, code, json_object_to_json_string(m));
        if (id < 0)
                ck_assert_msg(json_object_object_get_ex(m, "id", NULL) && !jget(m, "id", NULL),
                              "want \"id\": null: %s", json_object_to_json_string(m));
        else
                ck_assert_int_eq(id_of(m), id);
        return json_get_string(e, "message");
}

static json_object *assert_result(json_object *m, int64_t id) {
        json_object *r = jget(m, "result", NULL);

        ck_assert_msg(r, "not a result: %s", m ? json_object_to_json_string(m) : "(nothing)");
        ck_assert_int_eq(id_of(m), id);
        return r;
}

static const char *result_text(json_object *result) {
        json_object *content = jget(result, "content", NULL);

        ck_assert(content && json_object_array_length(content) >= 1);
        return json_get_string(json_object_array_get_idx(content, 0), "text");
}

static void initialize(void) {
        _cleanup_json_ json_object *m = NULL;

        client_send("{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
                    "\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}\n");
        m = client_read();
        json_object *r = assert_result(m, 0);
        ck_assert_str_eq(json_get_string(r, "protocolVersion"), "2025-06-18");
        ck_assert_str_eq(json_get_string(jget(r, "serverInfo", NULL), "name"), "test-session");
        client_send("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n");
}

static void call(int64_t id, const char *tool, const char *args) {
        client_sendf("{\"jsonrpc\":\"2.0\",\"id\":%lld,\"method\":\"tools/call\",\"params\":{\"name\":\"%s\","
                     "\"arguments\":%s}}\n",
                     (long long) id, tool, args);
}

/* The session closed: the closed callback ran, and the client reads the end of the stream. */
static void assert_closed(void) {
        for (unsigned i = 0; i < 300 && !closed; i++)
                step(10 * USEC_PER_MSEC);
        ck_assert(closed);
        ck_assert_ptr_null(session);
        client_pull();
        ck_assert(client_eof);
}

/* Ran until the session closed by itself: the last line it sent says why. */
static void assert_closed_because(const char *setting) {
        _cleanup_json_ json_object *m = client_read();
        const char *msg = assert_error(m, -1, JSONRPC_SERVER_LIMIT);

        ck_assert_msg(strstr(msg, setting), "closed for another reason: %s", msg);
        assert_closed();
}

/* ---- the handshake and dispatch ------------------------------------------ */

START_TEST(test_initialize_handshake) {
        SessionLimits l = default_limits();
        _cleanup_json_ json_object *list = NULL, *res = NULL;

        start(&l);
        initialize();
        /* A notification gets no reply. */
        assert_nothing_read();

        client_send("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}\n");
        list = client_read();
        json_object *t = jget(assert_result(list, 1), "tools", NULL);
        ck_assert_uint_eq(json_object_array_length(t), 4);
        ck_assert_str_eq(json_get_string(json_object_array_get_idx(t, 0), "name"), "now");

        call(2, "now", "{\"text\":\"hello\"}");
        res = client_read();
        ck_assert_str_eq(result_text(assert_result(res, 2)), "hello");
        ck_assert_uint_eq(n_started, 1);
        ck_assert(!closed);
        ck_assert(session_is_idle(session));
}
END_TEST

START_TEST(test_call_before_initialize) {
        SessionLimits l = default_limits();
        _cleanup_json_ json_object *m = NULL, *res = NULL;

        start(&l);
        call(7, "now", "{}");
        m = client_read();
        assert_error(m, 7, JSONRPC_INVALID_PARAMS);
        /* The tool never ran. */
        ck_assert_uint_eq(n_started, 0);
        ck_assert(!closed);

        /* The session goes on: the handshake still works, and then the call. */
        initialize();
        call(8, "now", "{\"text\":\"after\"}");
        res = client_read();
        ck_assert_str_eq(result_text(assert_result(res, 8)), "after");
        ck_assert_uint_eq(n_started, 1);
}
END_TEST

START_TEST(test_malformed_json) {
        SessionLimits l = default_limits();
        _cleanup_json_ json_object *m1 = NULL, *m2 = NULL, *m3 = NULL;

        start(&l);
        initialize();
        client_send("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\n");
        m1 = client_read();
        assert_error(m1, -1, JSONRPC_PARSE_ERROR);
        client_send("not json at all\n");
        m2 = client_read();
        assert_error(m2, -1, JSONRPC_PARSE_ERROR);

        /* Still served. */
        client_send("{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}\n");
        m3 = client_read();
        assert_result(m3, 3);
        ck_assert(!closed);
}
END_TEST

START_TEST(test_line_over_cap) {
        SessionLimits l = default_limits();
        _cleanup_json_ json_object *m = NULL, *res = NULL;
        _cleanup_free_ char *line = NULL;
        int64_t limit = 0;
        size_t n = 3 * l.max_message_size;

        start(&l);
        initialize();

        /* A call whose line is three times the cap: it is dropped, not run, and answered with an error. */
        line = malloc(n + 2);
        ck_assert_ptr_nonnull(line);
        int k = snprintf(line, n, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{\"name\":"
                                  "\"now\",\"arguments\":{\"text\":\"");
        memset(line + k, 'x', n - (size_t) k);
        strcpy(line + n - 4, "\"}}}\n");
        client_send(line);
        m = client_read();
        assert_error(m, -1, JSONRPC_INVALID_REQUEST);
        ck_assert(json_get_int64(jget(m, "error", "data"), "limit", &limit));
        ck_assert_int_eq(limit, (int64_t) l.max_message_size);
        ck_assert_uint_eq(n_started, 0);

        /* What follows the dropped line is read as the next message. */
        call(6, "now", "{\"text\":\"next\"}");
        res = client_read();
        ck_assert_str_eq(result_text(assert_result(res, 6)), "next");
        ck_assert_uint_eq(n_started, 1);
        ck_assert(!closed);
}
END_TEST

/* A line over the element budget is refused as soon as its bytes show it, before it ends, and dropped as it comes:
 * never held whole. A line within the budget, sent in pieces cut anywhere, is counted once and runs. */
START_TEST(test_elements_refused_before_line_ends) {
        SessionLimits l = default_limits();
        McpServer srv = server;
        _cleanup_json_ json_object *m = NULL, *res = NULL, *res2 = NULL;
        int sv[2];
        int64_t limit = 0;

        srv.max_elements = 50;
        l.max_message_size = 64 * 1024;
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        client = sv[0];
        ck_assert_int_eq(fcntl(client, F_SETFL, O_NONBLOCK), 0);
        ck_assert_int_eq(session_new(&session, event, 1, sv[1], sv[1], &srv, &l, on_closed, &closed), 0);
        initialize();

        /* Within the budget, in pieces, commas in a string not counted: answered. */
        client_send("{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{\"name\":\"now\",");
        settle();
        client_send("\"arguments\":{\"text\":\",,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,\\");
        settle();
        client_send("\",,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,\"}}}\n");
        res = client_read();
        assert_result(res, 4);
        ck_assert_uint_eq(n_started, 1);

        /* Over it: the error comes while the line has not ended, and nothing of it is held. */
        client_send("{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{\"name\":\"now\","
                    "\"arguments\":{\"text\":\"x\",\"list\":[0");
        for (int i = 0; i < 60; i++)
                client_send(",0");
        m = client_read();
        ck_assert_ptr_nonnull(strstr(assert_error(m, -1, JSONRPC_INVALID_REQUEST), "max-message-elements"));
        ck_assert(json_get_int64(jget(m, "error", "data"), "limit", &limit));
        ck_assert_int_eq(limit, 50);
        ck_assert_uint_eq(framing_pending(&session->framing), 0);
        ck_assert_uint_eq(charge_registry_used(charges, getuid(), CHARGE_INPUT_BYTES), 0);
        /* Its rest is dropped as it comes, up to its newline; nothing more is said of it, nothing ran. */
        for (int i = 0; i < 1000; i++)
                client_send(",0");
        client_send("]}}}\n");
        assert_nothing_read();
        ck_assert_uint_eq(n_started, 1);

        /* The next line is read as the next message. */
        call(6, "now", "{\"text\":\"next\"}");
        res2 = client_read();
        ck_assert_str_eq(result_text(assert_result(res2, 6)), "next");
        ck_assert(!closed);
}
END_TEST

/* ---- deadlines ----------------------------------------------------------- */

/* A ping answered; then the session's deadlines are looked at again (at the end of the event that read it). */
static void ping(int64_t id) {
        client_sendf("{\"jsonrpc\":\"2.0\",\"id\":%lld,\"method\":\"ping\"}\n", (long long) id);
        _cleanup_json_ json_object *pong = client_read();
        assert_result(pong, id);
}

/* The deadlines are real time: a test that must not be closed by one before it is ready sets it short only then
 * (session->limits), so that no pause of a loaded machine can close it early. */
START_TEST(test_initialize_deadline) {
        SessionLimits l = default_limits();

        l.initialize_timeout_usec = 60 * USEC_PER_SEC;
        start(&l);
        /* Requests that start no session do not count. */
        ping(1);
        session->limits.initialize_timeout_usec = 100 * USEC_PER_MSEC;
        ping(2);
        assert_closed_because("initialize-timeout");
}
END_TEST

START_TEST(test_initialize_in_time) {
        SessionLimits l = default_limits();

        l.initialize_timeout_usec = 60 * USEC_PER_SEC;
        start(&l);
        initialize();
        /* Started: the deadline is gone for good, however short it is now. */
        session->limits.initialize_timeout_usec = 1;
        ping(1);
        run_for(100 * USEC_PER_MSEC);
        assert_nothing_read();
        ck_assert(!closed);
}
END_TEST

START_TEST(test_half_sent_line) {
        SessionLimits l = default_limits();

        l.line_timeout_usec = 100 * USEC_PER_MSEC;
        start(&l);
        initialize();
        /* Whole lines, however far apart, are no problem. */
        run_for(2 * l.line_timeout_usec);
        ck_assert(!closed);

        client_send("{\"jsonrpc\":\"2.0\",\"id\":1,");
        assert_closed_because("line-timeout");
        ck_assert_uint_eq(n_started, 0);
}
END_TEST

START_TEST(test_idle_deadline) {
        SessionLimits l = default_limits();
        _cleanup_json_ json_object *res = NULL;

        l.idle_timeout_usec = 60 * USEC_PER_SEC;
        start(&l);
        initialize();

        /* A call in flight is no idleness, however long it takes. */
        call(1, "later", "{}");
        settle();
        ck_assert_uint_eq(n_held, 1);
        session->limits.idle_timeout_usec = 100 * USEC_PER_MSEC;
        ping(2);
        run_for(300 * USEC_PER_MSEC);
        ck_assert(!closed);

        tool_call_finish_text(held[0], false, "done");
        res = client_read();
        ck_assert_str_eq(result_text(assert_result(res, 1)), "done");
        /* Then nothing comes: closed. */
        assert_closed_because("connection-idle-timeout");
}
END_TEST

/* Bytes of unfinished lines count against the user's budget: over it, the connection is closed, with the reason. */
START_TEST(test_input_budget) {
        SessionLimits l = default_limits();
        char part[1024];

        charge_registry_set_limit(charges, CHARGE_INPUT_BYTES, 2000, 0);
        start(&l);
        initialize();
        /* Under the budget, a line in pieces is fine, and nothing stays charged once it is whole. */
        client_send("{\"jsonrpc\":\"2.0\",");
        settle();
        ck_assert_uint_gt(charge_registry_used(charges, session->uid, CHARGE_INPUT_BYTES), 0);
        client_send("\"id\":1,\"method\":\"ping\"}\n");
        _cleanup_json_ json_object *pong = client_read();
        assert_result(pong, 1);
        ck_assert_uint_eq(charge_registry_used(charges, session->uid, CHARGE_INPUT_BYTES), 0);

        /* A line begun and left over the budget (though under max-message-size): closed. */
        memset(part, ' ', sizeof(part) - 1);
        part[sizeof(part) - 1] = 0;
        client_send("{\"jsonrpc\":\"2.0\",");
        client_send(part);
        client_send(part);
        client_send(part);
        assert_closed_because("max-input-buffer-per-user");
}
END_TEST

/* A complete line longer than a slice is parsed a slice per turn of the loop, counting three times its length
 * against the user's input budget meanwhile; the line after it waits, and the answers come in order. */
START_TEST(test_long_line_parsed_in_slices) {
        SessionLimits l = default_limits();
        size_t n = 4 * SESSION_PARSE_SLICE;
        _cleanup_free_ char *text = malloc(n + 64);
        static const char head[] = "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\",\"params\":{\"x\":\"";
        unsigned turns = 0;
        uint64_t most = 0;

        ck_assert_ptr_nonnull(text);
        l.max_message_size = 2 * n;
        charge_registry_set_limit(charges, CHARGE_INPUT_BYTES, 16 * n, 0);
        start(&l);
        initialize();

        memcpy(text, head, sizeof(head) - 1);
        memset(text + sizeof(head) - 1, 'y', n - (sizeof(head) - 1));
        memcpy(text + n - 3, "\"}}", 3);
        strcpy(text + n, "\n{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"ping\"}\n");
        client_send(text);
        for (unsigned i = 0; i < 10000 && (turns == 0 || session->parser); i++) {
                if (session->parser) {
                        turns++;
                        most = MAX(most, charge_registry_used(charges, session->uid, CHARGE_INPUT_BYTES));
                        ck_assert_uint_eq(charge_registry_used(charges, session->uid, CHARGE_PARSES), 1);
                }
                ck_assert_int_ge(sd_event_run(event, 10 * USEC_PER_MSEC), 0);
        }
        ck_assert_uint_ge(turns, 4);
        ck_assert_uint_ge(most, SESSION_PARSE_COST * n);

        _cleanup_json_ json_object *a = client_read(), *b = client_read();
        assert_result(a, 7);
        assert_result(b, 8);
        ck_assert_uint_eq(charge_registry_used(charges, session->uid, CHARGE_INPUT_BYTES), 0);
        ck_assert_uint_eq(charge_registry_used(charges, session->uid, CHARGE_PARSES), 0);
}
END_TEST

/* ---- backpressure -------------------------------------------------------- */

/* Make the session's socket hold little, so that replies queue in the session rather than in the kernel. */
static void shrink_socket(void) {
        int one = 1;

        ck_assert_int_eq(setsockopt(session->out_fd, SOL_SOCKET, SO_SNDBUF, &one, sizeof(one)), 0);
}

START_TEST(test_backpressure) {
        SessionLimits l = default_limits();
        enum { N = 40, REPLY = 4000 };
        bool seen[N] = {};
        unsigned started;

        l.output_high_water = 8 * 1024;
        l.max_reply_buffer = 32 * 1024;
        start(&l);
        shrink_socket();
        initialize();
        settle();

        /* Many calls at once, each with a large reply, from a client that does not read. */
        _cleanup_free_ char *burst = NULL;
        for (int i = 0; i < N; i++)
                ck_assert_int_ge(strextendf(&burst, "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/call\","
                                                    "\"params\":{\"name\":\"big\",\"arguments\":{\"bytes\":%d}}}\n",
                                            100 + i, REPLY),
                                 0);
        client_send(burst);
        settle();
        started = n_started;
        /* Some were served, then the session stopped taking requests: the rest wait in the socket or the
         * framing buffer, not as calls. */
        ck_assert_uint_ge(started, 1);
        ck_assert_msg(started < N, "all %u calls started for a client that reads nothing", started);
        ck_assert(session->held_back);
        ck_assert_uint_le(buf_size(&session->out), l.max_reply_buffer);
        /* The queued bytes are charged to the peer, exactly. */
        ck_assert_uint_eq(charge_registry_used(charges, session->uid, CHARGE_REPLY_BYTES), buf_size(&session->out));

        /* Waiting longer changes nothing while the client does not read. */
        run_for(50 * USEC_PER_MSEC);
        ck_assert_uint_eq(n_started, started);

        /* The client reads: every call is served, in order, with its whole reply. */
        for (int i = 0; i < N; i++) {
                _cleanup_json_ json_object *m = client_read();
                int64_t id = id_of(m);

                ck_assert_int_ge(id, 100);
                ck_assert_int_lt(id, 100 + N);
                ck_assert(!seen[id - 100]);
                seen[id - 100] = true;
                ck_assert_uint_eq(strlen(result_text(assert_result(m, id))), REPLY);
        }
        ck_assert_uint_eq(n_started, N);
        ck_assert(!session->held_back);
        assert_nothing_read();
        ck_assert_uint_eq(charge_registry_used(charges, session->uid, CHARGE_REPLY_BYTES), 0);
}
END_TEST

/* Replies of calls already running do not wait for the client: those that would take the queue over the bound are
 * replaced by a short error, and the queue stays under it. */
START_TEST(test_reply_bound) {
        SessionLimits l = default_limits();
        enum { N = 12 };
        unsigned n_results = 0, n_withheld = 0;
        _cleanup_free_ char *text = NULL;

        l.output_high_water = 8 * 1024;
        l.max_reply_buffer = 32 * 1024;
        start(&l);
        shrink_socket();
        initialize();
        for (int i = 0; i < N; i++)
                call(200 + i, "later", "{}");
        settle();
        ck_assert_uint_eq(n_held, N);

        text = malloc(6000);
        ck_assert_ptr_nonnull(text);
        memset(text, 'r', 5999);
        text[5999] = 0;
        for (size_t i = 0; i < n_held; i++) {
                size_t before = buf_size(&session->out), after;

                tool_call_finish_text(held[i], false, "%s", text);
                after = buf_size(&session->out);
                /* A reply that would take the queue over the bound is not queued: a short error line is, in its
                 * place (those lines are what the queue may hold beyond the bound: one per call in flight at
                 * most, and calls are capped). */
                if (before > 0 && before + 6000 > l.max_reply_buffer)
                        ck_assert_uint_lt(after, before + 512);
                ck_assert_uint_le(after, l.max_reply_buffer + N * 512);
                ck_assert_uint_eq(charge_registry_used(charges, session->uid, CHARGE_REPLY_BYTES), after);
        }

        for (int i = 0; i < N; i++) {
                _cleanup_json_ json_object *m = client_read();
                ck_assert_int_eq(id_of(m), 200 + i);
                if (jget(m, "result", NULL)) {
                        ck_assert_uint_eq(strlen(result_text(jget(m, "result", NULL))), 5999);
                        n_results++;
                } else {
                        ck_assert(strstr(assert_error(m, 200 + i, JSONRPC_SERVER_LIMIT), "max-reply-buffer"));
                        n_withheld++;
                }
        }
        ck_assert_uint_ge(n_results, 1);
        ck_assert_uint_ge(n_withheld, 1);
        ck_assert(!closed);
}
END_TEST

/* A reply into an empty queue goes whatever its length, unless the user's other connections (here a charge of
 * their own) already hold unread replies and it would take them over twice the user's bound: else many
 * connections of one user that never read would each hold a reply of the largest size. */
START_TEST(test_reply_bound_per_user) {
        SessionLimits l = default_limits();
        Charge other = CHARGE_NULL;
        _cleanup_free_ char *text = NULL;

        charge_registry_set_limit(charges, CHARGE_REPLY_BYTES, 20000, 0);
        start(&l);
        initialize();
        settle();
        for (int i = 0; i < 3; i++)
                call(300 + i, "later", "{}");
        settle();
        ck_assert_uint_eq(n_held, 3);
        text = malloc(30000);
        ck_assert_ptr_nonnull(text);
        memset(text, 'u', 29999);
        text[29999] = 0;

        /* The user holds nothing else: a reply longer than the user's bound goes. */
        tool_call_finish_text(held[0], false, "%s", text);
        _cleanup_json_ json_object *a = client_read();
        ck_assert_uint_eq(strlen(result_text(assert_result(a, 300))), 29999);
        ck_assert_uint_eq(charge_registry_used(charges, session->uid, CHARGE_REPLY_BYTES), 0);

        /* Another connection of the user holds 35000 unread bytes (over the bound: it was charged as replies came
         * into its empty queue): a reply of 10000 into this empty queue would take the user to 45000, over twice
         * the bound, and is replaced by an error that names it. */
        ck_assert_int_eq(charge_take(charges, &other, session->uid, CHARGE_REPLY_BYTES, 15000), 0);
        ck_assert_int_eq(charge_resize(&other, 35000, true), 0);
        text[9999] = 0;
        tool_call_finish_text(held[1], false, "%s", text);
        _cleanup_json_ json_object *b = client_read();
        const char *msg = assert_error(b, 301, JSONRPC_SERVER_LIMIT);
        ck_assert_msg(strstr(msg, "max-reply-buffer-per-user") && strstr(msg, "other connections"), "%s", msg);
        int64_t v = 0;
        ck_assert(json_get_int64(jget(jget(b, "error", NULL), "data", NULL), "unread_bytes_of_user", &v));
        ck_assert_int_eq(v, 35000);
        ck_assert_uint_eq(charge_registry_used(charges, session->uid, CHARGE_REPLY_BYTES), 35000);

        /* A reply that stays within twice the bound beside the other connection's goes. */
        text[3999] = 0;
        tool_call_finish_text(held[2], false, "%s", text);
        _cleanup_json_ json_object *c = client_read();
        ck_assert_uint_eq(strlen(result_text(assert_result(c, 302))), 3999);
        ck_assert(!closed);
        charge_release(&other);
}
END_TEST

/* ---- closing ------------------------------------------------------------- */

START_TEST(test_close_cancels_calls) {
        SessionLimits l = default_limits();

        start(&l);
        initialize();
        call(1, "never", "{}");
        call(2, "never", "{}");
        call(3, "now", "{}");
        _cleanup_json_ json_object *res = client_read();
        assert_result(res, 3);
        ck_assert_uint_eq(n_held, 2);
        ck_assert_uint_eq(n_cancelled, 0);
        ck_assert_uint_eq(mcp_session_n_calls(session->mcp), 2);

        /* The client goes away with two calls running: both are cancelled, and the session closes. */
        client = safe_close(client);
        for (unsigned i = 0; i < 300 && !closed; i++)
                step(10 * USEC_PER_MSEC);
        ck_assert(closed);
        ck_assert_uint_eq(n_cancelled, 2);
        for (size_t i = 0; i < n_held; i++)
                ck_assert(!tool_call_is_live(held[i]));
        /* A late answer only drops the work's state. */
        tool_call_finish_text(held[0], false, "too late");
}
END_TEST

/* The client closes its side after its last request (as a stdio client does): what was sent is answered, then
 * what still runs is cancelled. */
START_TEST(test_half_close) {
        SessionLimits l = default_limits();

        start(&l);
        initialize();
        call(1, "never", "{}");
        call(2, "now", "{\"text\":\"last\"}");
        ck_assert_int_eq(shutdown(client, SHUT_WR), 0);
        _cleanup_json_ json_object *res = client_read();
        ck_assert_str_eq(result_text(assert_result(res, 2)), "last");
        assert_closed();
        ck_assert_uint_eq(n_cancelled, 1);
}
END_TEST

/* session_stop(): no more requests, but the call in flight is answered before the session closes. */
START_TEST(test_stop_waits_for_calls) {
        SessionLimits l = default_limits();

        start(&l);
        initialize();
        call(1, "later", "{}");
        settle();
        ck_assert_uint_eq(n_held, 1);
        session_stop(session);
        settle();
        ck_assert(!closed);
        /* A request after the stop is not taken. */
        call(2, "now", "{}");
        settle();
        ck_assert_uint_eq(n_started, 1);

        tool_call_finish_text(held[0], false, "finished");
        _cleanup_json_ json_object *res = client_read();
        ck_assert_str_eq(result_text(assert_result(res, 1)), "finished");
        assert_closed();
        ck_assert_uint_eq(n_cancelled, 0);
}
END_TEST

/* ---- stdio ---------------------------------------------------------------- */

/* Over pipes, the end of input is the client leaving, as on a socket: what was sent is answered, what runs is
 * cancelled. */
START_TEST(test_pipes) {
        SessionLimits l = default_limits();

        start_pipes(&l, -EBADF);
        initialize();
        call(1, "now", "{\"text\":\"piped\"}");
        _cleanup_json_ json_object *res = client_read();
        ck_assert_str_eq(result_text(assert_result(res, 1)), "piped");
        call(2, "never", "{}");
        call(3, "now", "{\"text\":\"last\"}");
        client_out = safe_close(client_out);
        _cleanup_json_ json_object *last = client_read();
        ck_assert_str_eq(result_text(assert_result(last, 3)), "last");
        assert_closed();
        ck_assert_uint_eq(n_cancelled, 1);
}
END_TEST

/* A regular file as input (mcp-python-sandboxd --stdio < requests): its end is no client leaving, so a call still
 * running is waited for and answered, not cancelled. */
START_TEST(test_file_input) {
        SessionLimits l = default_limits();
        char path[] = "/tmp/test-session-XXXXXX";
        int fd = mkostemp(path, O_CLOEXEC);
        static const char requests[] =
                "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
                "\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}\n"
                "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n"
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"later\","
                "\"arguments\":{}}}\n"
                /* The last line without its newline is still a line. */
                "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}";

        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(unlink(path), 0);
        ck_assert_int_eq(write(fd, requests, sizeof(requests) - 1), (ssize_t) sizeof(requests) - 1);
        ck_assert_int_eq(lseek(fd, 0, SEEK_SET), 0);
        start_pipes(&l, fd);

        _cleanup_json_ json_object *init = client_read(), *pong = client_read();
        assert_result(init, 0);
        assert_result(pong, 2);
        settle();
        ck_assert_uint_eq(n_held, 1);
        ck_assert_uint_eq(n_cancelled, 0);
        ck_assert(!closed);

        tool_call_finish_text(held[0], false, "answered");
        _cleanup_json_ json_object *res = client_read();
        ck_assert_str_eq(result_text(assert_result(res, 1)), "answered");
        assert_closed();
        ck_assert_uint_eq(n_cancelled, 0);
}
END_TEST

/* A regular file as input to a client that does not read its replies: the file is read no further than the
 * replies let it (the defer source that reads it also runs after each reply), and the session stays open. */
START_TEST(test_file_input_backpressure) {
        SessionLimits l = default_limits();
        char path[] = "/tmp/test-session-XXXXXX";
        int fd = mkostemp(path, O_CLOEXEC);
        _cleanup_free_ char *requests = NULL;
        size_t len = 0;
        off_t pos;

        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(unlink(path), 0);
        ck_assert_int_ge(strextendf_len(&requests, &len,
                                        "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":"
                                        "{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},\"clientInfo\":"
                                        "{\"name\":\"t\",\"version\":\"1\"}}}\n"
                                        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n"),
                         0);
        for (int i = 0; i < 6000; i++)
                ck_assert_int_ge(strextendf_len(&requests, &len,
                                                "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/call\","
                                                "\"params\":{\"name\":\"big\",\"arguments\":{\"bytes\":4000}}}\n",
                                                100 + i),
                                 0);
        ck_assert_uint_gt(len, 512 * 1024);
        ck_assert_int_eq(write(fd, requests, len), (ssize_t) len);
        ck_assert_int_eq(lseek(fd, 0, SEEK_SET), 0);
        l.output_high_water = 8 * 1024;
        l.max_reply_buffer = 32 * 1024;
        start_pipes(&l, fd);
        /* The write end as a socket's is: full means wait, not block the loop. */
        ck_assert_int_eq(fcntl(session->out_fd, F_SETFL, O_NONBLOCK), 0);

        settle();
        run_for(50 * USEC_PER_MSEC);
        pos = lseek(fd, 0, SEEK_CUR);
        ck_assert_int_ge(pos, 0);
        ck_assert_msg((size_t) pos < len / 2, "read %lld of %zu bytes of requests for a client that reads nothing",
                      (long long) pos, len);
        ck_assert(session->held_back);
        ck_assert(!closed);
}
END_TEST

static Suite *session_suite(void) {
        Suite *s = suite_create("session");
        TCase *tc;

        tc = tcase_create("dispatch");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_initialize_handshake);
        tcase_add_test(tc, test_call_before_initialize);
        tcase_add_test(tc, test_malformed_json);
        tcase_add_test(tc, test_line_over_cap);
        tcase_add_test(tc, test_elements_refused_before_line_ends);
        suite_add_tcase(s, tc);

        tc = tcase_create("deadlines");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_initialize_deadline);
        tcase_add_test(tc, test_initialize_in_time);
        tcase_add_test(tc, test_half_sent_line);
        tcase_add_test(tc, test_idle_deadline);
        tcase_add_test(tc, test_input_budget);
        tcase_add_test(tc, test_long_line_parsed_in_slices);
        suite_add_tcase(s, tc);

        tc = tcase_create("backpressure");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_backpressure);
        tcase_add_test(tc, test_reply_bound);
        tcase_add_test(tc, test_reply_bound_per_user);
        suite_add_tcase(s, tc);

        tc = tcase_create("closing");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_close_cancels_calls);
        tcase_add_test(tc, test_half_close);
        tcase_add_test(tc, test_stop_waits_for_calls);
        suite_add_tcase(s, tc);

        tc = tcase_create("stdio");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_pipes);
        tcase_add_test(tc, test_file_input);
        tcase_add_test(tc, test_file_input_backpressure);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(session_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

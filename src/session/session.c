/* SPDX-License-Identifier: MIT */
/*
 * One connection: framing its input, the budgets it is charged for, backpressure, deadlines, and long lines parsed
 * a slice at a time. Over 800 lines, one file: every part is a state of the same connection, changed in one place
 * and seen by the others (whether it reads, what it holds of its user's budget, when it may close).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "json-util.h"
#include "jsonrpc/jsonrpc.h"
#include "log.h"
#include "session.h"
#include "time-util.h"

#define READ_CHUNK (64 * 1024)

static void session_update_events(Session *s);
static void session_close_later(Session *s);
static void session_close_with_error(Session *s, const char *message);
static void session_finish_input(Session *s);

static uint64_t session_now(Session *s) {
        uint64_t t = 0;

        (void) sd_event_now(s->event, CLOCK_MONOTONIC, &t);
        return t;
}

/*
 * What a callback of this connection cost the loop (since cpu0, the thread's CPU time when it began), charged to
 * the peer; then its sources take the priority the scheduler gives the peer now. Another user's connection that
 * keeps the loop busy is served after this one's ready events, never instead of them.
 */
static void session_loop_account(Session *s, uint64_t cpu0) {
        int p;

        if (!s->loop.user || s->dead)
                return;
        p = s->loop_priority;
        if (!scheduler_loop_account(&s->loop, thread_cpu_usec() - cpu0, session_now(s), &p))
                return;
        log_debug("Connection %" PRIu64 " (uid " UID_FMT "): %s.", s->id, s->uid,
                  p > s->loop_priority ? "its user is over its share of the event loop; served after the others"
                                       : "its user is back within its share of the event loop");
        s->loop_priority = p;
        if (s->in_source)
                (void) sd_event_source_set_priority(s->in_source, p);
        if (s->out_source)
                (void) sd_event_source_set_priority(s->out_source, p);
        if (s->defer_source)
                (void) sd_event_source_set_priority(s->defer_source, p);
        if (s->parse_source)
                (void) sd_event_source_set_priority(s->parse_source, p);
}

/* The queued reply bytes, as charged to the peer. Shrinking never fails. */
static void session_account(Session *s) {
        if (s->replies.user)
                (void) charge_resize(&s->replies, buf_size(&s->out), true);
}

typedef enum ReplyBound {
        REPLY_FITS,
        REPLY_OVER_CONNECTION,          /* this connection's unread replies would pass a bound */
        REPLY_OVER_USER,                /* into an empty queue, but the user's other connections hold too much */
} ReplyBound;

/* Would queueing n more bytes take this connection, or its user, over the
 * bound? A reply into an empty queue goes, however long (the client reads, and
 * tools cap what one reply holds), unless the user's other connections already
 * hold unread replies and this one would take them all over twice the user's
 * bound: else one user's many connections that never read would each hold a
 * reply of the largest size. Twice, because the user's runs stop starting at a
 * quarter of it (scheduler_set_reply_gate()), while those in flight still end
 * with replies the clients are reading: they should not be lost. */
static ReplyBound session_over_bound(Session *s, size_t n) {
        size_t queued = buf_size(&s->out);

        if (queued == 0) {
                uint64_t limit, others;

                if (!s->replies.user)
                        return REPLY_FITS;
                limit = charge_registry_limit(s->limits.charges, CHARGE_REPLY_BYTES);
                others = charge_registry_used(s->limits.charges, s->uid, CHARGE_REPLY_BYTES) - s->replies.amount;
                if (others == 0 || limit >= UINT64_MAX / 2 || others + n <= 2 * limit)
                        return REPLY_FITS;
                return REPLY_OVER_USER;
        }
        if (s->limits.max_reply_buffer > 0 && queued + n > s->limits.max_reply_buffer)
                return REPLY_OVER_CONNECTION;
        if (s->replies.user && charge_resize(&s->replies, queued + n, false) == CHARGE_QUOTA)
                return REPLY_OVER_CONNECTION;
        return REPLY_FITS;
}

/* A reply that does not fit: the same id, a short error in its place. Not a
 * reply (a notification): NULL, it is dropped. */
static json_object *withheld_reply_new(Session *s, json_object *msg, size_t len, ReplyBound why) {
        json_object *id = NULL, *data;

        if (!json_object_object_get_ex(msg, "id", &id) ||
            (!json_object_object_get_ex(msg, "result", NULL) && !json_object_object_get_ex(msg, "error", NULL)))
                return NULL;
        data = json_object_new_object();
        json_add_int(data, "reply_bytes", (int64_t) len);
        if (why == REPLY_OVER_USER) {
                json_add_int(data, "unread_bytes_of_user",
                             (int64_t) charge_registry_used(s->limits.charges, s->uid, CHARGE_REPLY_BYTES));
                json_add_int(data, "max_reply_buffer_per_user",
                             (int64_t) charge_registry_limit(s->limits.charges, CHARGE_REPLY_BYTES));
                return jsonrpc_error_new(id, JSONRPC_SERVER_LIMIT,
                                         "Reply withheld: your other connections hold replies their clients have "
                                         "not read, and this one would take them over twice the limit for one "
                                         "user (max-reply-buffer-per-user); read replies as they come",
                                         data);
        }
        json_add_int(data, "unread_bytes", (int64_t) buf_size(&s->out));
        json_add_int(data, "max_reply_buffer", (int64_t) s->limits.max_reply_buffer);
        return jsonrpc_error_new(id, JSONRPC_SERVER_LIMIT,
                                 "Reply withheld: the client has not read earlier replies on this connection, and "
                                 "this one would take them over the limit (max-reply-buffer, "
                                 "max-reply-buffer-per-user); read replies as they come",
                                 data);
}

static int session_send(json_object *msg, void *userdata) {
        _cleanup_json_ json_object *m = msg;
        Session *s = userdata;
        const char *text;
        size_t len;
        int r;

        if (s->dead)
                return -ECONNRESET;

        text = json_to_line(m, &len);
        ReplyBound why = session_over_bound(s, len + 1);
        if (why != REPLY_FITS) {
                _cleanup_json_ json_object *orig = TAKE_PTR(m);

                if (!s->withheld_logged) {
                        if (why == REPLY_OVER_USER)
                                log_warning("Connection %" PRIu64 " (uid " UID_FMT "): a reply of %zu bytes is "
                                            "replaced by an error: the user's other connections hold %" PRIu64
                                            " bytes of replies their clients have not read.",
                                            s->id, s->uid, len,
                                            charge_registry_used(s->limits.charges, s->uid, CHARGE_REPLY_BYTES));
                        else
                                log_warning("Connection %" PRIu64 " (uid " UID_FMT "): the client is not reading "
                                            "its replies (%zu bytes queued); replies are replaced by errors until "
                                            "it does.",
                                            s->id, s->uid, buf_size(&s->out));
                }
                s->withheld_logged = true;
                m = withheld_reply_new(s, orig, len, why);
                if (!m)
                        return 0;   /* a progress notification: there will be others */
                text = json_to_line(m, &len);
        }
        s->active_usec = session_now(s);
        r = buf_append(&s->out, text, len);
        if (r >= 0)
                r = buf_append(&s->out, "\n", 1);
        if (r < 0)
                return r;

        /* Try right away: most replies go out without another trip through the loop. */
        if (!s->out_pollable) {
                /* A regular file or similar: writes do not block. */
                while (buf_size(&s->out) > 0) {
                        ssize_t n = write(s->out_fd, buf_data(&s->out), buf_size(&s->out));
                        if (n < 0) {
                                if (errno == EINTR)
                                        continue;
                                session_close_later(s);
                                return -errno;
                        }
                        buf_consume(&s->out, (size_t) n);
                }
        } else if (buf_flush_fd(&s->out, s->out_fd) < 0) {
                session_close_later(s);
                return -ECONNRESET;
        }

        session_account(s);
        session_update_events(s);
        /* This may have been the last call: a closing session may close now, and an open one's idle deadline
         * (connection-idle-timeout) applies again. Look once the call that sent it has been let go: while the
         * reply is sent, the call still counts. */
        (void) sd_event_source_set_enabled(s->defer_source, SD_EVENT_ONESHOT);
        return 0;
}

bool session_is_idle(const Session *s) {
        return mcp_session_n_calls(s->mcp) == 0 && buf_size(&s->out) == 0 && !s->parser;
}

/* What this connection holds of its user's input budget: the unfinished line, and the line being parsed at
 * SESSION_PARSE_COST times its length. */
static size_t session_input_held(const Session *s) {
        return framing_pending(&s->framing) + (s->parser ? SESSION_PARSE_COST * s->parse_len : 0);
}

static void session_close_later(Session *s) {
        if (s->dead)
                return;
        s->dead = true;
        (void) sd_event_source_set_enabled(s->defer_source, SD_EVENT_ONESHOT);
}

static void session_check_done(Session *s) {
        if ((s->read_eof || s->stopping) && session_is_idle(s))
                session_close_later(s);
}

static bool session_line_pending(const Session *s) {
        return framing_pending(&s->framing) > 0 || s->framing.discarding;
}

/*
 * Count the values of the line being received as its bytes come (process_input() has taken every complete line):
 * a line over the element budget is refused and dropped as soon as that is known, never held whole. Its bytes are
 * looked at once, as they arrive, so a long line costs the loop one read at a time. Returns 1 if the line was
 * dropped (then the session may be closing), else 0.
 */
static int session_count_line(Session *s) {
        size_t max = mcp_session_max_elements(s->mcp), pending = framing_pending(&s->framing);
        uint64_t start = s->in_total - pending;
        int r;

        if (max == 0 || pending == 0 || s->framing.discarding)
                return 0;
        if (start != s->line_start || s->line_counted < start) {
                /* A new line. */
                s->line_start = s->line_counted = start;
                s->line_elements = JSONRPC_ELEMENT_COUNT_INIT;
        }
        if (jsonrpc_count_elements_feed(&s->line_elements, buf_data(&s->framing.buf) + (s->line_counted - start),
                                        s->in_total - s->line_counted, max) <= max) {
                s->line_counted = s->in_total;
                return 0;
        }
        /* Over the budget: the same refusal as for a complete line; the rest of it is dropped as it comes. The fds
         * that came with it are for no line: the next line's take closes them. */
        framing_discard_line(&s->framing);
        s->line_counted = s->in_total;
        s->line_usec = 0;
        if (s->input.user)
                (void) charge_resize(&s->input, 0, true);
        r = mcp_session_handle_too_many_elements(s->mcp);
        if (r < 0 || s->dead)
                session_close_later(s);
        return 1;
}

/*
 * A complete line too long to parse in one callback: parsed a slice per turn of the loop (on_parse()), so that
 * other connections are served in between. Until it is answered this connection takes no other line and reads
 * nothing; it counts SESSION_PARSE_COST times the line against its user's input budget, charged whatever the
 * budget says (the line is there already, and the parse is bounded by it). Takes the fds that came with it.
 */
static int session_parse_begin(Session *s, const char *line, size_t len, const int *fds, size_t n_fds) {
        int r;

        r = mcp_session_parser_new(s->mcp, line, len, &s->parser);
        if (r < 0)
                return r;
        s->parse_len = len;
        memcpy(s->parse_fds, fds, n_fds * sizeof(int));
        s->parse_n_fds = n_fds;
        if (s->input.user)
                (void) charge_resize(&s->input, session_input_held(s), true);
        if (s->parsing.user)
                (void) charge_resize(&s->parsing, 1, true);
        return sd_event_source_set_enabled(s->parse_source, SD_EVENT_ON);
}

/* The parse is over: what it held is given back, and the user's connections that wait for that read again. */
static void session_parse_end(Session *s) {
        (void) sd_event_source_set_enabled(s->parse_source, SD_EVENT_OFF);
        s->parser = jsonrpc_parser_free(s->parser);
        for (size_t i = 0; i < s->parse_n_fds; i++)
                safe_close(s->parse_fds[i]);
        s->parse_n_fds = 0;
        s->parse_len = 0;
        if (s->input.user)
                (void) charge_resize(&s->input, session_input_held(s), true);
        if (s->parsing.user)
                (void) charge_resize(&s->parsing, 0, true);
        if (s->limits.input_waiters)
                waitq_call_all(s->limits.input_waiters);
}

static void process_input(Session *s, bool eof) {
        bool got = false;

        /* One line at a time: the next waits until this one is answered. */
        if (s->parser)
                return;

        for (;;) {
                char *line;
                size_t len;
                int r;

                /* Where the next line starts in the stream (after an oversized line's rest is dropped it starts
                 * later: then the fds filed there are for no line and are closed). */
                uint64_t start = s->in_total - framing_pending(&s->framing), end;
                int fds[FDQUEUE_MAX_FDS];
                size_t n_fds = 0;

                r = eof ? framing_finish(&s->framing, &line, &len) : framing_next(&s->framing, &line, &len);
                if (r == FRAMING_NEED_MORE)
                        break;
                got = true;
                s->active_usec = session_now(s);
                end = s->in_total - framing_pending(&s->framing);
                if (s->in_socket)
                        n_fds = fdqueue_take(&s->fds, start, end, fds);
                if (r == FRAMING_LINE && len > SESSION_PARSE_SLICE) {
                        r = session_parse_begin(s, line, len, fds, n_fds);
                        if (r < 0) {
                                /* Its fds are the parse's once it began, else still ours. */
                                if (s->parser)
                                        session_parse_end(s);
                                else
                                        for (size_t i = 0; i < n_fds; i++)
                                                safe_close(fds[i]);
                                session_close_later(s);
                                return;
                        }
                        break;
                }
                if (r == FRAMING_OVERSIZE)
                        r = mcp_session_handle_oversize(s->mcp, s->limits.max_message_size);
                else {
                        ToolFds tf = { .fds = fds, .n = n_fds, .supported = s->in_socket };
                        r = mcp_session_handle_line_fds(s->mcp, line, len, &tf);
                }
                /* A tool keeps what it needs as copies of its own. */
                for (size_t i = 0; i < n_fds; i++)
                        safe_close(fds[i]);
                if (r < 0 || s->dead) {
                        session_close_later(s);
                        return;
                }
                /* Stop taking requests while the client does not read the replies. */
                if (buf_size(&s->out) > s->limits.output_high_water) {
                        s->held_back = true;
                        break;
                }
        }

        if (!s->dead && !s->held_back && !s->parser && !eof && session_count_line(s) > 0)
                return;

        /* Bytes of unfinished lines, as charged to the peer: give back what was consumed. */
        if (s->input.user && session_input_held(s) < s->input.amount)
                (void) charge_resize(&s->input, session_input_held(s), true);

        /* What is left is the start of a line; it began no earlier than the last line ended. */
        if (!session_line_pending(s))
                s->line_usec = 0;
        else if (got || s->line_usec == 0)
                s->line_usec = session_now(s);
}

/*
 * The client closed its side: that is how an MCP client over stdio ends the
 * session, and it reads nothing after. What is in the buffer is answered (a
 * last line without its newline included), calls still running are cancelled
 * (their processes killed, no reply, as for notifications/cancelled), replies
 * already queued go out, and the session closes.
 */
static void session_input_ended(Session *s) {
        if (s->read_eof)
                return;
        s->read_eof = true;
        session_finish_input(s);
}

/* After the end of input: answer what is left, unless held back, then cancel what still runs. A regular
 * file's end is no client leaving: its requests are all answered. */
static void session_finish_input(Session *s) {
        process_input(s, true);
        /* A line being parsed is answered first; then this comes back. */
        if (s->dead || s->held_back || s->parser || !s->in_pollable)
                return;
        if (mcp_session_n_calls(s->mcp) > 0)
                log_debug("Connection %" PRIu64 ": input ended; cancelling %u call(s) still running.", s->id,
                          mcp_session_n_calls(s->mcp));
        mcp_session_cancel_all(s->mcp);
}

/* A parse of the user ended (or another's: this connection looks again): read on. */
static void on_input_wake(void *userdata) {
        Session *s = userdata;

        s->input_wait = NULL;
        session_update_events(s);
}

static int session_read(Session *s) {
        char *p;
        ssize_t n;
        int r;

        r = framing_reserve(&s->framing, READ_CHUNK, &p);
        if (r < 0)
                return r;
        if (s->in_socket) {
                int fds[FDQUEUE_MAX_FDS];
                size_t n_fds = 0;

                n = fdqueue_recv(s->in_fd, p, READ_CHUNK, fds, &n_fds);
                if (n == -EAGAIN || n == -EINTR)
                        return 0;
                /* Filed under the last byte read with them: one of those sent with them (see fdqueue.h). */
                if (n == -EMFILE ||
                    (n > 0 && fdqueue_push(&s->fds, s->in_total + (uint64_t) n - 1, fds, n_fds) < 0)) {
                        log_notice("Connection %" PRIu64 " (uid " UID_FMT "): more file descriptors than one "
                                   "message may carry (%d); closing.", s->id, s->uid, FDQUEUE_MAX_FDS);
                        session_close_with_error(s, "Closing the connection: more file descriptors came than one "
                                                    "message may carry (16)");
                        return 0;
                }
                if (n < 0)
                        return (int) n;
        } else {
                n = read(s->in_fd, p, READ_CHUNK);
                if (n < 0) {
                        if (errno == EAGAIN || errno == EINTR)
                                return 0;
                        return -errno;
                }
        }
        if (n == 0) {
                session_input_ended(s);
                return 0;
        }
        framing_commit(&s->framing, (size_t) n);
        s->in_total += (uint64_t) n;
        process_input(s, false);

        /* What stays buffered counts against the user's budget for unfinished messages. */
        if (!s->dead && s->input.user && session_input_held(s) > s->input.amount &&
            charge_resize(&s->input, session_input_held(s), false) == CHARGE_QUOTA) {
                /* Over it while a line of the user is parsed (which counts three times its length): what was read
                 * is kept, and this connection reads on once the parse is over. */
                if (s->limits.input_waiters && s->parsing.user &&
                    charge_registry_used(s->limits.charges, s->uid, CHARGE_PARSES) > 0) {
                        s->input_wait = waitq_push(s->limits.input_waiters, on_input_wake, s);
                        if (!s->input_wait)
                                return -ENOMEM;
                        (void) charge_resize(&s->input, session_input_held(s), true);
                        log_debug("Connection %" PRIu64 " (uid " UID_FMT "): the user's input budget is taken by a "
                                  "line being parsed; reading on once it is.", s->id, s->uid);
                        return 0;
                }
                log_notice("Connection %" PRIu64 " (uid " UID_FMT "): the user's connections hold too much unfinished "
                           "input; closing.",
                           s->id, s->uid);
                session_close_with_error(s, "Closing the connection: this user's connections hold more bytes of "
                                            "unfinished messages than the limit (max-input-buffer-per-user)");
        }
        return 0;
}

static int on_in(sd_event_source *src, int fd, uint32_t revents, void *userdata) {
        Session *s = userdata;
        int r;

        if (revents & (EPOLLIN | EPOLLRDHUP)) {
                r = session_read(s);
                if (r < 0) {
                        log_debug_errno(r, "Connection %" PRIu64 ": read failed: %m", s->id);
                        session_close_later(s);
                        return 0;
                }
        } else if (revents & (EPOLLHUP | EPOLLERR)) {
                /* Hang-up with nothing left to read: a last line without its newline is still answered. */
                session_input_ended(s);
        }

        /* Both directions gone: the client is not coming back; stop its work now. */
        if (fd == s->out_fd && (revents & (EPOLLHUP | EPOLLERR)) && s->read_eof) {
                log_debug("Connection %" PRIu64 ": client hung up.", s->id);
                session_close_later(s);
                return 0;
        }

        session_update_events(s);
        session_check_done(s);
        return 0;
}

static int on_out(sd_event_source *src, int fd, uint32_t revents, void *userdata) {
        Session *s = userdata;

        if (buf_flush_fd(&s->out, s->out_fd) < 0 || (revents & EPOLLERR)) {
                session_close_later(s);
                return 0;
        }
        session_account(s);
        /* Replies drained: resume taking requests that were held back. The line
         * left over waited for us, not for the client: its time starts now. */
        if (buf_size(&s->out) <= s->limits.output_high_water && !s->stopping && (!s->read_eof || s->held_back)) {
                if (s->held_back && session_line_pending(s))
                        s->line_usec = session_now(s);
                s->held_back = false;
                if (s->read_eof)
                        session_finish_input(s);
                else
                        process_input(s, false);
        }
        session_update_events(s);
        session_check_done(s);
        return 0;
}

static bool session_reading(const Session *s) {
        return !s->read_eof && !s->stopping && !s->dead && !s->parser && !s->input_wait &&
               buf_size(&s->out) <= s->limits.output_high_water;
}

/* One slice of the line being parsed; once it is done, the line is answered and the next one taken. */
static void session_parse_step(Session *s) {
        int r;

        if (jsonrpc_parser_step(s->parser, SESSION_PARSE_SLICE) != JSONRPC_PARSER_DONE) {
                /* Back in the queue behind what became ready meanwhile, not ahead of it: sd-event serves the oldest
                 * pending source first among those of one priority. */
                (void) sd_event_source_set_enabled(s->parse_source, SD_EVENT_OFF);
                (void) sd_event_source_set_enabled(s->parse_source, SD_EVENT_ON);
                return;
        }
        ToolFds tf = { .fds = s->parse_fds, .n = s->parse_n_fds, .supported = s->in_socket };
        r = mcp_session_handle_parsed_fds(s->mcp, s->parser, &tf);
        session_parse_end(s);
        if (r < 0 || s->dead) {
                session_close_later(s);
                return;
        }
        s->active_usec = session_now(s);
        /* The line left over waited for us, not for the client: its time starts now. */
        if (session_line_pending(s))
                s->line_usec = s->active_usec;
        if (buf_size(&s->out) > s->limits.output_high_water)
                s->held_back = true;
        else if (s->read_eof)
                session_finish_input(s);
        else
                process_input(s, false);
        session_update_events(s);
        session_check_done(s);
}

static int on_parse(sd_event_source *src, void *userdata) {
        uint64_t cpu0 = thread_cpu_usec();
        Session *s = userdata;

        if (s->dead || !s->parser) {
                (void) sd_event_source_set_enabled(src, SD_EVENT_OFF);
                return 0;
        }
        session_parse_step(s);
        session_loop_account(s, cpu0);
        return 0;
}

static int on_defer(sd_event_source *src, void *userdata) {
        Session *s = userdata;

        if (!s->dead) {
                uint64_t cpu0 = thread_cpu_usec();

                /* Non-pollable input (a regular file): read a chunk per loop iteration, unless replies wait to be
                 * read (the defer source also runs after each reply, for the idle deadline). */
                if (!s->in_pollable && session_reading(s) && session_read(s) < 0)
                        session_close_later(s);
                session_update_events(s);
                session_check_done(s);
                session_loop_account(s, cpu0);
                return 0;
        }
        if (s->closed)
                s->closed(s, s->userdata);   /* the owner frees us */
        return 0;
}

/* The earliest deadline that applies now, and which one; UINT64_MAX: none. */
static uint64_t session_deadline(Session *s, const char **ret_why) {
        uint64_t d = UINT64_MAX;
        const char *why = NULL;

        if (s->stopping || s->read_eof)
                goto done;
        if (s->limits.initialize_timeout_usec > 0 && !mcp_session_is_established(s->mcp) &&
            s->created_usec + s->limits.initialize_timeout_usec < d) {
                d = s->created_usec + s->limits.initialize_timeout_usec;
                why = "no session was started (initialize, or a request with _meta) in time (initialize-timeout)";
        }
        /* A line held back while the client does not read its replies is not the client's delay. */
        if (s->limits.line_timeout_usec > 0 && session_reading(s) && session_line_pending(s) && s->line_usec > 0 &&
            s->line_usec + s->limits.line_timeout_usec < d) {
                d = s->line_usec + s->limits.line_timeout_usec;
                why = "a message (line) was begun but not finished in time (line-timeout)";
        }
        if (s->limits.idle_timeout_usec > 0 && session_is_idle(s) && !session_line_pending(s) &&
            s->active_usec + s->limits.idle_timeout_usec < d) {
                d = s->active_usec + s->limits.idle_timeout_usec;
                why = "no request for a long time (connection-idle-timeout)";
        }
done:
        if (ret_why)
                *ret_why = why;
        return d;
}

static void session_update_timer(Session *s) {
        uint64_t d;

        if (!s->timer_source || s->dead)
                return;
        d = session_deadline(s, NULL);
        if (d == UINT64_MAX) {
                (void) sd_event_source_set_enabled(s->timer_source, SD_EVENT_OFF);
                return;
        }
        (void) sd_event_source_set_time(s->timer_source, d);
        (void) sd_event_source_set_enabled(s->timer_source, SD_EVENT_ONESHOT);
}

/* One error line (id null) telling the client why, sent if the socket takes it now; then close. */
static void session_close_with_error(Session *s, const char *message) {
        _cleanup_json_ json_object *e = jsonrpc_error_new(NULL, JSONRPC_SERVER_LIMIT, message, NULL);
        const char *text;
        size_t len;

        if (e) {
                text = json_to_line(e, &len);
                if (buf_append(&s->out, text, len) >= 0 && buf_append(&s->out, "\n", 1) >= 0)
                        (void) buf_flush_fd(&s->out, s->out_fd);
        }
        session_close_later(s);
}

static int on_timer(sd_event_source *src, uint64_t usec, void *userdata) {
        Session *s = userdata;
        const char *why = NULL;
        char msg[256];

        if (s->dead)
                return 0;
        if (session_deadline(s, &why) > session_now(s) || !why) {
                session_update_timer(s);
                return 0;
        }
        log_info("Connection %" PRIu64 " (uid " UID_FMT "): closing: %s.", s->id, s->uid, why);
        snprintf(msg, sizeof(msg), "Closing the connection: %s", why);
        session_close_with_error(s, msg);
        return 0;
}

static void session_update_events(Session *s) {
        bool want_in = session_reading(s);
        bool want_out = buf_size(&s->out) > 0 && !s->dead;

        if (s->dead)
                return;
        session_update_timer(s);

        if (s->in_fd == s->out_fd) {
                /* One socket. EPOLLHUP is always reported, so a vanished client's runs
                 * are stopped even while we do not read. */
                uint32_t ev = (want_in ? EPOLLIN | EPOLLRDHUP : 0) | (want_out ? EPOLLOUT : 0);
                (void) sd_event_source_set_io_events(s->in_source, ev);
                (void) sd_event_source_set_enabled(s->in_source, SD_EVENT_ON);
                return;
        }

        if (s->in_pollable)
                (void) sd_event_source_set_enabled(s->in_source, want_in ? SD_EVENT_ON : SD_EVENT_OFF);
        else
                (void) sd_event_source_set_enabled(s->defer_source, want_in ? SD_EVENT_ON : SD_EVENT_OFF);
        if (s->out_pollable)
                (void) sd_event_source_set_enabled(s->out_source, want_out ? SD_EVENT_ON : SD_EVENT_OFF);
}

static int on_socket(sd_event_source *src, int fd, uint32_t revents, void *userdata) {
        uint64_t cpu0 = thread_cpu_usec();
        Session *s = userdata;

        if (revents & EPOLLOUT)
                on_out(src, fd, revents, userdata);
        if (!s->dead && (revents & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
                on_in(src, fd, revents, userdata);
        session_loop_account(s, cpu0);
        return 0;
}

static int on_stdin(sd_event_source *src, int fd, uint32_t revents, void *userdata) {
        uint64_t cpu0 = thread_cpu_usec();

        on_in(src, fd, revents, userdata);
        session_loop_account(userdata, cpu0);
        return 0;
}

static int on_stdout_hup(sd_event_source *src, int fd, uint32_t revents, void *userdata) {
        uint64_t cpu0 = thread_cpu_usec();

        on_out(src, fd, revents, userdata);
        session_loop_account(userdata, cpu0);
        return 0;
}

int session_new(Session **ret, sd_event *e, uint64_t id, int in_fd, int out_fd, const McpServer *server,
                const SessionLimits *limits, SessionClosedFunc closed, void *userdata) {
        Session *s;
        int r;

        s = calloc(1, sizeof(*s));
        if (!s) {
                safe_close(in_fd);
                if (out_fd != in_fd)
                        safe_close(out_fd);
                return -ENOMEM;
        }
        *s = (Session) {
                .event = sd_event_ref(e),
                .id = id,
                .in_fd = in_fd,
                .out_fd = out_fd,
                .limits = *limits,
                .closed = closed,
                .userdata = userdata,
                .uid = getuid(),
                .pid = 0,
        };
        framing_init(&s->framing, limits->max_message_size);
        s->line_elements = JSONRPC_ELEMENT_COUNT_INIT;
        s->created_usec = s->active_usec = session_now(s);

        struct ucred cred;
        socklen_t l = sizeof(cred);
        if (getsockopt(in_fd, SOL_SOCKET, SO_PEERCRED, &cred, &l) >= 0) {
                s->uid = cred.uid;
                s->pid = cred.pid;
        }

        r = mcp_session_new(&s->mcp, server, s->uid, s->pid, session_send, s);
        if (r < 0)
                goto fail;

        r = sd_event_add_defer(e, &s->defer_source, on_defer, s);
        if (r < 0)
                goto fail;
        (void) sd_event_source_set_enabled(s->defer_source, SD_EVENT_OFF);
        r = sd_event_add_defer(e, &s->parse_source, on_parse, s);
        if (r < 0)
                goto fail;
        (void) sd_event_source_set_enabled(s->parse_source, SD_EVENT_OFF);

        if (limits->charges) {
                /* Reply bytes are checked against the user's budget as they are queued. */
                r = charge_take(limits->charges, &s->replies, s->uid, CHARGE_REPLY_BYTES, 0);
                if (r == 0)
                        r = charge_take(limits->charges, &s->input, s->uid, CHARGE_INPUT_BYTES, 0);
                if (r == 0)
                        r = charge_take(limits->charges, &s->parsing, s->uid, CHARGE_PARSES, 0);
                if (r != 0) {
                        r = r < 0 ? r : -ENOBUFS;
                        goto fail;
                }
        }
        if (limits->loop_share) {
                r = scheduler_loop_join(limits->loop_share, &s->loop, s->uid);
                if (r < 0)
                        goto fail;
        }
        if (limits->initialize_timeout_usec > 0 || limits->line_timeout_usec > 0 || limits->idle_timeout_usec > 0) {
                r = sd_event_add_time(e, &s->timer_source, CLOCK_MONOTONIC, UINT64_MAX, USEC_PER_SEC / 20, on_timer, s);
                if (r < 0)
                        goto fail;
                (void) sd_event_source_set_enabled(s->timer_source, SD_EVENT_OFF);
        }

        if (in_fd == out_fd) {
                int type = 0;
                socklen_t tl = sizeof(type);
                /* A Unix stream socket (not --stdio): clients may pass fds with their messages. */
                s->in_socket = getsockopt(in_fd, SOL_SOCKET, SO_TYPE, &type, &tl) >= 0 && type == SOCK_STREAM;
                (void) fcntl(in_fd, F_SETFL, fcntl(in_fd, F_GETFL) | O_NONBLOCK);
                r = sd_event_add_io(e, &s->in_source, in_fd, EPOLLIN | EPOLLRDHUP, on_socket, s);
                if (r < 0)
                        goto fail;
                s->in_pollable = s->out_pollable = true;
        } else {
                r = sd_event_add_io(e, &s->in_source, in_fd, EPOLLIN, on_stdin, s);
                if (r == -EPERM) {
                        /* Regular files cannot be polled; they are always readable. */
                        s->in_pollable = false;
                } else if (r < 0)
                        goto fail;
                else
                        s->in_pollable = true;

                r = sd_event_add_io(e, &s->out_source, out_fd, EPOLLOUT, on_stdout_hup, s);
                if (r == -EPERM)
                        s->out_pollable = false;
                else if (r < 0)
                        goto fail;
                else {
                        s->out_pollable = true;
                        (void) sd_event_source_set_enabled(s->out_source, SD_EVENT_OFF);
                }
        }

        session_update_events(s);
        *ret = s;
        return 0;
fail:
        session_free(s);
        return r;
}

void session_stop(Session *s) {
        s->stopping = true;
        session_update_events(s);
        session_check_done(s);
}

Session *session_free(Session *s) {
        if (!s)
                return NULL;
        s->dead = true;
        waitq_cancel(s->input_wait);
        s->input_wait = NULL;
        mcp_session_free(s->mcp);
        sd_event_source_disable_unref(s->in_source);
        sd_event_source_disable_unref(s->out_source);
        sd_event_source_disable_unref(s->defer_source);
        sd_event_source_disable_unref(s->timer_source);
        if (s->parser)
                session_parse_end(s);
        sd_event_source_disable_unref(s->parse_source);
        charge_release(&s->parsing);
        charge_release(&s->replies);
        charge_release(&s->input);
        charge_release(&s->connection);
        scheduler_loop_leave(&s->loop);
        /* stdin/stdout belong to the process; sockets are ours. */
        if (s->in_fd > STDERR_FILENO)
                safe_close(s->in_fd);
        if (s->out_fd != s->in_fd && s->out_fd > STDERR_FILENO)
                safe_close(s->out_fd);
        framing_done(&s->framing);
        fdqueue_done(&s->fds);
        buf_clear(&s->out);
        sd_event_unref(s->event);
        free(s);
        return NULL;
}

/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Session: one client connection (a Unix socket, or stdin/stdout) carrying
 * one MCP session. Non-blocking I/O with bounded buffers: input is framed
 * line by line; output is queued, and reading stops while too much output
 * waits for a client that does not read.
 */

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <systemd/sd-event.h>

#include "buf.h"
#include "charge.h"
#include "jsonrpc/jsonrpc.h"
#include "mcp/mcp.h"
#include "protocol/fdqueue.h"
#include "protocol/framing.h"
#include "scheduler/scheduler.h"
#include "waitq.h"

/* A complete line longer than this is parsed this much at a time, one slice per turn of the event loop. */
#define SESSION_PARSE_SLICE ((size_t) 256 * 1024)
/*
 * While a line is parsed a slice at a time it counts this many times its length against max-input-buffer-per-user:
 * the line itself, json-c's copy of a string as it reads it, and the string in the value (see
 * jsonrpc_parser_new()).
 */
#define SESSION_PARSE_COST 3

typedef struct Session Session;
typedef void (*SessionClosedFunc)(Session *s, void *userdata);

typedef struct SessionLimits {
        size_t max_message_size;
        size_t output_high_water;  /* stop reading above this much queued output */
        size_t max_reply_buffer;   /* a reply beyond this is replaced by an error; 0: no limit */
        uint64_t initialize_timeout_usec;       /* deadlines; 0: none */
        uint64_t line_timeout_usec;
        uint64_t idle_timeout_usec;
        ChargeRegistry *charges;   /* queued reply and input bytes are charged here to the peer; NULL: nowhere */
        WaitQueue *input_waiters;  /* a connection whose user is over max-input-buffer-per-user while a line of
                                    * its user is parsed stops reading and waits here for the parse to end (the
                                    * owner's; the sessions share it); NULL: it is closed, as when none is parsed */
        Scheduler *loop_share;     /* the loop's CPU its callbacks take is charged here to the peer, and orders
                                    * them (scheduler_loop_priority()); NULL: not */
} SessionLimits;

struct Session {
        sd_event *event;
        Session *next, *prev;
        uint64_t id;
        int in_fd, out_fd;
        bool in_pollable, out_pollable;
        sd_event_source *in_source, *out_source, *defer_source, *timer_source;
        Framing framing;
        bool in_socket;            /* fds may come with the input (SCM_RIGHTS) */
        uint64_t in_total;         /* bytes read so far: the stream offset of the next byte */
        JsonrpcElementCount line_elements;      /* the values of the line being received, counted as it comes */
        uint64_t line_start, line_counted;      /* its stream offset, and that of the first byte not counted */
        FdQueue fds;               /* fds that came, waiting for their line */
        JsonrpcParser *parser;     /* the complete line being parsed a slice at a time (no other line is taken and
                                    * nothing is read meanwhile); NULL: none */
        size_t parse_len;          /* its length */
        int parse_fds[FDQUEUE_MAX_FDS];         /* the fds that came with it */
        size_t parse_n_fds;
        sd_event_source *parse_source;          /* parses the next slice, at the connection's priority */
        Charge parsing;            /* 1 while a line of this connection is parsed: others of its user may wait */
        WaitEntry *input_wait;     /* over the user's input budget: not reading until a parse of its user ends */
        Buf out;
        SessionLimits limits;
        McpSession *mcp;
        uid_t uid;
        pid_t pid;
        Charge connection;         /* this connection, against the peer's max-connections-per-user */
        Charge replies;            /* queued reply bytes, against max-reply-buffer-per-user */
        Charge input;              /* bytes of unfinished lines, against max-input-buffer-per-user */
        SchedLoop loop;            /* the loop's CPU its callbacks took, charged to the peer */
        int loop_priority;         /* its sources' sd-event priority, as the scheduler last said */
        uint64_t created_usec;     /* CLOCK_MONOTONIC */
        uint64_t active_usec;      /* the last request, or the last reply */
        uint64_t line_usec;        /* when the incomplete line held now began; 0: none */
        bool withheld_logged;
        bool held_back;            /* stopped taking requests while replies wait */
        bool read_eof;             /* no more input: finish what runs, then close */
        bool stopping;             /* the daemon is shutting down */
        bool dead;                 /* closed; waiting to be freed */
        SessionClosedFunc closed;
        void *userdata;
};

/* Takes ownership of the fds (in_fd may equal out_fd for a socket). */
int session_new(Session **ret, sd_event *e, uint64_t id, int in_fd, int out_fd, const McpServer *server,
                const SessionLimits *limits, SessionClosedFunc closed, void *userdata);
Session *session_free(Session *s);
/* Stop reading; close once in-flight calls are answered and output is flushed. */
void session_stop(Session *s);
/* No call in flight and nothing queued to send (for tests: what the idle timeout waits for). */
bool session_is_idle(const Session *s);

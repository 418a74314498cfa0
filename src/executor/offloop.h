/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * File work too long for the event loop (an environment of thousands of files to verify, make read-only, or
 * give its bytecode), done in a forked child of the daemon instead: the child runs only the function it is given,
 * as the daemon's user, and reports its result (0 or -errno, or a documented positive value) and a message of a
 * few lines on a pipe; the parent hears of it through the loop. Children, never threads.
 */

#include <stddef.h>
#include <stdint.h>
#include <systemd/sd-event.h>

typedef struct OffLoopJob OffLoopJob;

/* In the child: what the parent's done hears (ret_message: malloc'd, may stay NULL). */
typedef int (*OffLoopFunc)(void *userdata, char **ret_message);
/* In the parent: r is -EIO when the child died without a report (killed, out of memory), -ETIME when it was
 * killed for running past its time. */
typedef void (*OffLoopDoneFunc)(int r, const char *message, void *userdata);

/* With a report of up to 64 KiB and no time limit. */
int offloop_spawn(sd_event *e, const char *comm, OffLoopFunc f, OffLoopDoneFunc done, void *userdata,
                  OffLoopJob **ret);
/* report_max: bytes of the report kept (the buffer grows to it as the report comes; the rest is dropped, so a
 * longer message arrives cut). timeout_usec (0: none): then the child is killed and done gets -ETIME. */
int offloop_spawn_full(sd_event *e, const char *comm, size_t report_max, uint64_t timeout_usec, OffLoopFunc f,
                       OffLoopDoneFunc done, void *userdata, OffLoopJob **ret);
/* Kills the child if it still runs; done is not called. */
OffLoopJob *offloop_job_free(OffLoopJob *j);

/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Runtime: what the tools need to run scripts — the tools found on this
 * machine (bwrap, uv, Pythons), the environment store and the run scheduler.
 */

#include <stdbool.h>
#include <stdint.h>

typedef struct Manager Manager;
typedef struct Runtime Runtime;

int runtime_new(Runtime **ret, Manager *m);
Runtime *runtime_free(Runtime *r);
/* Background work after READY: probes, warm-up. Never delays serving. */
void runtime_start(Runtime *r);
bool runtime_is_idle(const Runtime *r);
void runtime_reload(Runtime *r);

/* Absolute path of uv (looked up in PATH when configured as a bare name), or NULL. */
const char *runtime_uv_path(const Runtime *r);

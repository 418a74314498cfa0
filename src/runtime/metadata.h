/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The metadata reader, an object of its own so that it can be driven without a Runtime: requests for a PEP 723
 * block's TOML, each answered by the daemon's own reading when the block is in the subset it knows
 * (pep723/toml-subset.h), else from the cache or by one reader process (metadata-reader.py under an interpreter of
 * 3.11 or later, which has tomllib), started by a spawn function the owner gives (the Runtime's: in the sandbox)
 * once the scheduler grants the caller a helper place (SCHED_HELPER). The Runtime owns one
 * (runtime_parse_toml(), runtime_toml_cancel()); unit tests give it a fake spawn.
 */

#include "runtime.h"

#define METADATA_CACHE_SIZE 256

/*
 * What a reader's answer may cost the daemon: its text, and its JSON values (jsonrpc_count_elements()), each an
 * object of json-c's of some METADATA_VALUE_COST bytes. The reader sends only what the daemon uses (the top-level
 * keys, requires-python and the dependencies), so an answer over METADATA_ANSWER_MAX_VALUES or
 * METADATA_ANSWER_MAX_BYTES is a block of thousands of dependencies or of absurdly long strings, refused with an
 * error that says so before it is parsed. The cache keeps answers that cost METADATA_CACHE_MAX_COST in all, the
 * oldest going first: a few MiB, however many distinct blocks come.
 */
#define METADATA_ANSWER_MAX_VALUES 4096
#define METADATA_ANSWER_MAX_BYTES (256 * 1024)
#define METADATA_VALUE_COST 64
#define METADATA_CACHE_MAX_COST (4 * 1024 * 1024)

/* Where the block is for the reader: a data file of its sandbox, its path the program's argument. */
#define METADATA_READER_PATH SANDBOX_WORK_DIR "/metadata.toml"

typedef struct MetadataReader MetadataReader;

/* Start command (py->executable, its options, the program, METADATA_READER_PATH) with data (the block at that
 * path). 0 and *ret, done to run when it is gone; RUNTIME_NO_SANDBOX when the sandbox does not work; -errno. */
typedef int (*MetadataSpawnFunc)(void *userdata, const Python *py, const SandboxData *data, char *const *command,
                                 ProcessDoneFunc done, void *done_userdata, Process **ret);

/* pythons is read at each request (it may grow). The runtime makes one with a spawn function that starts the
 * reader in the sandbox; for tests, with a fake one. */
int metadata_reader_new(MetadataReader **ret, sd_event *event, Scheduler *sched, const Pythons *pythons,
                        MetadataSpawnFunc spawn, void *userdata);
/* Cancels every request: none is answered. */
MetadataReader *metadata_reader_free(MetadataReader *m);
/* cb always runs later, from the loop (unless the request is cancelled first with runtime_toml_cancel()). The
 * runtime's runtime_parse_toml() calls it; for tests, directly. */
int metadata_reader_parse(MetadataReader *m, uid_t uid, const char *toml, TomlParsedFunc cb, void *userdata,
                          TomlRequest **ret);

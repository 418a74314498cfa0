/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Outputs: the figures and files a run hands back, turned into MCP content
 * blocks. Figures become image content, each after a text line that names it
 * (some clients drop images); files in the output directory come back inline
 * when they are small UTF-8 text, else as embedded resources. Counts and
 * sizes are capped here, whatever the sandbox sends: what does not fit is
 * listed as left out, with the reason.
 *
 * execute_python's sandbox writes records to a pipe, fed in as they arrive
 * with outputs_feed(); a malformed stream is dropped from there on. Each
 * record is: kind (1 byte), name length (4 bytes, big-endian), size (8 bytes,
 * big-endian), the name, then size bytes of payload for the upper-case kinds:
 *   'F' a figure, a PNG         'f' a figure the sandbox left out (no payload)
 *   'O' a file in the output    'o' a file the sandbox left out (no payload;
 *       directory                   size is the file's)
 *   'P' the sandbox imported these modules ahead (name: their names, separated
 *       by spaces; size: the KiB it held then; no payload)
 *   'M' the top-level packages the run loaded from site-packages (name, as
 *       for 'P'; "-" for none; no payload)
 *   'R' a pre-started sandbox is ready and waits for its script (no payload;
 *       the pool sees it as the pipe being readable)
 *   'X' the script is done: size is its exit status (no payload); the stream
 *       ends there
 * 'P' and 'M' are what the sandbox says: the script could write them too, so
 * they decide nothing beyond that run's own report and what a later run of the
 * environment imports ahead (src/tools/preimport.h, which checks it).
 */

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "protocol/limits.h"

#define OUTPUTS_DIR "/work/out"
#define OUTPUTS_INLINE_TEXT_MAX (64 * 1024)            /* text files up to this size come inline */
#define OUTPUTS_MAX_LISTED 64                          /* left-out entries named one by one */

typedef struct Outputs Outputs;

typedef enum OutputKind {
        OUTPUT_FIGURE,
        OUTPUT_FILE,
} OutputKind;

int outputs_new(Outputs **ret);
Outputs *outputs_free(Outputs *o);
static inline void outputs_freep(Outputs **o) {
        if (*o)
                outputs_free(*o);
}

/* Stream records from the sandbox (format above). Bounded memory whatever arrives. */
void outputs_feed(Outputs *o, const void *p, size_t n);

/* One item, with the data as base64 (the persistent sandbox's JSON replies); b64 NULL: the sender left it out
 * (size is what it would have been). */
void outputs_add_base64(Outputs *o, OutputKind kind, const char *name, uint64_t size, const char *b64);

/* The last 'P' record: the modules the sandbox imported ahead (NULL: none) and the KiB it held then. */
const char *outputs_preimported(const Outputs *o, uint64_t *ret_rss_kib);
/* The last 'M' record's list, or NULL. */
const char *outputs_loaded_modules(const Outputs *o);

/* The 'X' record came: true and *ret the exit status. */
bool outputs_finished(const Outputs *o, int *ret);

bool outputs_empty(const Outputs *o);
/* Append the content blocks: named images, inline text files, resources, then a note on what was left out. */
void outputs_append_content(const Outputs *o, json_object *content);
/* Free the figures' and files' bytes once the content holds them (up to OUTPUTS_MAX_TOTAL, that would otherwise
 * stay while the reply is written out); what is known of them (names, sizes, the JSON above) stays. */
void outputs_drop_payloads(Outputs *o);
/* The figures' and files' bytes held now. */
size_t outputs_payload_bytes(const Outputs *o);
/* For structuredContent: [{"name","width","height","bytes","included"[,"left_out"]}] */
json_object *outputs_figures_json(const Outputs *o);
/* [{"name","bytes","mime_type","included"[,"left_out"]}] */
json_object *outputs_files_json(const Outputs *o);
/* Figures and files that come back in content[]. A result with any goes without structuredContent: clients that
 * show structuredContent when there is one would hand the model neither the images nor the files. */
unsigned outputs_n_included(const Outputs *o);
/* Items not even listed, past OUTPUTS_MAX_LISTED. */
uint64_t outputs_n_unlisted(const Outputs *o);

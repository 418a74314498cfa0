/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "json-util.h"
#include "macro.h"
#include "mcp/tool.h"
#include "outputs.h"
#include "strv.h"
#include "utf8.h"

#define NAME_MAX_BYTES 4096
#define STR_(x) #x
#define STR(x) STR_(x)
#define HEADER_BYTES 13

typedef struct OutputItem {
        OutputKind kind;
        char *name;                     /* printable UTF-8 */
        uint64_t bytes;
        char *data;                     /* NULL: left out (left_out), or dropped (outputs_drop_payloads()) */
        size_t n;
        const char *left_out;           /* why, or NULL */
        unsigned width, height;         /* figures */
        bool text;                      /* files: see is_text() */
        const char *mime;
} OutputItem;

typedef enum StreamState {
        STREAM_HEADER,
        STREAM_NAME,
        STREAM_PAYLOAD,
} StreamState;

struct Outputs {
        OutputItem *items;
        size_t n_items, n_listed_out;
        unsigned n_figures, n_files;    /* included */
        uint64_t total;                 /* included bytes */
        uint64_t n_unlisted;

        /* outputs_feed() */
        StreamState state;
        uint8_t header[HEADER_BYTES];
        size_t header_len;
        char kind;
        char *name;
        size_t name_want, name_len;
        char *payload;                  /* NULL: discarding this payload */
        uint64_t payload_want, payload_len;
        bool broken;
        bool finished;                  /* the 'X' record came: nothing is read after it */
        int exit_status;
        char *preimported;              /* 'P': what the sandbox imported ahead, and its memory then */
        uint64_t preimport_rss_kib;
        char *loaded;                   /* 'M': the top-level packages the run loaded from site-packages */
};

int outputs_new(Outputs **ret) {
        Outputs *o = calloc(1, sizeof(*o));
        if (!o)
                return -ENOMEM;
        *ret = o;
        return 0;
}

Outputs *outputs_free(Outputs *o) {
        if (!o)
                return NULL;
        for (size_t i = 0; i < o->n_items; i++) {
                free(o->items[i].name);
                free(o->items[i].data);
        }
        free(o->items);
        free(o->preimported);
        free(o->loaded);
        free(o->name);
        free(o->payload);
        free(o);
        return NULL;
}

/* ---- helpers ------------------------------------------------------------- */

static const char b64_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Standard base64 of n bytes, NUL-terminated. */
static char *outputs_base64(const void *p, size_t n) {
        const uint8_t *s = p;
        char *out = malloc((n + 2) / 3 * 4 + 1), *d = out;

        if (!out)
                return NULL;
        for (size_t i = 0; i < n; i += 3) {
                uint32_t v = (uint32_t) s[i] << 16 | (i + 1 < n ? (uint32_t) s[i + 1] << 8 : 0) |
                             (i + 2 < n ? s[i + 2] : 0);
                *d++ = b64_alphabet[v >> 18 & 63];
                *d++ = b64_alphabet[v >> 12 & 63];
                *d++ = i + 1 < n ? b64_alphabet[v >> 6 & 63] : '=';
                *d++ = i + 2 < n ? b64_alphabet[v & 63] : '=';
        }
        *d = 0;
        return out;
}

static int b64_value(char c) {
        const char *p = c ? strchr(b64_alphabet, c) : NULL;
        return p ? (int) (p - b64_alphabet) : -1;
}

/* Strict standard base64 (padding required); at most max bytes. */
static int base64_decode(const char *s, size_t max, char **ret, size_t *ret_len) {
        size_t len = strlen(s), n = 0;
        _cleanup_free_ char *out = NULL;

        if (len % 4 != 0 || len / 4 * 3 > max + 2)
                return -EINVAL;
        out = malloc(len / 4 * 3 + 1);
        if (!out)
                return -ENOMEM;
        for (size_t i = 0; i < len; i += 4) {
                int v[4];
                bool last = i + 4 == len;
                for (size_t j = 0; j < 4; j++) {
                        v[j] = b64_value(s[i + j]);
                        if (v[j] < 0 && !(last && j >= 2 && s[i + j] == '=' && (j == 3 || s[i + 3] == '=')))
                                return -EINVAL;
                }
                out[n++] = (char) (v[0] << 2 | v[1] >> 4);
                if (v[2] >= 0)
                        out[n++] = (char) ((v[1] & 15) << 4 | v[2] >> 2);
                if (v[2] >= 0 && v[3] >= 0)
                        out[n++] = (char) ((v[2] & 3) << 6 | v[3]);
        }
        if (n > max)
                return -E2BIG;
        *ret = TAKE_PTR(out);
        *ret_len = n;
        return 0;
}

/* Printable: valid UTF-8 with control characters replaced (names end up in text lines). */
static char *printable_name(const char *s, size_t n) {
        size_t l;
        char *t = utf8_sanitize(s, n, &l);

        if (!t)
                return NULL;
        for (size_t i = 0; i < l; i++)
                if ((unsigned char) t[i] < 0x20 || t[i] == 0x7f)
                        t[i] = '?';
        return t;
}

/* Text: UTF-8 without control characters but tab, line breaks, form feed and escape (colours). */
static bool is_text(const char *p, size_t n) {
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char) p[i];
                if (c == 0 || (c < 0x20 && !strchr("\t\n\r\v\f\033", c)) || c == 0x7f)
                        return false;
        }
        return utf8_is_valid(p, n);
}

/* Width and height from a PNG's signature and IHDR chunk. */
static bool png_size(const char *p, size_t n, unsigned *ret_w, unsigned *ret_h) {
        static const uint8_t sig[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
        const uint8_t *b = (const uint8_t *) p;

        if (n < 24 || memcmp(b, sig, 8) != 0 || memcmp(b + 12, "IHDR", 4) != 0)
                return false;
        *ret_w = (unsigned) b[16] << 24 | (unsigned) b[17] << 16 | (unsigned) b[18] << 8 | b[19];
        *ret_h = (unsigned) b[20] << 24 | (unsigned) b[21] << 16 | (unsigned) b[22] << 8 | b[23];
        return *ret_w > 0 && *ret_h > 0;
}

/* The MIME type a name suggests, or NULL. */
static const char *outputs_mime_type(const char *name) {
        static const struct {
                const char *ext, *mime;
        } table[] = {
                { "png", "image/png" },         { "jpg", "image/jpeg" },         { "jpeg", "image/jpeg" },
                { "gif", "image/gif" },         { "webp", "image/webp" },        { "svg", "image/svg+xml" },
                { "bmp", "image/bmp" },         { "tif", "image/tiff" },         { "tiff", "image/tiff" },
                { "pdf", "application/pdf" },   { "csv", "text/csv" },           { "tsv", "text/tab-separated-values" },
                { "txt", "text/plain" },        { "log", "text/plain" },         { "md", "text/markdown" },
                { "html", "text/html" },        { "htm", "text/html" },          { "css", "text/css" },
                { "py", "text/x-python" },      { "json", "application/json" },  { "xml", "application/xml" },
                { "yaml", "application/yaml" }, { "yml", "application/yaml" },   { "toml", "application/toml" },
                { "js", "text/javascript" },    { "zip", "application/zip" },    { "gz", "application/gzip" },
                { "tar", "application/x-tar" }, { "wav", "audio/wav" },          { "mp3", "audio/mpeg" },
                { "mp4", "video/mp4" },         { "parquet", "application/vnd.apache.parquet" },
                { "xlsx", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet" },
                { "jsonl", "application/jsonl" },
        };
        const char *slash = strrchr(name, '/'), *dot = strrchr(slash ? slash + 1 : name, '.');

        if (!dot || dot[1] == 0)
                return NULL;
        for (size_t i = 0; i < ELEMENTSOF(table); i++)
                if (strcasecmp(dot + 1, table[i].ext) == 0)
                        return table[i].mime;
        return NULL;
}

static void format_size(uint64_t n, char buf[static 32]) {
        if (n >= 1024 * 1024 && n % (1024 * 1024) == 0)
                snprintf(buf, 32, "%" PRIu64 " MiB", n / (1024 * 1024));
        else
                snprintf(buf, 32, "%" PRIu64 " bytes", n);
}

/* ---- adding items -------------------------------------------------------- */

/* Why an item of this size cannot be included now, or NULL. */
static const char *admit(const Outputs *o, OutputKind kind, uint64_t size) {
        if (kind == OUTPUT_FIGURE && o->n_figures >= OUTPUTS_MAX_FIGURES)
                return "more figures than the " STR(OUTPUTS_MAX_FIGURES) " a run returns";
        if (kind == OUTPUT_FILE && o->n_files >= OUTPUTS_MAX_FILES)
                return "more files than the " STR(OUTPUTS_MAX_FILES) " a run returns";
        if (size > OUTPUTS_MAX_BYTES)
                return "larger than the 4 MiB cap on one output";
        if (o->total + size > OUTPUTS_MAX_TOTAL)
                return "over the 10 MiB cap on all outputs of a run together";
        return NULL;
}

/* Takes data (may be NULL: left out by the sender). */
static void add_item(Outputs *o, OutputKind kind, const char *name, size_t name_len, uint64_t size, char *data) {
        _cleanup_free_ char *owned = data;
        const char *reason = admit(o, kind, size);
        OutputItem it = { .kind = kind, .bytes = size };

        if (!reason && !data)
                reason = kind == OUTPUT_FIGURE ? "it could not be rendered" : "it could not be read";
        if (!reason && kind == OUTPUT_FIGURE && !png_size(data, size, &it.width, &it.height))
                reason = "not a PNG image";
        if (reason && o->n_listed_out >= OUTPUTS_MAX_LISTED) {
                o->n_unlisted++;
                return;
        }
        OutputItem *l = realloc(o->items, (o->n_items + 1) * sizeof(OutputItem));
        if (!l)
                return;
        o->items = l;
        it.name = printable_name(name, name_len);
        if (!it.name)
                return;
        if (reason) {
                it.left_out = reason;
                o->n_listed_out++;
        } else {
                it.data = TAKE_PTR(owned);
                it.n = (size_t) size;
                it.text = kind == OUTPUT_FILE && is_text(it.data, it.n);
                o->total += size;
                if (kind == OUTPUT_FIGURE)
                        o->n_figures++;
                else
                        o->n_files++;
        }
        if (kind == OUTPUT_FILE)
                it.mime = outputs_mime_type(it.name) ?: (it.text ? "text/plain" : "application/octet-stream");
        else
                it.mime = "image/png";
        o->items[o->n_items++] = it;
}

void outputs_add_base64(Outputs *o, OutputKind kind, const char *name, uint64_t size, const char *b64) {
        char *data = NULL;
        size_t n = 0;

        if (b64 && !admit(o, kind, size) && base64_decode(b64, OUTPUTS_MAX_BYTES, &data, &n) >= 0)
                size = n;
        add_item(o, kind, name, strlen(name), size, data);
}

/* ---- the stream ------------------------------------------------------------ */

static void stream_item_done(Outputs *o) {
        OutputKind kind = o->kind == 'F' || o->kind == 'f' ? OUTPUT_FIGURE : OUTPUT_FILE;

        add_item(o, kind, o->name, o->name_len, o->payload_want, TAKE_PTR(o->payload));
        free(o->name);
        o->name = NULL;
        o->state = STREAM_HEADER;
        o->header_len = 0;
}

void outputs_feed(Outputs *o, const void *p, size_t n) {
        const uint8_t *b = p;

        while (n > 0 && !o->broken) {
                size_t take = 0;

                switch (o->state) {
                case STREAM_HEADER:
                        take = MIN(n, HEADER_BYTES - o->header_len);
                        memcpy(o->header + o->header_len, b, take);
                        o->header_len += take;
                        if (o->header_len < HEADER_BYTES)
                                break;
                        o->kind = (char) o->header[0];
                        o->name_want = (size_t) o->header[1] << 24 | (size_t) o->header[2] << 16 |
                                       (size_t) o->header[3] << 8 | o->header[4];
                        o->payload_want = 0;
                        for (size_t i = 5; i < HEADER_BYTES; i++)
                                o->payload_want = o->payload_want << 8 | o->header[i];
                        if (o->kind == 'X') {
                                o->finished = true;
                                o->exit_status = (int) (o->payload_want & 0xff);
                                o->broken = true;   /* the end */
                                break;
                        }
                        if (!strchr("FfOoPMR", o->kind) || o->kind == 0 || o->name_want == 0 ||
                            o->name_want > NAME_MAX_BYTES) {
                                o->broken = true;
                                break;
                        }
                        o->name = malloc(o->name_want + 1);
                        if (!o->name) {
                                o->broken = true;
                                break;
                        }
                        o->name_len = 0;
                        o->state = STREAM_NAME;
                        break;

                case STREAM_NAME:
                        take = MIN(n, o->name_want - o->name_len);
                        memcpy(o->name + o->name_len, b, take);
                        o->name_len += take;
                        if (o->name_len < o->name_want)
                                break;
                        o->name[o->name_len] = 0;
                        if (o->kind == 'R') {   /* the pre-started sandbox was ready: nothing to keep */
                                o->name = mfree(o->name);
                                o->state = STREAM_HEADER;
                                o->header_len = 0;
                                break;
                        }
                        if (o->kind == 'P' || o->kind == 'M') {   /* facts about the run: the last of each counts */
                                char **slot = o->kind == 'P' ? &o->preimported : &o->loaded;
                                free(*slot);
                                *slot = TAKE_PTR(o->name);
                                if (o->kind == 'P')
                                        o->preimport_rss_kib = o->payload_want;
                                o->state = STREAM_HEADER;
                                o->header_len = 0;
                                break;
                        }
                        if (o->kind == 'f' || o->kind == 'o') {   /* left out by the sender: no payload */
                                stream_item_done(o);
                                break;
                        }
                        /* Past a cap: read the payload and drop it. */
                        if (!admit(o, o->kind == 'F' ? OUTPUT_FIGURE : OUTPUT_FILE, o->payload_want))
                                o->payload = malloc((size_t) o->payload_want + 1);
                        o->payload_len = 0;
                        o->state = STREAM_PAYLOAD;
                        if (o->payload_want == 0)
                                stream_item_done(o);
                        break;

                case STREAM_PAYLOAD:
                        take = (size_t) MIN((uint64_t) n, o->payload_want - o->payload_len);
                        if (o->payload)
                                memcpy(o->payload + o->payload_len, b, take);
                        o->payload_len += take;
                        if (o->payload_len == o->payload_want)
                                stream_item_done(o);
                        break;
                }
                b += take;
                n -= take;
        }
}

/* ---- results --------------------------------------------------------------- */

const char *outputs_preimported(const Outputs *o, uint64_t *ret_rss_kib) {
        if (!o || !o->preimported)
                return NULL;
        if (ret_rss_kib)
                *ret_rss_kib = o->preimport_rss_kib;
        return o->preimported;
}

const char *outputs_loaded_modules(const Outputs *o) {
        return o ? o->loaded : NULL;
}

bool outputs_finished(const Outputs *o, int *ret) {
        if (!o || !o->finished)
                return false;
        if (ret)
                *ret = o->exit_status;
        return true;
}

void outputs_drop_payloads(Outputs *o) {
        if (!o)
                return;
        for (size_t i = 0; i < o->n_items; i++)
                o->items[i].data = mfree(o->items[i].data);
}

size_t outputs_payload_bytes(const Outputs *o) {
        size_t n = 0;

        for (size_t i = 0; o && i < o->n_items; i++)
                if (o->items[i].data)
                        n += o->items[i].n;
        return n;
}

bool outputs_empty(const Outputs *o) {
        return !o || (o->n_items == 0 && o->n_unlisted == 0);
}

unsigned outputs_n_included(const Outputs *o) {
        return o ? o->n_figures + o->n_files : 0;
}

uint64_t outputs_n_unlisted(const Outputs *o) {
        return o ? o->n_unlisted : 0;
}

static char *display_name(const OutputItem *it) {
        char *s = NULL;
        if (it->kind == OUTPUT_FIGURE)
                return strdup(it->name);
        if (asprintf(&s, "out/%s", it->name) < 0)
                return NULL;
        return s;
}

/* file:///work/out/NAME, the name percent-encoded where it must be. */
static char *file_uri(const char *name) {
        static const char hex[] = "0123456789ABCDEF";
        size_t l = strlen(name);
        char *s = malloc(strlen("file://" OUTPUTS_DIR "/") + l * 3 + 1), *d;

        if (!s)
                return NULL;
        d = stpcpy(s, "file://" OUTPUTS_DIR "/");
        for (const unsigned char *p = (const unsigned char *) name; *p; p++) {
                if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                    strchr("-._~/", *p))
                        *d++ = (char) *p;
                else {
                        *d++ = '%';
                        *d++ = hex[*p >> 4];
                        *d++ = hex[*p & 15];
                }
        }
        *d = 0;
        return s;
}

static json_object *text_block_len(const char *s, size_t n) {
        json_object *o = json_object_new_object();
        json_add_string(o, "type", "text");
        json_add(o, "text", json_object_new_string_len(s, (int) n));
        return o;
}

static void append_figure(const OutputItem *it, json_object *content) {
        _cleanup_free_ char *line = NULL, *b64 = NULL;

        b64 = outputs_base64(it->data, it->n);
        if (!b64 || asprintf(&line, "%s (%ux%u PNG)", it->name, it->width, it->height) < 0)
                return;
        json_object_array_add(content, content_text_new(line));
        json_object *img = json_object_new_object();
        json_add_string(img, "type", "image");
        json_add_string(img, "data", b64);
        json_add_string(img, "mimeType", "image/png");
        json_object_array_add(content, img);
}

static void append_file(const OutputItem *it, json_object *content) {
        _cleanup_free_ char *text = NULL, *uri = NULL, *b64 = NULL;
        size_t len = 0;

        if (it->text && it->n <= OUTPUTS_INLINE_TEXT_MAX) {
                /* Text has no NUL (is_text()), so printf's %.*s copies all of it; a last line gets its newline. */
                bool nl = it->n == 0 || it->data[it->n - 1] != '\n';
                if (strextendf_len(&text, &len, "--- file out/%s (%zu bytes) ---\n%.*s%s", it->name, it->n,
                                   (int) it->n, it->n > 0 ? it->data : "", nl ? "\n" : "") < 0)
                        return;
                json_object_array_add(content, text_block_len(text, len));
                return;
        }

        uri = file_uri(it->name);
        if (!it->text)
                b64 = outputs_base64(it->data, it->n);
        if (!uri || (!it->text && !b64))
                return;
        if (strextendf_len(&text, &len, "--- file out/%s (%zu bytes, %s): attached as a resource ---", it->name,
                           it->n, it->mime) < 0)
                return;
        json_object_array_add(content, text_block_len(text, len));
        json_object *res = json_object_new_object(), *block = json_object_new_object();
        json_add_string(res, "uri", uri);
        json_add_string(res, "mimeType", it->mime);
        if (it->text)
                json_add(res, "text", json_object_new_string_len(it->data, (int) it->n));
        else
                json_add_string(res, "blob", b64);
        json_add_string(block, "type", "resource");
        json_add(block, "resource", res);
        json_object_array_add(content, block);
}

void outputs_append_content(const Outputs *o, json_object *content) {
        _cleanup_free_ char *note = NULL;
        size_t len = 0;

        if (!o)
                return;
        for (size_t i = 0; i < o->n_items; i++)
                if (!o->items[i].left_out && o->items[i].kind == OUTPUT_FIGURE)
                        append_figure(&o->items[i], content);
        for (size_t i = 0; i < o->n_items; i++)
                if (!o->items[i].left_out && o->items[i].kind == OUTPUT_FILE)
                        append_file(&o->items[i], content);

        for (size_t i = 0; i < o->n_items; i++) {
                const OutputItem *it = &o->items[i];
                _cleanup_free_ char *name = NULL;
                char size[32];

                if (!it->left_out)
                        continue;
                if (!note)
                        strextendf_len(&note, &len, "--- left out ---\n");
                name = display_name(it);
                format_size(it->bytes, size);
                if (it->bytes > 0)
                        strextendf_len(&note, &len, "%s (%s): %s\n", strempty(name), size, it->left_out);
                else
                        strextendf_len(&note, &len, "%s: %s\n", strempty(name), it->left_out);
        }
        if (o->n_unlisted > 0) {
                if (!note)
                        strextendf_len(&note, &len, "--- left out ---\n");
                strextendf_len(&note, &len, "... and %" PRIu64 " more figures or files\n", o->n_unlisted);
        }
        if (note)
                json_object_array_add(content, text_block_len(note, len));
}

static json_object *item_json(const OutputItem *it) {
        json_object *j = json_object_new_object();

        json_add_string(j, "name", it->name);
        if (it->kind == OUTPUT_FIGURE && !it->left_out) {
                json_add_int(j, "width", it->width);
                json_add_int(j, "height", it->height);
        }
        json_add_int(j, "bytes", (int64_t) MIN(it->bytes, (uint64_t) INT64_MAX));
        if (it->kind == OUTPUT_FILE)
                json_add_string(j, "mime_type", it->mime);
        json_add_bool(j, "included", !it->left_out);
        if (it->left_out)
                json_add_string(j, "left_out", it->left_out);
        return j;
}

static json_object *items_json(const Outputs *o, OutputKind kind) {
        json_object *a = json_object_new_array();

        for (size_t i = 0; o && i < o->n_items; i++)
                if (o->items[i].kind == kind)
                        json_object_array_add(a, item_json(&o->items[i]));
        return a;
}

json_object *outputs_figures_json(const Outputs *o) {
        return items_json(o, OUTPUT_FIGURE);
}

json_object *outputs_files_json(const Outputs *o) {
        return items_json(o, OUTPUT_FILE);
}

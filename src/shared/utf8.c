/* SPDX-License-Identifier: MIT */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"

/* Length of the valid UTF-8 sequence at s, or 0 if it is not valid. */
static size_t valid_sequence(const unsigned char *s, size_t n, uint32_t *ret_cp) {
        uint32_t cp;
        size_t len;

        if (s[0] < 0x80) {
                *ret_cp = s[0];
                return 1;
        }
        if (s[0] >= 0xc2 && s[0] <= 0xdf)
                len = 2, cp = s[0] & 0x1f;
        else if (s[0] >= 0xe0 && s[0] <= 0xef)
                len = 3, cp = s[0] & 0x0f;
        else if (s[0] >= 0xf0 && s[0] <= 0xf4)
                len = 4, cp = s[0] & 0x07;
        else
                return 0;
        if (n < len)
                return 0;
        for (size_t i = 1; i < len; i++) {
                if ((s[i] & 0xc0) != 0x80)
                        return 0;
                cp = cp << 6 | (s[i] & 0x3f);
        }
        /* Overlong forms, surrogates and values past U+10FFFF. */
        if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
            (cp >= 0xd800 && cp <= 0xdfff))
                return 0;
        *ret_cp = cp;
        return len;
}

char *utf8_sanitize(const char *s, size_t n, size_t *ret_len) {
        const unsigned char *p = (const unsigned char *) s;
        char *out = malloc(n * 3 + 1), *o = out;

        if (!out)
                return NULL;
        for (size_t i = 0; i < n;) {
                size_t l = valid_sequence(p + i, n - i, &(uint32_t) { 0 });
                if (l == 0) {
                        memcpy(o, "\xef\xbf\xbd", 3);
                        o += 3;
                        i++;
                        continue;
                }
                memcpy(o, p + i, l);
                o += l;
                i += l;
        }
        *o = 0;
        if (ret_len)
                *ret_len = (size_t) (o - out);
        return out;
}

char *utf8_escape_line(const char *s, size_t n) {
        static const char hex[] = "0123456789abcdef";
        const unsigned char *p = (const unsigned char *) s;
        char *out, *o;

        if (n > (SIZE_MAX - 1) / 4)
                return NULL;
        out = o = malloc(n * 4 + 1);
        if (!out)
                return NULL;
        for (size_t i = 0; i < n;) {
                size_t l = valid_sequence(p + i, n - i, &(uint32_t) { 0 });
                /* C1 controls, U+0080 to U+009F: some terminals take U+009B for an escape sequence. */
                bool c1 = l == 2 && p[i] == 0xc2 && p[i + 1] < 0xa0;
                bool plain = l > 1 ? !c1
                                   : l == 1 && p[i] >= 0x20 && p[i] != 0x7f && p[i] != '\\' && !(i == 0 && p[i] == '<');

                if (plain) {
                        memcpy(o, p + i, l);
                        o += l;
                        i += l;
                        continue;
                }
                /* One byte at a time: an invalid sequence may hide the start of a valid one. */
                for (size_t k = 0; k < (c1 ? 2 : 1); k++, i++) {
                        *o++ = '\\';
                        *o++ = 'x';
                        *o++ = hex[p[i] >> 4];
                        *o++ = hex[p[i] & 15];
                }
        }
        *o = 0;
        return out;
}

size_t utf8_decode(const char *s, size_t n, uint32_t *ret_cp) {
        return n == 0 ? 0 : valid_sequence((const unsigned char *) s, n, ret_cp);
}

/* Whether the 8 bytes at p are all ASCII: one test for the whole word. */
static bool word_is_ascii(const unsigned char *p) {
        uint64_t w;

        memcpy(&w, p, sizeof(w));
        return (w & UINT64_C(0x8080808080808080)) == 0;
}

bool utf8_is_valid(const char *s, size_t n) {
        const unsigned char *p = (const unsigned char *) s;

        for (size_t i = 0; i < n;) {
                /* Runs of ASCII, the most of any message, a word at a time; a sequence that starts in a word is
                 * checked byte by byte below, wherever it ends. */
                while (n - i >= 16 && word_is_ascii(p + i) && word_is_ascii(p + i + 8))
                        i += 16;
                if (i == n)
                        break;
                if (p[i] < 0x80) {
                        i++;
                        continue;
                }
                size_t l = valid_sequence(p + i, n - i, &(uint32_t) { 0 });
                if (l == 0)
                        return false;
                i += l;
        }
        return true;
}

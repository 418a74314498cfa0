/* SPDX-License-Identifier: MIT */
/*
 * The network proxy's parsers, with what a hostile sandbox sends: a request head arriving in arbitrary pieces
 * (as the proxy reads it), and allowlist entries and hosts. Never a crash, never a head over the limit taken, and
 * what goes upstream is one well-formed head: its request line, header lines each ending in CRLF, one empty line
 * at the end and nowhere else, with the host as the allowlist saw it.
 */
#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "netproxy/allowlist.h"
#include "netproxy/request.h"
#include "strv.h"

static void check_request(const NetRequest *r, size_t consumed, size_t n) {
        _cleanup_free_ char *again = NULL;
        bool literal;

        assert(consumed <= n && consumed <= NET_REQUEST_HEAD_MAX);
        assert(r->host && r->port > 0);
        /* The host is normalized: normalizing it again changes nothing. */
        assert(net_host_normalize(r->host, strlen(r->host), &again, &literal) == 0);
        assert(strcmp(again, r->host) == 0);
        if (r->connect) {
                assert(!r->upstream);
                return;
        }
        assert(r->upstream && r->upstream_len == strlen(r->upstream));
        const char *end = strstr(r->upstream, "\r\n\r\n");
        assert(end && (size_t) (end - r->upstream) + 4 == r->upstream_len);
        for (size_t i = 0; i < r->upstream_len; i++) {
                if (r->upstream[i] == '\r')
                        assert(r->upstream[i + 1] == '\n');
                if (r->upstream[i] == '\n')
                        assert(i > 0 && r->upstream[i - 1] == '\r');
                assert(r->upstream[i] != 0);
        }
        assert(strstr(r->upstream, "\r\nConnection: close\r\n\r\n"));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const char *buf = (const char *) data + 1;
        size_t n, chunk;

        if (size < 1)
                return 0;
        n = size - 1;
        if (data[0] & 0x80) {
                /* Allowlist entries, then each entry as a host asked for. */
                _cleanup_free_ char *s = strndup(buf, n);
                _cleanup_strv_free_ char **l = s ? strv_split(s, " \n") : NULL;
                _cleanup_free_ char *error = NULL;
                NetAllowlist a = {};
                if (!l)
                        return 0;
                if (net_allowlist_parse(l, &a, &error) == 0)
                        for (size_t i = 0; l[i]; i++) {
                                _cleanup_free_ char *h = NULL;
                                bool literal;
                                if (net_host_normalize(l[i], strlen(l[i]), &h, &literal) == 0)
                                        (void) net_allowlist_match(&a, h, (uint16_t) (data[0] & 0x7f) + 400);
                        }
                net_allowlist_done(&a);
                return 0;
        }

        /* The head as the proxy sees it: a longer prefix after each read. */
        chunk = (size_t) data[0] % 64 + 1;
        for (size_t have = chunk < n ? chunk : n;; have = have + chunk < n ? have + chunk : n) {
                NetRequest r = {};
                size_t consumed = 0;
                int k = net_request_parse(buf, have, &r, &consumed);
                if (k == NET_REQUEST_DONE) {
                        check_request(&r, consumed, have);
                        net_request_done(&r);
                        break;
                }
                assert(k == NET_REQUEST_MORE || k == -EBADMSG || k == -E2BIG);
                if (k == NET_REQUEST_MORE)
                        assert(have < NET_REQUEST_HEAD_MAX);
                if (k < 0 || have == n)
                        break;
        }
        return 0;
}

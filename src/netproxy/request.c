/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "allowlist.h"
#include "macro.h"
#include "request.h"
#include "strv.h"

static bool tchar(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Visible characters only: no controls, no spaces, nothing over 0x7e. */
static bool vchars(const char *s, size_t n) {
        for (size_t i = 0; i < n; i++)
                if ((unsigned char) s[i] <= 0x20 || (unsigned char) s[i] >= 0x7f)
                        return false;
        return true;
}

/* "host:port", "host", "[v6]:port", "[v6]" (n bytes): the normalized host and the port (default_port if none). */
static int parse_authority(const char *s, size_t n, uint16_t default_port, char **ret_host, uint16_t *ret_port) {
        const char *port = NULL;
        size_t hn = n;
        unsigned v = 0;
        bool literal;

        if (n == 0 || memchr(s, '@', n))
                return -EBADMSG;
        if (s[0] == '[') {
                const char *close = memchr(s, ']', n);
                if (!close)
                        return -EBADMSG;
                hn = (size_t) (close + 1 - s);
                if (hn < n) {
                        if (s[hn] != ':')
                                return -EBADMSG;
                        port = s + hn + 1;
                }
        } else {
                const char *colon = memchr(s, ':', n);
                if (colon) {
                        hn = (size_t) (colon - s);
                        port = colon + 1;
                }
        }
        if (port) {
                size_t pn = (size_t) (s + n - port);
                if (pn == 0 || pn > 5)
                        return -EBADMSG;
                for (size_t i = 0; i < pn; i++) {
                        if (port[i] < '0' || port[i] > '9')
                                return -EBADMSG;
                        v = v * 10 + (unsigned) (port[i] - '0');
                }
                if (v == 0 || v > 65535)
                        return -EBADMSG;
        } else if (default_port == 0)
                return -EBADMSG;
        if (net_host_normalize(s, hn, ret_host, &literal) < 0)
                return -EBADMSG;
        *ret_port = port ? (uint16_t) v : default_port;
        return 0;
}

/* Headers a proxy consumes or replaces rather than passes on. */
static bool hop_header(const char *name, size_t n) {
        static const char *const hop[] = { "connection", "proxy-connection", "keep-alive", "proxy-authorization",
                                           "proxy-authenticate", "host", "te", "upgrade" };
        for (size_t i = 0; i < ELEMENTSOF(hop); i++)
                if (strlen(hop[i]) == n && strncasecmp(hop[i], name, n) == 0)
                        return true;
        return false;
}

static int parse_head(const char *buf, size_t head_len, NetRequest *ret) {
        _cleanup_free_ char *host = NULL, *up = NULL;
        const char *p = buf, *end = buf + head_len, *eol, *sp1, *sp2;
        const char *target, *path;
        size_t method_len, target_len, up_len = 0, n_headers = 0;
        uint16_t port;
        bool connect;
        int k;

        /* The request line: METHOD SP target SP HTTP/1.x */
        eol = memmem(p, (size_t) (end - p), "\r\n", 2);
        if (!eol)
                return -EBADMSG;
        sp1 = memchr(p, ' ', (size_t) (eol - p));
        if (!sp1 || sp1 == p)
                return -EBADMSG;
        sp2 = memchr(sp1 + 1, ' ', (size_t) (eol - sp1 - 1));
        if (!sp2 || sp2 == sp1 + 1)
                return -EBADMSG;
        method_len = (size_t) (sp1 - p);
        for (size_t i = 0; i < method_len; i++)
                if (!tchar(p[i]))
                        return -EBADMSG;
        if ((size_t) (eol - sp2 - 1) != 8 || memcmp(sp2 + 1, "HTTP/1.", 7) != 0 || (sp2[8] != '0' && sp2[8] != '1'))
                return -EBADMSG;
        target = sp1 + 1;
        target_len = (size_t) (sp2 - target);
        if (!vchars(target, target_len) || memchr(target, '#', target_len))   /* a fragment is never sent */
                return -EBADMSG;

        connect = method_len == 7 && memcmp(p, "CONNECT", 7) == 0;
        if (connect) {
                k = parse_authority(target, target_len, 0, &host, &port);
                if (k < 0)
                        return k;
                path = NULL;
        } else {
                const char *a, *aend;
                if (target_len < 8 || strncasecmp(target, "http://", 7) != 0)
                        return -EBADMSG;
                a = target + 7;
                aend = a;
                while (aend < sp2 && *aend != '/' && *aend != '?' && *aend != '#')
                        aend++;
                k = parse_authority(a, (size_t) (aend - a), 80, &host, &port);
                if (k < 0)
                        return k;
                path = aend;
                /* METHOD origin-form HTTP/1.x, then Host: as the URI says. */
                /* The client's HTTP version: a 1.0 client must not get a chunked answer. */
                if (strextendf_len(&up, &up_len, "%.*s %s%.*s HTTP/1.%c\r\nHost: %.*s\r\n", (int) method_len, p,
                                   *path == '/' ? "" : "/", (int) (sp2 - path), path, sp2[8], (int) (aend - a), a) < 0)
                        return -ENOMEM;
        }

        /* Header lines: name ":" value, no folding, no bare CR or NUL. */
        for (p = eol + 2; p < end - 2; p = eol + 2) {
                const char *colon;
                eol = memmem(p, (size_t) (end - p), "\r\n", 2);
                if (!eol || eol == p)
                        break;
                if (++n_headers > NET_REQUEST_HEADERS_MAX)
                        return -E2BIG;
                colon = memchr(p, ':', (size_t) (eol - p));
                if (!colon || colon == p)
                        return -EBADMSG;
                for (const char *c = p; c < colon; c++)
                        if (!tchar(*c))
                                return -EBADMSG;
                for (const char *c = colon + 1; c < eol; c++)
                        if ((unsigned char) *c < 0x20 && *c != '\t')
                                return -EBADMSG;
                if (connect || hop_header(p, (size_t) (colon - p)))
                        continue;
                if (strextendf_len(&up, &up_len, "%.*s\r\n", (int) (eol - p), p) < 0)
                        return -ENOMEM;
        }
        if (!connect && strextendf_len(&up, &up_len, "Connection: close\r\n\r\n") < 0)
                return -ENOMEM;

        *ret = (NetRequest) {
                .connect = connect,
                .host = TAKE_PTR(host),
                .port = port,
                .upstream = TAKE_PTR(up),
                .upstream_len = up_len,
        };
        return 0;
}

int net_request_parse(const char *buf, size_t n, NetRequest *ret, size_t *ret_consumed) {
        size_t scan = MIN(n, (size_t) NET_REQUEST_HEAD_MAX);
        const char *end;
        int k;

        /* The head ends at the first empty line; what follows (a body, a TLS hello) is not ours to judge. */
        end = memmem(buf, scan, "\r\n\r\n", 4);
        size_t head_len = end ? (size_t) (end - buf) + 4 : scan;
        if (memchr(buf, 0, head_len))
                return -EBADMSG;
        if (!end)
                return n >= NET_REQUEST_HEAD_MAX ? -E2BIG : NET_REQUEST_MORE;
        k = parse_head(buf, head_len, ret);
        if (k < 0)
                return k;
        *ret_consumed = head_len;
        return NET_REQUEST_DONE;
}

void net_request_done(NetRequest *r) {
        r->host = mfree(r->host);
        r->upstream = mfree(r->upstream);
        r->upstream_len = 0;
}

/* SPDX-License-Identifier: MIT */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "allowlist.h"
#include "macro.h"
#include "strv.h"

static bool host_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

int net_host_normalize(const char *host, size_t n, char **ret, bool *ret_literal) {
        char buf[NET_HOST_MAX + 2], out[INET6_ADDRSTRLEN];
        struct in6_addr a6;
        struct in_addr a4;
        size_t label = 0;

        if (n == 0 || n > NET_HOST_MAX + 1)
                return -EINVAL;
        /* An IPv6 address, bracketed or not. */
        if (host[0] == '[') {
                if (n < 3 || host[n - 1] != ']')
                        return -EINVAL;
                host++;
                n -= 2;
                memcpy(buf, host, n);
                buf[n] = 0;
                if (inet_pton(AF_INET6, buf, &a6) != 1)
                        return -EINVAL;
                goto v6;
        }
        memcpy(buf, host, n);
        buf[n] = 0;
        if (memchr(buf, 0, n))
                return -EINVAL;
        if (strchr(buf, ':')) {
                if (inet_pton(AF_INET6, buf, &a6) != 1)
                        return -EINVAL;
                goto v6;
        }
        if (inet_pton(AF_INET, buf, &a4) == 1) {
                if (!inet_ntop(AF_INET, &a4, out, sizeof(out)))
                        return -EINVAL;
                *ret = strdup(out);
                *ret_literal = true;
                return *ret ? 0 : -ENOMEM;
        }

        /* A name: lower case, one trailing dot dropped, labels of 1..63 characters. */
        if (buf[n - 1] == '.')
                buf[--n] = 0;
        if (n == 0 || n > NET_HOST_MAX)
                return -EINVAL;
        for (size_t i = 0; i < n; i++) {
                char c = buf[i];
                if (c >= 'A' && c <= 'Z')
                        buf[i] = c = (char) (c - 'A' + 'a');
                if (c == '.') {
                        if (label == 0 || buf[i - 1] == '-')
                                return -EINVAL;
                        label = 0;
                        continue;
                }
                if (!host_char(c) || ++label > 63 || (label == 1 && c == '-'))
                        return -EINVAL;
        }
        if (buf[n - 1] == '-')
                return -EINVAL;
        /* Numbers that inet_pton() does not take but getaddrinfo() would (0x7f.1, 2130706433, 127.1): never a
         * name. A last label of digits only is not a name of the DNS. */
        const char *last = strrchr(buf, '.');
        last = last ? last + 1 : buf;
        if (strspn(last, "0123456789") == strlen(last) || strncmp(last, "0x", 2) == 0)
                return -EINVAL;
        *ret = strdup(buf);
        *ret_literal = false;
        return *ret ? 0 : -ENOMEM;

v6:
        if (!inet_ntop(AF_INET6, &a6, out, sizeof(out)))
                return -EINVAL;
        *ret = strdup(out);
        *ret_literal = true;
        return *ret ? 0 : -ENOMEM;
}

static int parse_port(const char *s, size_t n, uint16_t *ret) {
        unsigned v = 0;

        if (n == 0 || n > 5)
                return -EINVAL;
        for (size_t i = 0; i < n; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return -EINVAL;
                v = v * 10 + (unsigned) (s[i] - '0');
        }
        if (v == 0 || v > 65535)
                return -EINVAL;
        *ret = (uint16_t) v;
        return 0;
}

static int parse_entry(const char *s, NetAllowEntry *ret) {
        const char *host = s, *colon = NULL, *port = NULL;
        size_t n = strlen(s);
        bool wildcard = false, literal = false;
        uint16_t p = 0;
        char *h = NULL;
        int k;

        if (host[0] == '[') {
                const char *close = strchr(host, ']');
                if (!close)
                        return -EINVAL;
                if (close[1] == ':')
                        port = close + 2;
                else if (close[1])
                        return -EINVAL;
                n = (size_t) (close + 1 - host);
        } else {
                colon = strchr(host, ':');
                /* A bare IPv6 address has more than one colon and no port. */
                if (colon && !strchr(colon + 1, ':')) {
                        port = colon + 1;
                        n = (size_t) (colon - host);
                }
        }
        if (port && parse_port(port, strlen(port), &p) < 0)
                return -EINVAL;
        if (n > 2 && host[0] == '*' && host[1] == '.') {
                wildcard = true;
                host += 2;
                n -= 2;
        }
        k = net_host_normalize(host, n, &h, &literal);
        if (k < 0)
                return k;
        /* "*.10.0.0.5" means nothing; a wildcard needs a name with a dot in it ("*.com" is too wide to be meant). */
        if (wildcard && (literal || !strchr(h, '.'))) {
                free(h);
                return -EINVAL;
        }
        *ret = (NetAllowEntry) { .host = h, .wildcard = wildcard, .literal = literal, .port = p };
        return 0;
}

int net_allowlist_parse(char *const *entries, NetAllowlist *ret, char **ret_error) {
        NetAllowlist l = {};
        size_t n = strv_length(entries);

        if (n > 0) {
                l.items = calloc(n, sizeof(NetAllowEntry));
                if (!l.items)
                        return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++) {
                int k = parse_entry(entries[i], &l.items[l.n]);
                if (k == -ENOMEM) {
                        net_allowlist_done(&l);
                        return k;
                }
                if (k < 0) {
                        net_allowlist_done(&l);
                        if (ret_error)
                                (void) error_setf(ret_error,
                                                  "network-allow: \"%s\" is not a host name, *.domain or address, "
                                                  "with an optional :port",
                                                  entries[i]);
                        return -EINVAL;
                }
                l.n++;
        }
        *ret = l;
        return 0;
}

void net_allowlist_done(NetAllowlist *l) {
        for (size_t i = 0; i < l->n; i++)
                free(l->items[i].host);
        l->items = mfree(l->items);
        l->n = 0;
}

static bool entry_matches(const NetAllowEntry *e, const char *host, uint16_t port) {
        if (e->port ? port != e->port : port != 80 && port != 443)
                return false;
        if (!e->wildcard)
                return streq(e->host, host);
        size_t hl = strlen(host), el = strlen(e->host);
        return hl > el + 1 && host[hl - el - 1] == '.' && streq(host + hl - el, e->host);
}

const NetAllowEntry *net_allowlist_match(const NetAllowlist *l, const char *host, uint16_t port) {
        for (size_t i = 0; i < l->n; i++)
                if (entry_matches(&l->items[i], host, port))
                        return &l->items[i];
        return NULL;
}

static NetAddrClass class_v4(uint32_t a) {
        uint8_t b0 = (uint8_t) (a >> 24), b1 = (uint8_t) (a >> 16);

        if (b0 == 0 || b0 == 127 || b0 >= 224)          /* this network, loopback, multicast, reserved, broadcast */
                return NET_ADDR_FORBIDDEN;
        if (b0 == 169 && b1 == 254)                     /* link-local: cloud metadata services */
                return NET_ADDR_FORBIDDEN;
        if (b0 == 10 || (b0 == 172 && (b1 & 0xf0) == 16) || (b0 == 192 && b1 == 168) ||
            (b0 == 100 && (b1 & 0xc0) == 64))
                return NET_ADDR_PRIVATE;
        return NET_ADDR_PUBLIC;
}

NetAddrClass net_addr_class(const struct sockaddr *sa) {
        if (sa->sa_family == AF_INET)
                return class_v4(ntohl(((const struct sockaddr_in *) sa)->sin_addr.s_addr));
        if (sa->sa_family != AF_INET6)
                return NET_ADDR_FORBIDDEN;

        const uint8_t *b = ((const struct sockaddr_in6 *) sa)->sin6_addr.s6_addr;
        static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
        static const uint8_t nat64[12] = { 0, 0x64, 0xff, 0x9b };
        static const uint8_t zero[12] = {};
        uint32_t v4 = (uint32_t) b[12] << 24 | (uint32_t) b[13] << 16 | (uint32_t) b[14] << 8 | b[15];

        if (memcmp(b, mapped, 12) == 0 || memcmp(b, nat64, 12) == 0)
                return class_v4(v4);
        if (memcmp(b, zero, 12) == 0)                   /* ::, ::1, the old IPv4-compatible form */
                return NET_ADDR_FORBIDDEN;
        if (b[0] == 0xff || (b[0] == 0xfe && (b[1] & 0xc0) == 0x80))   /* multicast, link-local */
                return NET_ADDR_FORBIDDEN;
        if ((b[0] & 0xfe) == 0xfc || (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0))   /* unique local, site-local */
                return NET_ADDR_PRIVATE;
        return NET_ADDR_PUBLIC;
}

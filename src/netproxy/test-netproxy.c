/* SPDX-License-Identifier: MIT */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "netproxy/allowlist.h"
#include "netproxy/request.h"
#include "strv.h"

static NetAllowlist parse_ok(const char *entries) {
        _cleanup_strv_free_ char **l = strv_split(entries, " ");
        _cleanup_free_ char *error = NULL;
        NetAllowlist a = {};

        ck_assert_int_eq(net_allowlist_parse(l, &a, &error), 0);
        ck_assert_ptr_null(error);
        return a;
}

static bool allows(const NetAllowlist *a, const char *host, uint16_t port) {
        _cleanup_free_ char *h = NULL;
        bool literal;

        if (net_host_normalize(host, strlen(host), &h, &literal) < 0)
                return false;
        return net_allowlist_match(a, h, port) != NULL;
}

/* ---- the allowlist --------------------------------------------------------- */

START_TEST(test_names_and_default_ports) {
        NetAllowlist a = parse_ok("files.example.org api.example.net:8443");

        ck_assert(allows(&a, "files.example.org", 80));
        ck_assert(allows(&a, "files.example.org", 443));
        ck_assert(!allows(&a, "files.example.org", 8080));
        ck_assert(!allows(&a, "files.example.org", 22));
        ck_assert(allows(&a, "api.example.net", 8443));
        ck_assert(!allows(&a, "api.example.net", 443));
        ck_assert(!allows(&a, "api.example.net", 80));
        /* No suffix or prefix matches for a plain name. */
        ck_assert(!allows(&a, "xfiles.example.org", 443));
        ck_assert(!allows(&a, "a.files.example.org", 443));
        ck_assert(!allows(&a, "example.org", 443));
        ck_assert(!allows(&a, "files.example.org.evil.com", 443));
        net_allowlist_done(&a);
}
END_TEST

START_TEST(test_case_and_trailing_dots) {
        NetAllowlist a = parse_ok("Files.Example.ORG. *.EXAMPLE.com");

        ck_assert(allows(&a, "files.example.org", 443));
        ck_assert(allows(&a, "FILES.EXAMPLE.ORG", 443));
        ck_assert(allows(&a, "files.example.org.", 443));
        ck_assert(!allows(&a, "files.example.org..", 443));
        ck_assert(allows(&a, "A.Example.Com.", 80));
        net_allowlist_done(&a);
}
END_TEST

START_TEST(test_wildcards) {
        NetAllowlist a = parse_ok("*.example.com *.internal.example.net:8080");

        ck_assert(allows(&a, "a.example.com", 443));
        ck_assert(allows(&a, "a.b.example.com", 80));
        ck_assert(!allows(&a, "example.com", 443));             /* the domain itself is not below itself */
        ck_assert(!allows(&a, "aexample.com", 443));
        ck_assert(!allows(&a, "a.example.com.evil.org", 443));
        ck_assert(!allows(&a, "a.example.co", 443));
        ck_assert(allows(&a, "x.internal.example.net", 8080));
        ck_assert(!allows(&a, "x.internal.example.net", 443));
        net_allowlist_done(&a);
}
END_TEST

START_TEST(test_addresses) {
        NetAllowlist a = parse_ok("10.0.0.5 [2001:db8::1]:8080 2001:DB8:0:0::2");
        const NetAllowEntry *e;

        ck_assert(allows(&a, "10.0.0.5", 443));
        ck_assert(!allows(&a, "10.0.0.6", 443));
        ck_assert(allows(&a, "[2001:db8::1]", 8080));
        ck_assert(allows(&a, "[2001:0db8:0000::1]", 8080));      /* one canonical form */
        ck_assert(!allows(&a, "[2001:db8::1]", 443));
        ck_assert(allows(&a, "2001:db8::2", 443));
        ck_assert(allows(&a, "[2001:db8::2]", 80));
        e = net_allowlist_match(&a, "10.0.0.5", 80);
        ck_assert_ptr_nonnull(e);
        ck_assert(e->literal);
        net_allowlist_done(&a);
}
END_TEST

START_TEST(test_bad_entries) {
        static const char *const bad[] = {
                "", "*", "*.com", "*.10.0.0.5", "a..b", "host:0", "host:65536", "host:http", "host:", "[::1",
                "[::1]x", "bad_char$.com", "a b", "-", "0x7f.1", "127.1", "2130706433", "[10.0.0.1]", "user@host",
                "http://host", "a.*.b.com",
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                char *l[] = { (char *) bad[i], NULL };
                _cleanup_free_ char *error = NULL;
                NetAllowlist a = {};
                ck_assert_msg(net_allowlist_parse(l, &a, &error) == -EINVAL, "accepted \"%s\"", bad[i]);
                ck_assert_ptr_nonnull(error);
                ck_assert_ptr_nonnull(strstr(error, "network-allow"));
                ck_assert_uint_eq(a.n, 0);
        }
}
END_TEST

START_TEST(test_host_normalize) {
        static const struct {
                const char *in, *out;
                bool literal;
        } ok[] = {
                { "Example.COM", "example.com", false },
                { "example.com.", "example.com", false },
                { "127.0.0.1", "127.0.0.1", true },
                { "[::1]", "::1", true },
                { "::FFFF:127.0.0.1", "::ffff:127.0.0.1", true },
                { "xn--bcher-kva.example", "xn--bcher-kva.example", false },
        };
        static const char *const bad[] = { ".", "..", ".a", "a..b", "a\001b", "ex ample.com", "0177.0.0.1",
                                           "127.0.0.1.", "1.2.3", "a.0x10", "[]", "[zz]", "-a.com",
                                           "a-.com", "a.-b.com" };
        for (size_t i = 0; i < ELEMENTSOF(ok); i++) {
                _cleanup_free_ char *h = NULL;
                bool literal;
                ck_assert_int_eq(net_host_normalize(ok[i].in, strlen(ok[i].in), &h, &literal), 0);
                ck_assert_str_eq(h, ok[i].out);
                ck_assert(literal == ok[i].literal);
        }
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                _cleanup_free_ char *h = NULL;
                bool literal;
                ck_assert_msg(net_host_normalize(bad[i], strlen(bad[i]), &h, &literal) < 0, "took \"%s\"", bad[i]);
        }
        /* Longer than a DNS name may be. */
        char longname[300];
        memset(longname, 'a', sizeof(longname));
        for (size_t i = 60; i < sizeof(longname); i += 61)
                longname[i] = '.';
        _cleanup_free_ char *h = NULL;
        bool literal;
        ck_assert_int_lt(net_host_normalize(longname, sizeof(longname), &h, &literal), 0);
}
END_TEST

static NetAddrClass class_of(const char *a) {
        struct sockaddr_in in = { .sin_family = AF_INET };
        struct sockaddr_in6 in6 = { .sin6_family = AF_INET6 };

        if (inet_pton(AF_INET, a, &in.sin_addr) == 1)
                return net_addr_class((struct sockaddr *) &in);
        ck_assert_int_eq(inet_pton(AF_INET6, a, &in6.sin6_addr), 1);
        return net_addr_class((struct sockaddr *) &in6);
}

START_TEST(test_address_classes) {
        static const char *const forbidden[] = {
                "127.0.0.1", "127.255.255.254", "0.0.0.0", "0.1.2.3", "169.254.169.254", "224.0.0.1",
                "239.255.255.250", "255.255.255.255", "240.0.0.1", "::", "::1", "fe80::1", "febf::1", "ff02::1",
                "::ffff:127.0.0.1", "::ffff:169.254.169.254", "64:ff9b::7f00:1", "::127.0.0.1",
        };
        static const char *const private[] = { "10.0.0.1", "172.16.0.1", "172.31.255.255", "192.168.1.1",
                                               "100.64.0.1", "fc00::1", "fd12:3456::1", "::ffff:10.1.2.3" };
        static const char *const public[] = { "1.1.1.1", "8.8.8.8", "172.32.0.1", "172.15.0.1", "100.128.0.1",
                                              "192.169.0.1", "2001:db8::1", "2606:4700::1111", "::ffff:1.1.1.1" };

        for (size_t i = 0; i < ELEMENTSOF(forbidden); i++)
                ck_assert_msg(class_of(forbidden[i]) == NET_ADDR_FORBIDDEN, "%s", forbidden[i]);
        for (size_t i = 0; i < ELEMENTSOF(private); i++)
                ck_assert_msg(class_of(private[i]) == NET_ADDR_PRIVATE, "%s", private[i]);
        for (size_t i = 0; i < ELEMENTSOF(public); i++)
                ck_assert_msg(class_of(public[i]) == NET_ADDR_PUBLIC, "%s", public[i]);
}
END_TEST

/* ---- the request head ------------------------------------------------------ */

static int parse(const char *s, NetRequest *r, size_t *consumed) {
        return net_request_parse(s, strlen(s), r, consumed);
}

START_TEST(test_connect) {
        NetRequest r = {};
        size_t n = 0;
        const char *s = "CONNECT Files.Example.org.:443 HTTP/1.1\r\nHost: files.example.org:443\r\n\r\n\x16\x03";

        ck_assert_int_eq(parse(s, &r, &n), NET_REQUEST_DONE);
        ck_assert(r.connect);
        ck_assert_str_eq(r.host, "files.example.org");
        ck_assert_uint_eq(r.port, 443);
        ck_assert_uint_eq(n, strlen(s) - 2);                    /* the TLS bytes after the head stay */
        net_request_done(&r);

        /* A body after the head may hold anything, NUL bytes too. */
        static const char post[] = "POST http://a.com/up HTTP/1.1\r\nContent-Length: 3\r\n\r\n\0\1\0";
        ck_assert_int_eq(net_request_parse(post, sizeof(post) - 1, &r, &n), NET_REQUEST_DONE);
        ck_assert_uint_eq(n, sizeof(post) - 4);
        net_request_done(&r);

        ck_assert_int_eq(parse("CONNECT [2001:db8::1]:8443 HTTP/1.0\r\n\r\n", &r, &n), NET_REQUEST_DONE);
        ck_assert_str_eq(r.host, "2001:db8::1");
        ck_assert_uint_eq(r.port, 8443);
        net_request_done(&r);
}
END_TEST

START_TEST(test_plain_http_rewritten) {
        NetRequest r = {};
        size_t n = 0;
        const char *s = "GET http://Example.com:8080/a/b?c=d HTTP/1.1\r\nHost: evil.com\r\nUser-Agent: t\r\n"
                        "Proxy-Connection: keep-alive\r\nProxy-Authorization: x\r\nConnection: keep-alive\r\n"
                        "Accept: */*\r\n\r\nBODY";

        ck_assert_int_eq(parse(s, &r, &n), NET_REQUEST_DONE);
        ck_assert(!r.connect);
        ck_assert_str_eq(r.host, "example.com");
        ck_assert_uint_eq(r.port, 8080);
        ck_assert_str_eq(r.upstream, "GET /a/b?c=d HTTP/1.1\r\nHost: Example.com:8080\r\nUser-Agent: t\r\n"
                                     "Accept: */*\r\nConnection: close\r\n\r\n");
        ck_assert_uint_eq(r.upstream_len, strlen(r.upstream));
        ck_assert_uint_eq(n, strlen(s) - 4);
        net_request_done(&r);

        /* No path: "/"; a query right after the authority: "/?q". Default port 80. */
        ck_assert_int_eq(parse("HEAD http://example.com HTTP/1.0\r\n\r\n", &r, &n), NET_REQUEST_DONE);
        ck_assert_uint_eq(r.port, 80);
        ck_assert(strncmp(r.upstream, "HEAD / HTTP/1.0\r\n", 17) == 0);
        net_request_done(&r);
        ck_assert_int_eq(parse("GET HTTP://example.com?q HTTP/1.1\r\n\r\n", &r, &n), NET_REQUEST_DONE);
        ck_assert(strncmp(r.upstream, "GET /?q HTTP/1.1\r\n", 18) == 0);
        net_request_done(&r);
}
END_TEST

START_TEST(test_incomplete) {
        NetRequest r = {};
        size_t n = 0;

        ck_assert_int_eq(parse("", &r, &n), NET_REQUEST_MORE);
        ck_assert_int_eq(parse("CONNECT a.com:443 HTTP/1.1\r\n", &r, &n), NET_REQUEST_MORE);
        ck_assert_int_eq(parse("CONNECT a.com:443 HTTP/1.1\r\nHost: a\r\n\r", &r, &n), NET_REQUEST_MORE);
}
END_TEST

START_TEST(test_malformed) {
        static const char *const bad[] = {
                "CONNECT a.com HTTP/1.1\r\n\r\n",                       /* CONNECT needs a port */
                "CONNECT a.com:0 HTTP/1.1\r\n\r\n",
                "CONNECT a.com:99999 HTTP/1.1\r\n\r\n",
                "CONNECT user@a.com:443 HTTP/1.1\r\n\r\n",
                "GET https://a.com/ HTTP/1.1\r\n\r\n",                  /* TLS goes through CONNECT */
                "GET ftp://a.com/ HTTP/1.1\r\n\r\n",
                "GET /relative HTTP/1.1\r\nHost: a.com\r\n\r\n",        /* not a proxy request */
                "GET http://u:p@a.com/ HTTP/1.1\r\n\r\n",
                "GET http:///x HTTP/1.1\r\n\r\n",
                "GET http://a.com/#frag HTTP/1.1\r\n\r\n",
                "GET http://a.com/ HTTP/2.0\r\n\r\n",
                "GET http://a.com/ HTTP/1.1 x\r\n\r\n",
                "GET  http://a.com/ HTTP/1.1\r\n\r\n",
                "G(T http://a.com/ HTTP/1.1\r\n\r\n",
                "GET http://a.com/\x7f HTTP/1.1\r\n\r\n",
                "GET http://a.com/ HTTP/1.1\r\nNoColon\r\n\r\n",
                "GET http://a.com/ HTTP/1.1\r\n: empty name\r\n\r\n",
                "GET http://a.com/ HTTP/1.1\r\nA: b\r\n folded\r\n\r\n",
                "GET http://a.com/ HTTP/1.1\r\nA: b\rc\r\n\r\n",
                "GET http://a.com/ HTTP/1.1\nA: b\n\n\r\n\r\n",
                "GET http://127.1/ HTTP/1.1\r\n\r\n",
                "GET http://0x7f000001/ HTTP/1.1\r\n\r\n",
                "\r\n\r\n",
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                NetRequest r = {};
                size_t n = 0;
                ck_assert_msg(parse(bad[i], &r, &n) == -EBADMSG, "took: %s", bad[i]);
        }
        /* A NUL anywhere. */
        NetRequest r = {};
        size_t n = 0;
        ck_assert_int_eq(net_request_parse("CONNECT a.com:443\0 HTTP/1.1\r\n\r\n", 32, &r, &n), -EBADMSG);
}
END_TEST

START_TEST(test_limits) {
        NetRequest r = {};
        size_t n = 0;
        _cleanup_free_ char *big = malloc(NET_REQUEST_HEAD_MAX + 64);
        size_t len;

        /* No end of the head within the limit: too large, however it goes on. */
        len = (size_t) snprintf(big, NET_REQUEST_HEAD_MAX + 64, "GET http://a.com/ HTTP/1.1\r\nX: ");
        memset(big + len, 'a', NET_REQUEST_HEAD_MAX + 64 - len);
        ck_assert_int_eq(net_request_parse(big, NET_REQUEST_HEAD_MAX - 1, &r, &n), NET_REQUEST_MORE);
        ck_assert_int_eq(net_request_parse(big, NET_REQUEST_HEAD_MAX, &r, &n), -E2BIG);
        ck_assert_int_eq(net_request_parse(big, NET_REQUEST_HEAD_MAX + 64, &r, &n), -E2BIG);

        /* Too many header lines. */
        _cleanup_free_ char *many = NULL;
        size_t ml = 0;
        ck_assert_int_eq(strextendf_len(&many, &ml, "GET http://a.com/ HTTP/1.1\r\n"), 0);
        for (int i = 0; i <= NET_REQUEST_HEADERS_MAX; i++)
                ck_assert_int_eq(strextendf_len(&many, &ml, "A: b\r\n"), 0);
        ck_assert_int_eq(strextendf_len(&many, &ml, "\r\n"), 0);
        ck_assert_int_eq(net_request_parse(many, ml, &r, &n), -E2BIG);
}
END_TEST

static Suite *netproxy_suite(void) {
        Suite *s = suite_create("netproxy");
        TCase *tc;

        tc = tcase_create("allowlist");
        tcase_add_test(tc, test_names_and_default_ports);
        tcase_add_test(tc, test_case_and_trailing_dots);
        tcase_add_test(tc, test_wildcards);
        tcase_add_test(tc, test_addresses);
        tcase_add_test(tc, test_bad_entries);
        tcase_add_test(tc, test_host_normalize);
        tcase_add_test(tc, test_address_classes);
        suite_add_tcase(s, tc);

        tc = tcase_create("request");
        tcase_add_test(tc, test_connect);
        tcase_add_test(tc, test_plain_http_rewritten);
        tcase_add_test(tc, test_incomplete);
        tcase_add_test(tc, test_malformed);
        tcase_add_test(tc, test_limits);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(netproxy_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

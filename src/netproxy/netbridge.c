/* SPDX-License-Identifier: MIT */
/*
 * mcp-python-sandbox-netbridge CTL-FD PORT COMMAND...
 *
 * The first program of a sandbox whose runs may reach allowlisted hosts
 * (network-allow=). It listens on 127.0.0.1:PORT in the sandbox's own
 * loopback, hands that listening socket to the daemon over CTL-FD (a Unix
 * socket pair the daemon made, SCM_RIGHTS), sets the proxy variables and
 * execs COMMAND. It runs nothing else and stays nowhere: the daemon accepts
 * and proxies every connection itself. It trusts nothing and is trusted for
 * nothing: the daemon checks what it receives.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int fail(const char *what) {
        fprintf(stderr, "mcp-python-sandbox-netbridge: %s: %s\n", what, strerror(errno));
        return 127;
}

int main(int argc, char *argv[]) {
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        char cbuf[CMSG_SPACE(sizeof(int))] = {}, url[64];
        struct iovec iov = { (char *) "L", 1 };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf) };
        struct cmsghdr *cm;
        char *end;
        long ctl, port;
        int fd, one = 1;

        if (argc < 4) {
                fprintf(stderr, "usage: mcp-python-sandbox-netbridge CTL-FD PORT COMMAND...\n");
                return 127;
        }
        ctl = strtol(argv[1], &end, 10);
        if (*end || ctl < 3 || ctl > 65535)
                return fail("bad CTL-FD");
        port = strtol(argv[2], &end, 10);
        if (*end || port < 1 || port > 65535)
                return fail("bad PORT");

        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return fail("socket");
        (void) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        a.sin_port = htons((uint16_t) port);
        if (bind(fd, (struct sockaddr *) &a, sizeof(a)) < 0)
                return fail("bind 127.0.0.1");
        if (listen(fd, 128) < 0)
                return fail("listen");

        cm = CMSG_FIRSTHDR(&mh);
        if (!cm)
                return 127;
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &fd, sizeof(int));
        if (sendmsg((int) ctl, &mh, MSG_NOSIGNAL) < 0)
                return fail("handing the socket to the daemon");
        /* The daemon holds the listening socket now; the command gets neither it nor the pair. */
        (void) close(fd);
        (void) close((int) ctl);

        snprintf(url, sizeof(url), "http://127.0.0.1:%ld", port);
        if (setenv("HTTP_PROXY", url, 1) < 0 || setenv("HTTPS_PROXY", url, 1) < 0 || setenv("http_proxy", url, 1) < 0 ||
            setenv("https_proxy", url, 1) < 0 || setenv("NO_PROXY", "", 1) < 0 || setenv("no_proxy", "", 1) < 0)
                return fail("setenv");
        execv(argv[3], argv + 3);
        return fail(argv[3]);
}

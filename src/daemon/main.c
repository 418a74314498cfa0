/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "config/config.h"
#include "log.h"
#include "macro.h"
#include "manager.h"

#define DEFAULT_CONFIG_FILE SYSCONFDIR "/mcp-python-sandbox/mcp-python-sandboxd.conf"

static int run(int argc, char **argv) {
        _cleanup_(manager_freep) Manager *m = NULL;
        _cleanup_(config_done) Config config;
        const char *config_file = NULL;
        bool check_config = false;
        sigset_t mask;
        int r;

        /* Blocks of 256 KiB and more (a long request being parsed, a long reply) are mapped apart and given back
         * when freed. Left to itself glibc raises that bar after each such block is freed, up to 32 MiB, and then
         * keeps tens of MiB after a burst of long lines from one client. */
        (void) mallopt(M_MMAP_THRESHOLD, 256 * 1024);

        /* First pass: only to learn which configuration file to read. */
        config_init(&config);
        r = config_parse_argv(&config, argc, argv, &config_file, &check_config);
        config_done(&config);
        if (r != 0)
                return r < 0 ? r : 0;

        /* The default file is optional; one named with --config is not. */
        if (config_file && access(config_file, F_OK) < 0)
                return log_error_errno(errno, "Failed to read the configuration file %s (--config): %m", config_file);

        /* The file first, then the command line over it. */
        config_init(&config);
        config.log_level = -1;   /* unset: the default depends on the mode, below */
        r = config_load(&config, config_file ?: DEFAULT_CONFIG_FILE);
        if (r < 0 && (check_config || config_file))
                return r;
        if (r < 0)
                log_warning("Ignoring the errors above in %s.", DEFAULT_CONFIG_FILE);
        r = config_parse_argv(&config, argc, argv, &config_file, &check_config);
        if (r != 0)
                return r < 0 ? r : 0;
        /* --stdio writes its log to the MCP client's stderr, which clients show or keep: a line per run
         * is noise there. Notices and worse only, unless a log level was asked for. */
        if (config.log_level < 0)
                config.log_level = config.stdio ? LOG_NOTICE : LOG_INFO;
        log_set_max_level(config.log_level);
        r = config_resolve_access(&config);
        if (r < 0)
                return log_oom();
        r = config_verify(&config);
        if (r < 0)
                return r;

        if (check_config) {
                config_dump(&config, stdout);
                return 0;
        }

        /* sd-event wants these blocked; children get a clean mask back. */
        sigemptyset(&mask);
        sigaddset(&mask, SIGCHLD);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGHUP);
        sigprocmask(SIG_BLOCK, &mask, NULL);
        signal(SIGPIPE, SIG_IGN);

        r = manager_new(&m, &config);
        if (r < 0)
                return log_error_errno(r, "Failed to set up: %m");
        m->argc = argc;
        m->argv = argv;
        m->config_file = config_file ?: DEFAULT_CONFIG_FILE;
        r = manager_listen(m);
        if (r < 0)
                return r;

        log_debug("mcp-python-sandboxd %s ready.", PACKAGE_VERSION);
        r = manager_run(m);
        if (r < 0)
                return log_error_errno(r, "Event loop failed: %m");
        return 0;
}

int main(int argc, char **argv) {
        int r = run(argc, argv);
        return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}

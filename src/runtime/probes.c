/* SPDX-License-Identifier: MIT */
/*
 * Start-up: the probes that find what this machine has (bwrap's and uv's versions, the Pythons of python-search-
 * path), the sandbox self-test that decides whether scripts run, runtime_start() which starts them all, and the
 * warm-up once they are done (environments of warmup=, a sandbox started ahead).
 */

#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs-util.h"
#include "log.h"
#include "macro.h"
#include "nss-child.h"
#include "runtime-internal.h"
#include "strv.h"
#include "time-util.h"

/* ---- start-up probes ------------------------------------------------- */

static void warm_up(Runtime *r);

static void probe_finished(Runtime *r) {
        if (--r->pending > 0)
                return;
        if (r->pyinstaller)
                (void) pyinstall_scan(pyinstaller_dir(r->pyinstaller), runtime_on_python_installed, r);
        pythons_filter(&r->pythons, r->config->python_versions);
        {
                _cleanup_free_ char *list = pythons_list(&r->pythons);
                if (r->pythons.n == 0)
                        log_warning("No Python interpreter found in python-search-path; scripts cannot run.");
                else
                        log_info("Pythons: %s.", strempty(list));
        }
        envstore_set_uv_version(r->store, r->uv_version);
        /* Pythons known, sandbox tested: environments' bytecode can be compiled in it. */
        envstore_set_compiler(r->store, runtime_spawn_compile, r);
        r->ready = true;
        waitq_call_all(&r->ready_waiters);
        warm_up(r);
}

static char *first_line(const Capture *cap) {
        _cleanup_free_ char *t = capture_text(cap, NULL);
        if (!t)
                return NULL;
        t[strcspn(t, "\n")] = 0;
        return strdup(t);
}

/* A finished probe lets go of its pipes and pidfd at once. */
static void drop_probe(Runtime *r, Process *p) {
        for (size_t i = 0; i < r->n_probes; i++)
                if (r->probes[i] == p)
                        r->probes[i] = NULL;
        process_free(p);
}

static void on_python_probe(Process *p, void *userdata) {
        Runtime *r = userdata;
        _cleanup_free_ char *line = first_line(&p->out);

        if (p->exit_code == 0 && line && pythons_add_probe(&r->pythons, line) < 0)
                log_debug("Ignoring an interpreter whose probe said: %s", line);
        drop_probe(r, p);
        probe_finished(r);
}

static void on_uv_probe(Process *p, void *userdata) {
        Runtime *r = userdata;
        _cleanup_free_ char *line = first_line(&p->out);

        /* "uv 0.13.9 (...)" */
        if (p->exit_code == 0 && line && startswith(line, "uv ")) {
                char *v = line + 3;
                v[strcspn(v, " ")] = 0;
                r->uv_version = strdup(v);
                /* Refused at start, not at the first install: an older uv ignores some of our settings silently
                 * (system-certs=) and answers others with a usage error. */
                _cleanup_free_ char *reason = NULL;
                if (r->uv_version && envstore_check_uv_version(r->uv_version, &reason) > 0) {
                        log_error("%s: %s. Scripts without dependencies still run.", r->uv_path, reason);
                        if (envstore_refuse_uv(r->store, reason) >= 0)
                                r->uv_refused = TAKE_PTR(reason);
                }
        } else
                log_warning("%s --version failed; packages cannot be installed.", r->uv_path);
        drop_probe(r, p);
        probe_finished(r);
}

static void on_bwrap_probe(Process *p, void *userdata) {
        Runtime *r = userdata;

        if (p->exit_code == 0)
                r->bwrap_version = first_line(&p->out);
        drop_probe(r, p);
        probe_finished(r);
}

static int spawn_probe(Runtime *r, char **argv, ProcessDoneFunc done) {
        static char *env[] = { (char *) "PATH=/usr/local/bin:/usr/bin:/bin", (char *) "LANG=C.UTF-8", NULL };
        ProcessOptions o = {
                .argv = argv,
                .env = env,
                .stdin_fd = -EBADF,
                .timeout_usec = 15 * USEC_PER_SEC,
                .head_max = 4096,
        };
        Process **l = realloc(r->probes, (r->n_probes + 1) * sizeof(Process *));
        int k;

        if (!l)
                return -ENOMEM;
        r->probes = l;
        k = process_spawn(r->event, &o, done, r, &r->probes[r->n_probes]);
        if (k < 0)
                return k;
        r->n_probes++;
        r->pending++;
        return 0;
}


/* python-search-path's directories (envstore/pythons.h). A root daemon skips "~/" entries: its sandboxes could not
 * reach root's home, and it is no place for shared interpreters. */
static int home_child(int fd, void *userdata) {
        struct passwd *pw = getpwuid(geteuid());

        return pw && pw->pw_dir && pw->pw_dir[0] == '/' ? write_all(fd, pw->pw_dir, strlen(pw->pw_dir)) : 0;
}

static char **python_search_dirs(const Runtime *r) {
        _cleanup_free_ char *home = NULL;

        /* In a child, as every account lookup (nss-child.h). */
        if (geteuid() != 0 && (nss_child_run(home_child, NULL, &home) < 0 || (home && !home[0])))
                home = mfree(home);
        return pythons_search_dirs(r->config->python_search_path, home);
}

static void discover_pythons(Runtime *r) {
        _cleanup_strv_free_ char **dirs = python_search_dirs(r), **found = NULL;

        if (!dirs || pythons_candidates(dirs, &found) < 0) {
                log_oom();
                return;
        }
        for (size_t i = 0; found[i]; i++) {
                char *real = found[i];
                char *argv[] = { real, (char *) "-I", (char *) "-S", (char *) "-c", (char *) python_probe_code, NULL };

                /* It runs here, on the host: only what nobody but root and we can change. */
                if (path_held_by(real, geteuid()) <= 0)
                        log_warning("Skipping %s: someone other than root and the daemon's user can change it or a "
                                    "directory on its path.",
                                    real);
                /* Under root, sandboxes run as uids of their own: they must reach it. */
                else if (r->uids && path_reachable_by_others(real) <= 0)
                        log_warning("Skipping %s: the sandboxes' uids cannot reach it (a directory on its path is not "
                                    "searchable by others, e.g. a home directory of mode 0700).",
                                    real);
                else if (spawn_probe(r, argv, on_python_probe) < 0)
                        log_warning("Failed to probe %s.", real);
        }
}

/* ---- sandbox self-test ------------------------------------------------ */

/* Whether the sandbox works decides whether scripts run, unless they run without it anyway. */
static void log_sandbox_broken(Runtime *r) {
        if (runtime_unsandboxed(r))
                log_info("The sandbox does not work (%s); scripts run without it anyway (unsafe-no-sandbox=yes).",
                         strempty(r->sandbox_error));
        else
                log_error("Refusing to run scripts: %s.", strempty(r->sandbox_error));
}

/* Loud, at start-up and whenever a reload turns it on: nobody should run this way by accident. */
void runtime_announce_unsandboxed(Runtime *r) {
        bool on = runtime_unsandboxed(r);

        /* The one place where a package's code runs outside the sandbox, by the administrator's choice. */
        if (r->config->allow_source_builds && !r->source_builds_announced)
                log_warning("allow-source-builds=yes: uv runs the build code of source distributions on the host, "
                            "as %s, with the store and the uv cache writable, outside the sandbox. Leave it off on "
                            "a shared machine.",
                            strempty(r->user));
        r->source_builds_announced = r->config->allow_source_builds;

        if (on && !r->unsandboxed)
                log_warning("Running scripts WITHOUT a sandbox (unsafe-no-sandbox=yes): for development only, never "
                            "on a shared machine. Scripts run as %s with the daemon's files and the host's network; "
                            "no namespaces, no read-only root, no system call filter. Only resource limits, timeouts "
                            "and a private temporary work directory remain.",
                            strempty(r->user));
        else if (!on && r->unsandboxed)
                log_notice("unsafe-no-sandbox turned off: scripts run in the sandbox again%s.",
                           r->sandbox_error ? " once its self-test passes" : "");
        r->unsandboxed = on;
}

static char *explain_sandbox_failure(const char *bwrap, const char *stderr_text, int exit_code) {
        const char *t = strempty(stderr_text);
        const char *fix;
        char *s = NULL;

        if (exit_code == 127 && strstr(t, "Failed to execute"))
                fix = "bubblewrap is not installed where configured: install it (apt install bubblewrap, "
                      "dnf install bubblewrap) or set bwrap= in the configuration";
        else if (strstr(t, "runs as host uid 0"))
                fix = "the sandbox must not be host root: run the daemon as root only with a working "
                      "sandbox-uid-range, or as an unprivileged user (the packaged units do)";
        else if (strstr(t, "writable from inside"))
                fix = "the kernel's settings must be read-only in the sandbox: use bubblewrap 0.8 or later, and do "
                      "not map the sandbox to host uid 0";
        else if (strstr(t, "Failed to become uid"))
                fix = "the daemon could not switch to a uid of sandbox-uid-range: check the setting, and that "
                      "the service may change its uid (no NoNewPrivileges= restriction on setuid, CAP_SETUID)";
        else if (strstr(t, "setting up uid map") || strstr(t, "No permissions to create") ||
                 strstr(t, "Creating new namespace failed") || strstr(t, "Operation not permitted"))
                fix = "user namespaces are not available to the service. On Ubuntu 23.10 and later set "
                      "kernel.apparmor_restrict_unprivileged_userns=0 (or give bwrap an AppArmor profile); elsewhere "
                      "check kernel.unprivileged_userns_clone=1 and user.max_user_namespaces > 0; and make sure the "
                      "unit sets neither RestrictNamespaces= nor PrivateUsers=";
        else if (strstr(t, "Can't find source path") || strstr(t, "Permission denied"))
                fix = "a sandbox uid cannot reach a path it needs: the cache directory and the Python "
                      "installations must be readable (directories searchable) by other users";
        else
                fix = "run check_environment again, and see the daemon's log (journalctl -u mcp-python-sandboxd)";
        if (asprintf(&s, "the sandbox (%s) does not work: %s; fix: %s", bwrap, *t ? t : "it failed without saying why",
                     fix) < 0)
                return NULL;
        return s;
}

static void on_self_test(Process *p, void *userdata) {
        Runtime *r = userdata;
        _cleanup_free_ char *err = capture_text(&p->err, NULL);

        free(r->sandbox_error);
        r->sandbox_error = NULL;
        /* Host root can only be seen from here: the uid the sandbox was started as. */
        if (p->uid == 0 && geteuid() == 0) {
                r->sandbox_error = explain_sandbox_failure(r->config->bwrap_path, "the sandbox runs as host uid 0", 1);
                log_sandbox_broken(r);
        } else if (p->exit_code != 0 || p->signal) {
                if (err)
                        err[strcspn(err, "\n")] = 0;
                r->sandbox_error = explain_sandbox_failure(r->config->bwrap_path, err, p->exit_code);
                log_sandbox_broken(r);
        } else
                log_debug("Sandbox self-test passed.");
        r->self_test = NULL;   /* freed by the owner below */
        r->self_test_usec = now_usec();
        process_free(p);
        if (!r->started) {
                r->started = true;
                probe_finished(r);
        }
        waitq_call_all(&r->self_test_waiters);
}

/*
 * What the self-test checks from inside: the kernel's knobs are out of reach. It only asks access(2): nothing is
 * ever written. A failure is one line on stderr that explain_sandbox_failure() turns into the cause and the fix.
 * (Whether the sandbox is host root cannot be seen from inside, where bwrap's nested user namespaces map every
 * uid; on_self_test() checks that from here.)
 */
static const char self_test_script[] =
        "for f in /proc/sys/kernel/core_pattern /proc/sys/kernel/modprobe /proc/sysrq-trigger; do\n"
        "        if [ -w \"$f\" ]; then echo \"$f is writable from inside the sandbox\" >&2; exit 1; fi\n"
        "done\n";

int runtime_start_self_test(Runtime *r) {
        char *command[] = { (char *) "/bin/sh", (char *) "-c", (char *) self_test_script, NULL };
        int k;

        if (r->self_test)
                return 0;
        /* Bypass the "sandbox broken" check: this is what decides it. */
        k = runtime_spawn_sandboxed(r, NULL, NULL, NULL, 0, command, 15 * USEC_PER_SEC, NULL, 4096, 0, on_self_test,
                                    r, &r->self_test);
        if (k < 0) {
                r->self_test_usec = now_usec();
                free(r->sandbox_error);
                if (asprintf(&r->sandbox_error, "the sandbox (%s) could not be started: %s", r->config->bwrap_path,
                             strerror(-k)) < 0)
                        r->sandbox_error = NULL;
        }
        return k;
}

WaitEntry *runtime_self_test(Runtime *r, WaitFunc cb, void *userdata) {
        WaitEntry *e;

        if (!r->self_test && r->self_test_usec > 0 && now_usec() - r->self_test_usec < RUNTIME_SELF_TEST_FRESH_USEC)
                return NULL;
        e = waitq_push(&r->self_test_waiters, cb, userdata);
        if (!e)
                return NULL;
        if (runtime_start_self_test(r) < 0) {
                waitq_cancel(e);
                return NULL;
        }
        return e;
}

void runtime_start(Runtime *r) {
        char *uv_argv[] = { r->uv_path, (char *) "--version", NULL };
        char *bwrap_argv[] = { r->config->bwrap_path, (char *) "--version", NULL };

        envstore_cleanup(r->store);
        runtime_announce_unsandboxed(r);

        /* Also without the sandbox: check_environment tells whether it would work. */
        r->pending = 1;   /* the self-test */
        if (runtime_start_self_test(r) < 0) {
                r->pending--;
                r->started = true;
                log_sandbox_broken(r);
        }
        if (spawn_probe(r, bwrap_argv, on_bwrap_probe) < 0)
                log_warning("Failed to ask bwrap for its version.");
        if (r->uv_path) {
                if (spawn_probe(r, uv_argv, on_uv_probe) < 0)
                        log_warning("Failed to ask uv for its version.");
        } else
                log_warning("uv (%s) was not found: scripts with dependencies cannot run. Install uv or set uv= "
                            "in the configuration.",
                            r->config->uv_path);
        discover_pythons(r);

        if (r->pending == 0) {
                r->pending = 1;
                probe_finished(r);
        }
}

static void on_warm(const EnvResult *res, void *userdata) {
        (void) res;
        (void) userdata;
}

void runtime_set_prestart(Runtime *r, RuntimePrestartFunc f) {
        r->prestart = f;
}

/* The bare environment of the default Python, when it is built: the first hello world gets a sandbox ready. */
static void prestart_bare(Runtime *r) {
        _cleanup_free_ char *err = NULL, *path = NULL;
        const Python *py;
        char key[65];
        int k;

        if (r->config->prestart == 0 || !r->prestart || runtime_sandbox_error(r))
                return;
        py = pythons_choose(&r->pythons, NULL, NULL, &err);
        if (!py)
                return;
        envstore_key(r->store, py, &(RequirementList) {}, key);
        path = envstore_lookup(r->store, key);
        if (!path)
                return;
        k = r->prestart(r, path, py->prefix);
        if (k < 0)
                log_debug_errno(k, "Failed to start a sandbox ahead for the bare environment: %m");
}

static void warm_up(Runtime *r) {
        prestart_bare(r);
        for (size_t i = 0; r->config->warmup[i]; i++) {
                _cleanup_strv_free_ char **specs = strv_split(r->config->warmup[i], " \t");
                _cleanup_(requirement_list_done) RequirementList reqs = {};
                _cleanup_free_ char *err = NULL;
                const Python *py;
                char key[65];
                bool ok = true;

                for (size_t j = 0; specs && specs[j]; j++)
                        if (requirement_list_append(&reqs, specs[j], &err) < 0) {
                                log_warning("warmup \"%s\": %s; skipped.", r->config->warmup[i], strempty(err));
                                ok = false;
                                break;
                        }
                if (!ok)
                        continue;
                py = pythons_choose(&r->pythons, NULL, NULL, &err);
                if (!py)
                        continue;
                {
                        RequirementList sorted = {};
                        if (requirement_list_merge(&reqs, &(RequirementList) {}, &sorted) < 0)
                                continue;
                        envstore_key(r->store, py, &sorted, key);
                        _cleanup_free_ char *path = envstore_lookup(r->store, key);
                        if (!path)
                                (void) envstore_prepare(r->store, SCHEDULER_DAEMON_UID, key, py, &sorted, on_warm, NULL, NULL);
                        requirement_list_done(&sorted);
                }
        }
}

/* SPDX-License-Identifier: MIT */
/*
 * execute_python's result renderer (execute-render.h) driven with made-up outcomes, as the tool's job would
 * report them: a good run, an exception, a timeout, a memory limit, death by a signal, output cut between its
 * head and tail, figures and files, an error before the run, a refused slot. Each checks the text the model reads
 * and the structured fields, byte for byte where the layout is the contract.
 */
#include <check.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "executor/capture.h"
#include "json-util.h"
#include "macro.h"
#include "scheduler/scheduler.h"
#include "strv.h"
#include "tools/execute-render.h"

typedef struct Rendered {
        json_object *content, *st;
        const char *text;               /* content[0]'s */
} Rendered;

static void rendered_done(Rendered *r) {
        json_object_put(r->content);
        json_object_put(r->st);
}

static const SandboxLimits limits = {
        .memory = 512ull * 1024 * 1024,
        .processes = 64,
        .file_size = 0,
        .cpu_usec = 30 * USEC_PER_SEC,
};

static ExecuteFacts facts(void) {
        return (ExecuteFacts) {
                .duration_usec = 1234 * USEC_PER_MSEC + 999,
                .prepare_usec = 10 * USEC_PER_MSEC,
                .timeout_usec = 5 * USEC_PER_SEC,
                .limits = &limits,
                .limits_mechanism = "rlimits",
        };
}

static void run(const ExecuteFacts *f, const ExecuteOutcome *o, Rendered *ret) {
        execute_render_run(f, o, &ret->content, &ret->st);
        ck_assert_ptr_nonnull(ret->content);
        ck_assert_int_ge(json_object_array_length(ret->content), 1);
        json_object *t = json_object_array_get_idx(ret->content, 0);
        ck_assert_str_eq(json_get_string(t, "type"), "text");
        ret->text = json_get_string(t, "text");
        ck_assert_ptr_nonnull(ret->text);
}

static int64_t get_int(json_object *o, const char *key) {
        int64_t v = INT64_MIN;

        ck_assert_msg(json_get_int64(o, key, &v), "no integer %s", key);
        return v;
}

static void outcome_text(ExecuteOutcome *o, const char *out, const char *err) {
        o->out = out;
        o->out_len = out ? strlen(out) : 0;
        o->out_total = o->out_len;
        o->err = err;
        o->err_len = err ? strlen(err) : 0;
        o->err_total = o->err_len;
}

START_TEST(test_exit_zero) {
        ExecuteFacts f = facts();
        ExecuteOutcome o = { .run_usec = 900 * USEC_PER_MSEC };
        Rendered r;

        outcome_text(&o, "hello\nworld", NULL);
        ck_assert(!execute_outcome_failed(&o));
        ck_assert_str_eq(execute_outcome_verdict(&o), "ok");
        run(&f, &o, &r);
        /* The layout clients of the Python servers parse: a missing last newline is added, no empty stderr. */
        ck_assert_str_eq(r.text, "--- stdout ---\nhello\nworld\n--- exit_code: 0 ---\n--- duration_ms: 1234 ---\n");
        ck_assert_int_eq(json_object_array_length(r.content), 1);
        /* Lean: what is at its usual value is not there. */
        ck_assert_int_eq(get_int(r.st, "duration_ms"), 1234);
        ck_assert_int_eq(get_int(r.st, "exit_code"), 0);
        ck_assert_str_eq(json_get_string(r.st, "stdout"), "hello\nworld");
        const char *absent[] = { "stderr", "run_ms", "failed_phase", "message", "hint", "signal", "timed_out",
                                 "limit", "limits", "truncated", "prepare_ms", "environment", "python",
                                 "sandboxed", "prestarted", "figures", "files" };
        for (size_t i = 0; i < ELEMENTSOF(absent); i++)
                ck_assert_msg(!json_object_object_get_ex(r.st, absent[i], NULL), "%s is there", absent[i]);
        rendered_done(&r);
}
END_TEST

START_TEST(test_exception_with_traceback) {
        static const char tb[] =
                "Traceback (most recent call last):\n"
                "  File \"/work/script.py\", line 1, in <module>\n"
                "    import sklearn\n"
                "ModuleNotFoundError: No module named 'sklearn'\n";
        ExecuteFacts f = facts();
        ExecuteOutcome o = { .code = 1, .run_usec = 75 * USEC_PER_MSEC };
        Rendered r;

        outcome_text(&o, "", tb);
        ck_assert(execute_outcome_failed(&o));
        ck_assert_str_eq(execute_outcome_verdict(&o), "failed");
        run(&f, &o, &r);
        ck_assert_ptr_nonnull(strstr(r.text, "--- stderr ---\nTraceback (most recent call last):\n"));
        ck_assert_ptr_null(strstr(r.text, "--- stdout ---"));
        ck_assert_ptr_nonnull(strstr(r.text, "No module named 'sklearn'\n--- exit_code: 1 ---\n"));
        /* The hint names the package that provides the module, in the text and as a field. */
        const char *hint = json_get_string(r.st, "hint");
        ck_assert_ptr_nonnull(hint);
        ck_assert_ptr_nonnull(strstr(hint, "scikit-learn"));
        ck_assert_ptr_nonnull(strstr(r.text, hint));
        ck_assert_str_eq(json_get_string(r.st, "message"), hint);
        ck_assert_str_eq(json_get_string(r.st, "failed_phase"), "run");
        ck_assert_int_eq(get_int(r.st, "run_ms"), 75);
        ck_assert_int_eq(get_int(r.st, "exit_code"), 1);
        ck_assert_str_eq(json_get_string(r.st, "stderr"), tb);
        ck_assert_str_eq(json_get_string(r.st, "stdout"), "");
        ck_assert(!json_object_object_get_ex(r.st, "limit", NULL));
        ck_assert(!json_object_object_get_ex(r.st, "signal", NULL));
        rendered_done(&r);
}
END_TEST

START_TEST(test_timeout) {
        ExecuteFacts f = facts();
        ExecuteOutcome o = { .signal = SIGKILL, .timed_out = true, .limit = "timeout", .run_usec = 5 * USEC_PER_SEC };
        Rendered r;

        outcome_text(&o, "tick\n", NULL);
        ck_assert_str_eq(execute_outcome_verdict(&o), "timeout");
        ck_assert_int_eq(execute_outcome_exit_code(&o), -SIGKILL);
        run(&f, &o, &r);
        ck_assert_str_eq(r.text,
                         "--- stdout ---\ntick\n--- exit_code: -9 ---\n--- duration_ms: 1234 ---\n"
                         "--- timed_out: true ---\nThe script was stopped after 5s, the timeout.\n"
                         "--- limit: timeout ---\n");
        ck_assert_int_eq(get_int(r.st, "exit_code"), -9);
        ck_assert_str_eq(json_get_string(r.st, "signal"), "SIGKILL");
        ck_assert(json_object_get_boolean(json_get(r.st, "timed_out", json_type_boolean)));
        ck_assert_int_eq(get_int(r.st, "timeout_seconds"), 5);
        ck_assert_str_eq(json_get_string(r.st, "limit"), "timeout");
        /* A timeout is not one of the resource limits: they are not listed. */
        ck_assert(!json_object_object_get_ex(r.st, "limits", NULL));
        ck_assert(!json_object_object_get_ex(r.st, "hint", NULL));
        ck_assert_str_eq(json_get_string(r.st, "message"), "The script was stopped after 5s, the timeout.");
        ck_assert_int_eq(get_int(r.st, "run_ms"), 5000);
        rendered_done(&r);
}
END_TEST

START_TEST(test_memory) {
        ExecuteFacts f = facts();
        ExecuteOutcome o = { .signal = SIGKILL, .limit = "memory", .run_usec = 300 * USEC_PER_MSEC };
        Rendered r;

        outcome_text(&o, NULL, "Killed\n");
        ck_assert_str_eq(execute_outcome_verdict(&o), "limit");
        run(&f, &o, &r);
        ck_assert_ptr_nonnull(strstr(r.text, "--- stderr ---\nKilled\n--- exit_code: -9 ---\n"));
        ck_assert_ptr_nonnull(strstr(r.text,
                                     "The script was killed by signal 9 (Killed).\nThe script ran out of memory: it "
                                     "needed more than a run may use (limits.memory_mb).\n--- limit: memory ---\n"));
        ck_assert_str_eq(json_get_string(r.st, "message"),
                         "The script was killed by signal 9 (Killed).\nThe script ran out of memory: it needed more "
                         "than a run may use (limits.memory_mb).");
        ck_assert_str_eq(json_get_string(r.st, "limit"), "memory");
        /* The limits in force come with a resource limit the call did not ask about, in the argument's units; an
         * off one is null. */
        json_object *l = json_get(r.st, "limits", json_type_object);
        ck_assert_ptr_nonnull(l);
        ck_assert_int_eq(get_int(l, "memory_mb"), 512);
        ck_assert_int_eq(get_int(l, "max_processes"), 64);
        ck_assert_int_eq(get_int(l, "cpu_seconds"), 30);
        ck_assert(json_object_object_get_ex(l, "max_file_size_mb", NULL));
        ck_assert_ptr_null(json_get(l, "max_file_size_mb", json_type_int));
        ck_assert_str_eq(json_get_string(l, "mechanism"), "rlimits");
        ck_assert_int_eq(json_object_array_length(json_get(l, "lowered", json_type_array)), 0);
        ck_assert(!json_object_object_get_ex(r.st, "hint", NULL));
        rendered_done(&r);
}
END_TEST

START_TEST(test_killed_by_signal) {
        ExecuteFacts f = facts();
        ExecuteOutcome o = { .signal = SIGSEGV, .run_usec = 20 * USEC_PER_MSEC };
        Rendered r;
        char name[32];

        outcome_text(&o, "before\n", NULL);
        execute_signal_name(SIGSEGV, name);
        ck_assert_str_eq(name, "SIGSEGV");
        ck_assert_str_eq(execute_outcome_verdict(&o), "killed");
        run(&f, &o, &r);
        ck_assert_str_eq(r.text, "--- stdout ---\nbefore\n--- exit_code: -11 ---\n--- duration_ms: 1234 ---\n"
                                 "The script was killed by signal 11 (Segmentation fault).\n");
        ck_assert_str_eq(json_get_string(r.st, "signal"), "SIGSEGV");
        ck_assert_int_eq(get_int(r.st, "exit_code"), -11);
        ck_assert_str_eq(json_get_string(r.st, "failed_phase"), "run");
        ck_assert(!json_object_object_get_ex(r.st, "limit", NULL));
        ck_assert(!json_object_object_get_ex(r.st, "timed_out", NULL));
        rendered_done(&r);
}
END_TEST

START_TEST(test_truncated_head_and_tail) {
        _cleanup_free_ char *out = NULL;
        ExecuteFacts f = facts();
        ExecuteOutcome o = {};
        Capture c;
        size_t len;
        Rendered r;

        /* 1000 numbered lines through a capture that keeps 200 bytes at the head and 200 at the tail. */
        ck_assert_int_eq(capture_init(&c, 200, 200), 0);
        for (unsigned i = 0; i < 1000; i++) {
                char line[32];
                int n = snprintf(line, sizeof(line), "line %u\n", i);
                capture_add(&c, line, (size_t) n);
        }
        out = capture_text(&c, &len);
        ck_assert_ptr_nonnull(out);
        o.out = out;
        o.out_len = len;
        o.out_total = c.total;
        o.out_omitted = capture_omitted(&c);
        ck_assert_uint_gt(o.out_omitted, 0);

        run(&f, &o, &r);
        ck_assert_ptr_nonnull(strstr(r.text, "--- stdout ---\nline 0\nline 1\n"));
        ck_assert_ptr_nonnull(strstr(r.text, "line 999\n--- exit_code: 0 ---\n"));
        ck_assert_ptr_nonnull(strstr(r.text, "bytes omitted ..."));
        ck_assert_ptr_null(strstr(r.text, "line 500\n"));
        json_object *tr = json_get(r.st, "truncated", json_type_object);
        ck_assert_ptr_nonnull(tr);
        ck_assert_int_eq(get_int(tr, "stdout_bytes_total"), (int64_t) c.total);
        ck_assert_int_eq(get_int(tr, "stdout_bytes_omitted"), (int64_t) capture_omitted(&c));
        ck_assert_int_eq(get_int(tr, "stderr_bytes_total"), 0);
        ck_assert_int_eq(get_int(tr, "stderr_bytes_omitted"), 0);
        ck_assert_str_eq(json_get_string(r.st, "stdout"), out);
        rendered_done(&r);
        capture_done(&c);
}
END_TEST

/* A 2x3 PNG as far as the renderer looks: the signature and the IHDR chunk. */
static const char png[24] = { (char) 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13,
                              'I', 'H', 'D', 'R', 0, 0, 0, 2, 0, 0, 0, 3 };

/* One record of the stream the sandbox writes (outputs.h): data NULL for one it left out ('f', 'o'). */
static void feed_record(Outputs *o, char kind, const char *name, uint64_t size, const void *data) {
        uint8_t h[13] = { (uint8_t) kind };
        size_t n = strlen(name);

        for (unsigned i = 0; i < 4; i++)
                h[1 + i] = (uint8_t) (n >> (24 - 8 * i));
        for (unsigned i = 0; i < 8; i++)
                h[5 + i] = (uint8_t) (size >> (56 - 8 * i));
        outputs_feed(o, h, sizeof(h));
        outputs_feed(o, name, n);
        if (data)
                outputs_feed(o, data, (size_t) size);
}

START_TEST(test_figures_and_files) {
        _cleanup_(outputs_freep) Outputs *out = NULL;
        ExecuteFacts f = facts();
        ExecuteOutcome o = {};
        Rendered r;

        ck_assert_int_ge(outputs_new(&out), 0);
        feed_record(out, 'F', "figure-1.png", sizeof(png), png);
        feed_record(out, 'O', "result.csv", 4, "a,b\n");
        f.outputs = out;
        outcome_text(&o, "plotted\n", NULL);
        run(&f, &o, &r);
        /* Figures and files reach the model in content[] only: then there is no structuredContent. */
        ck_assert_ptr_null(r.st);
        ck_assert_str_eq(r.text, "--- stdout ---\nplotted\n--- exit_code: 0 ---\n--- duration_ms: 1234 ---\n");
        bool image = false, csv = false;
        for (size_t i = 1; i < json_object_array_length(r.content); i++) {
                json_object *b = json_object_array_get_idx(r.content, i);
                const char *type = json_get_string(b, "type");
                if (streq(type, "image")) {
                        image = true;
                        ck_assert_str_eq(json_get_string(b, "mimeType"), "image/png");
                } else if (streq(type, "text") && strstr(json_get_string(b, "text"), "out/result.csv"))
                        csv = strstr(json_get_string(b, "text"), "a,b\n") != NULL;
        }
        ck_assert(image);
        ck_assert(csv);
        rendered_done(&r);
}
END_TEST

START_TEST(test_files_left_out_are_listed) {
        _cleanup_(outputs_freep) Outputs *out = NULL;
        ExecuteFacts f = facts();
        ExecuteOutcome o = {};
        Rendered r;

        /* Nothing comes in content[]: the structured fields say what was left out. */
        ck_assert_int_ge(outputs_new(&out), 0);
        feed_record(out, 'o', "huge.bin", 1ull << 32, NULL);
        f.outputs = out;
        run(&f, &o, &r);
        ck_assert_ptr_nonnull(r.st);
        json_object *files = json_get(r.st, "files", json_type_array);
        ck_assert_ptr_nonnull(files);
        ck_assert_int_eq(json_object_array_length(files), 1);
        ck_assert_str_eq(json_get_string(json_object_array_get_idx(files, 0), "name"), "huge.bin");
        ck_assert(!json_object_object_get_ex(r.st, "figures", NULL));
        rendered_done(&r);
}
END_TEST

START_TEST(test_clamped_and_lowered_with_plan) {
        Python py = { .version = (char *) "3.12.1", .prefix = (char *) "/usr" };
        ScriptPlan plan = { .python = &py, .warm = true };
        char *warnings[] = { (char *) "a warning", NULL };
        ExecuteFacts f = facts();
        ExecuteOutcome o = {};
        Rendered r;

        ck_assert_int_eq(requirement_list_append(&plan.requirements, "Rich>=13", NULL), 0);
        strcpy(plan.key, "abc123");
        plan.warnings = warnings;
        f.plan = &plan;
        f.built_now = true;
        f.timeout_clamped = true;
        f.limits_lowered = SANDBOX_LIMIT_MEMORY;
        f.limits_asked = true;
        f.banner = "WARNING: no sandbox";
        char *refused[] = { (char *) "example.com", NULL };
        f.network_refused = refused;
        run(&f, &o, &r);
        ck_assert_str_eq(r.text, "WARNING: no sandbox\n--- exit_code: 0 ---\n--- duration_ms: 1234 ---\n"
                                 "--- timeout_clamped: 5s (the server's maximum) ---\n"
                                 "--- limits.memory_mb lowered to 512 (the server's maximum) ---\n"
                                 "--- network_refused: example.com (not in the administrator's network allowlist, "
                                 "network-allow) ---\n");
        ck_assert_str_eq(json_get_string(r.st, "message"),
                         "The timeout asked for was lowered to 5s, the server's maximum.\n"
                         "limits.memory_mb was lowered to 512, the server's maximum.");
        ck_assert(json_object_get_boolean(json_get(r.st, "timeout_clamped", json_type_boolean)));
        ck_assert_int_eq(get_int(r.st, "timeout_seconds"), 5);
        ck_assert_int_eq(get_int(r.st, "prepare_ms"), 10);
        ck_assert_str_eq(json_get_string(r.st, "python"), "3.12.1");
        json_object *env = json_get(r.st, "environment", json_type_object);
        ck_assert_str_eq(json_get_string(env, "key"), "abc123");
        /* Built for this call: not warm. */
        ck_assert(!json_object_get_boolean(json_get(env, "warm", json_type_boolean)));
        ck_assert_int_eq(json_object_array_length(json_get(env, "requirements", json_type_array)), 1);
        json_object *lowered = json_get(json_get(r.st, "limits", json_type_object), "lowered", json_type_array);
        ck_assert_int_eq(json_object_array_length(lowered), 1);
        ck_assert_str_eq(json_object_get_string(json_object_array_get_idx(lowered, 0)), "memory_mb");
        ck_assert(!json_object_get_boolean(json_get(r.st, "sandboxed", json_type_boolean)));
        ck_assert_str_eq(json_get_string(r.st, "sandbox_warning"), "WARNING: no sandbox");
        ck_assert_int_eq(json_object_array_length(json_get(r.st, "warnings", json_type_array)), 1);
        ck_assert_int_eq(json_object_array_length(json_get(r.st, "network_refused", json_type_array)), 1);
        rendered_done(&r);
        requirement_list_done(&plan.requirements);
}
END_TEST

START_TEST(test_error_before_the_run) {
        json_object *content = NULL, *st = NULL;
        ExecuteFacts f = facts();

        f.banner = "WARNING: no sandbox";
        execute_render_error(&f, "prepare", "installing the dependencies (nope) failed:\nno such package", &content,
                             &st);
        ck_assert_int_eq(json_object_array_length(content), 1);
        ck_assert_str_eq(json_get_string(json_object_array_get_idx(content, 0), "text"),
                         "WARNING: no sandbox\n--- error ---\ninstalling the dependencies (nope) failed:\nno such "
                         "package\n--- phase: prepare ---\n--- duration_ms: 1234 ---\n");
        ck_assert_str_eq(json_get_string(st, "failed_phase"), "prepare");
        ck_assert_str_eq(json_get_string(st, "error"),
                         "installing the dependencies (nope) failed:\nno such package");
        /* A failure before the run says how long preparing took; one in the run does not. */
        ck_assert_int_eq(get_int(st, "prepare_ms"), 10);
        ck_assert(!json_object_object_get_ex(st, "exit_code", NULL));
        json_object_put(content);
        json_object_put(st);

        execute_render_error(&f, "run", NULL, &content, &st);
        ck_assert_str_eq(json_get_string(st, "error"), "failed");
        ck_assert(!json_object_object_get_ex(st, "prepare_ms", NULL));
        ck_assert_ptr_nonnull(strstr(json_get_string(json_object_array_get_idx(content, 0), "text"),
                                     "--- error ---\nfailed\n--- phase: run ---\n"));
        json_object_put(content);
        json_object_put(st);
}
END_TEST

START_TEST(test_refusal_names_the_cap) {
        _cleanup_free_ char *all = NULL, *one = NULL, *mine = NULL;

        all = execute_refusal_message(SCHEDULER_QUEUE_FULL, 1, 0, 8, 0);
        ck_assert_str_eq(all, "the server is busy: 1 script is running (0 of them yours) and 8 waiting, the most it "
                              "takes (max-queue). Try again in a little while");
        one = execute_refusal_message(SCHEDULER_USER_QUEUE_FULL, 4, 1, 8, 2);
        ck_assert_str_eq(one, "you have 1 script running and 2 waiting, the most one user may have "
                              "(max-runs-per-user). Try again when one of them has finished");
        mine = execute_refusal_message(SCHEDULER_USER_QUEUE_FULL, 4, 3, 8, 2);
        ck_assert_ptr_nonnull(strstr(mine, "you have 3 scripts running"));
}
END_TEST

static Suite *render_suite(void) {
        Suite *s = suite_create("execute-render");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_exit_zero);
        tcase_add_test(tc, test_exception_with_traceback);
        tcase_add_test(tc, test_timeout);
        tcase_add_test(tc, test_memory);
        tcase_add_test(tc, test_killed_by_signal);
        tcase_add_test(tc, test_truncated_head_and_tail);
        tcase_add_test(tc, test_figures_and_files);
        tcase_add_test(tc, test_files_left_out_are_listed);
        tcase_add_test(tc, test_clamped_and_lowered_with_plan);
        tcase_add_test(tc, test_error_before_the_run);
        tcase_add_test(tc, test_refusal_names_the_cap);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(render_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

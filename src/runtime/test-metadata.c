/* SPDX-License-Identifier: MIT */
/*
 * The metadata reader's request queue (runtime/metadata.h) without a Runtime or a sandbox: its spawn function is a
 * fake that runs the "interpreter" directly, and the interpreter is a shell script that answers by what the block
 * says. Covered: answers always come through the loop; the cache (answers kept, failures not); the reader's
 * errors; no Python new enough; a sandbox that does not work; cancelling (waiting, running, answered); the
 * scheduler's helper caps, global and per user; freeing the reader with requests in flight.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <systemd/sd-event.h>
#include <unistd.h>

#include "fs-util.h"
#include "macro.h"
#include "runtime/metadata.h"
#include "runtime/programs.h"

/*
 * The interpreter: checks it was started as the reader is (the program, then the block's path), reads the block
 * (its stdin here) and answers as metadata-reader.py would, or not at all: "crash" exits 3, "garbage" prints no
 * JSON, "hang" waits to be killed; "bad" is a TOML error; "many N TAG" is a document naming TAG with an array of N
 * numbers, "long N TAG" one with a string of N bytes; anything else is a document naming the block's first word.
 */
static const char fake_python[] =
        "#!/bin/sh\n"
        "[ \"$1 $2 $3 $5\" = \"-I -S -c " METADATA_READER_PATH "\" ] || { echo \"unexpected: $*\" >&2; exit 2; }\n"
        "block=$(cat)\n"
        "case \"$block\" in\n"
        "*crash*) echo 'Traceback (most recent call last): boom' >&2; exit 3 ;;\n"
        "*garbage*) echo 'this is not JSON' ;;\n"
        "*hang*) exec sleep 60 ;;\n"
        "*bad*) echo '{\"error\": \"Invalid statement (at line 1, column 1)\"}' ;;\n"
        "*many*) set -- $block; printf '{\"doc\": {\"seen\": \"%s\", \"x\": [%s]}}\\n' \"$3\" \"$(seq -s, 1 $2)\" ;;\n"
        "*long*) set -- $block; printf '{\"doc\": {\"seen\": \"%s\", \"x\": \"%s\"}}\\n' \"$3\" \"$(head -c $2 /dev/zero | tr '\\0' a)\" ;;\n"
        "*) set -- $block; printf '{\"doc\": {\"seen\": \"%s\"}}\\n' \"$1\" ;;\n"
        "esac\n";

typedef struct Fixture {
        char dir[64];
        char *python;
        sd_event *event;
        Scheduler *sched;
        Pythons pythons;
        MetadataReader *reader;
        unsigned n_spawned;
        int fail;                       /* returned by the spawn instead of starting anything, unless 0 */
        bool program_ok;                /* every spawn was handed the reader's program and the block */
} Fixture;

typedef struct Answer {
        unsigned n;
        char *seen;                     /* doc's "seen" */
        char *error;
} Answer;

static int fake_spawn(void *userdata, const Python *py, const SandboxData *data, char *const *command,
                      ProcessDoneFunc done, void *done_userdata, Process **ret) {
        Fixture *f = userdata;

        f->n_spawned++;
        if (!streq(command[0], py->executable) || command[4] != metadata_reader_code ||
            !streq(data->dest, METADATA_READER_PATH))
                f->program_ok = false;
        if (f->fail)
                return f->fail;
        ProcessOptions o = {
                .argv = command,
                .stdin_fd = data->fd,
                .timeout_usec = 60 * USEC_PER_SEC,
                .head_max = 1024 * 1024,        /* as the Runtime's */
                .tail_max = 0,
        };
        return process_spawn(f->event, &o, done, done_userdata, ret);
}

static void on_parsed(json_object *doc, const char *error, void *userdata) {
        Answer *a = userdata;
        json_object *seen = NULL;

        a->n++;
        free(a->seen);
        free(a->error);
        a->seen = doc && json_object_object_get_ex(doc, "seen", &seen) ? strdup(json_object_get_string(seen)) : NULL;
        a->error = error ? strdup(error) : NULL;
}

static void answer_done(Answer *a) {
        free(a->seen);
        free(a->error);
        *a = (Answer) {};
}

static void setup(Fixture *f, const char *version) {
        sigset_t ss;
        int fd;

        *f = (Fixture) { .program_ok = true };
        /* sd-event watches children through SIGCHLD: it must be blocked. */
        sigemptyset(&ss);
        sigaddset(&ss, SIGCHLD);
        ck_assert_int_eq(sigprocmask(SIG_BLOCK, &ss, NULL), 0);
        strcpy(f->dir, "/tmp/test-metadata-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(f->dir));
        ck_assert_int_ge(asprintf(&f->python, "%s/python3", f->dir), 0);
        fd = open(f->python, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0755);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write_all(fd, fake_python, strlen(fake_python)), 0);
        close(fd);
        ck_assert_int_eq(pythons_add(&f->pythons, version, f->python, "/usr"), 1);
        ck_assert_int_ge(sd_event_new(&f->event), 0);
        ck_assert_int_eq(scheduler_new(&f->sched), 0);
        ck_assert_int_eq(metadata_reader_new(&f->reader, f->event, f->sched, &f->pythons, fake_spawn, f), 0);
}

static void teardown(Fixture *f) {
        f->reader = metadata_reader_free(f->reader);
        scheduler_free(f->sched);
        sd_event_unref(f->event);
        pythons_done(&f->pythons);
        ck_assert_int_eq(unlink(f->python), 0);
        ck_assert_int_eq(rmdir(f->dir), 0);
        free(f->python);
}

/* Run the loop until a has n answers. */
static void wait_answers(Fixture *f, Answer *a, unsigned n) {
        while (a->n < n)
                ck_assert_int_ge(sd_event_run(f->event, UINT64_MAX), 0);
}

/* Let the loop do what is due now, without waiting. */
static void turn(Fixture *f) {
        for (int i = 0; i < 4; i++)
                ck_assert_int_ge(sd_event_run(f->event, 0), 0);
}

START_TEST(test_answer_comes_through_the_loop) {
        Fixture f;
        Answer a = {};
        TomlRequest *q = NULL;

        setup(&f, "3.12.1");
        ck_assert_int_eq(metadata_reader_parse(f.reader, 1000, "one = 1\n", on_parsed, &a, &q), 0);
        ck_assert_ptr_nonnull(q);
        ck_assert_uint_eq(a.n, 0);       /* never from inside the call */
        wait_answers(&f, &a, 1);
        ck_assert_str_eq(a.seen, "one");
        ck_assert_ptr_null(a.error);
        ck_assert_uint_eq(f.n_spawned, 1);
        ck_assert(f.program_ok);
        answer_done(&a);
        teardown(&f);
}
END_TEST

static void on_parsed_doc(json_object *doc, const char *error, void *userdata) {
        char **ret = userdata;

        ck_assert_ptr_null(error);
        ck_assert_ptr_nonnull(doc);
        *ret = strdup(json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PLAIN));
}

/* A block as people write it is read in the daemon (pep723/toml-subset.h): no reader starts, not even without a
 * Python that has tomllib; the answer still comes through the loop. */
START_TEST(test_common_blocks_need_no_reader) {
        static const char *const versions[] = { "3.12.1", "3.10.4" };

        for (size_t i = 0; i < ELEMENTSOF(versions); i++) {
                Fixture f;
                TomlRequest *q = NULL;
                char *doc = NULL;

                setup(&f, versions[i]);
                ck_assert_int_eq(metadata_reader_parse(f.reader, 1000,
                                                       "requires-python = \">=3.11\"\n"
                                                       "dependencies = [\n  \"rich\",  # pretty\n  'six',\n]\n",
                                                       on_parsed_doc, &doc, &q), 0);
                ck_assert_ptr_null(doc);   /* never from inside the call */
                while (!doc)
                        ck_assert_int_ge(sd_event_run(f.event, UINT64_MAX), 0);
                ck_assert_str_eq(doc, "{\"requires-python\":\">=3.11\",\"dependencies\":[\"rich\",\"six\"]}");
                ck_assert_uint_eq(f.n_spawned, 0);
                free(doc);
                teardown(&f);
        }
}
END_TEST

START_TEST(test_cache_keeps_answers) {
        Fixture f;
        Answer a = {}, b = {}, c = {}, d = {}, e = {};
        TomlRequest *q;

        setup(&f, "3.13.0");
        ck_assert_int_eq(metadata_reader_parse(f.reader, 1000, "one = 1\n", on_parsed, &a, &q), 0);
        wait_answers(&f, &a, 1);
        /* The same block, from another user too: the cache answers, still through the loop. */
        ck_assert_int_eq(metadata_reader_parse(f.reader, 1001, "one = 1\n", on_parsed, &b, &q), 0);
        ck_assert_uint_eq(b.n, 0);
        wait_answers(&f, &b, 1);
        ck_assert_str_eq(b.seen, "one");
        ck_assert_uint_eq(f.n_spawned, 1);
        /* A block that differs by one byte is read again. */
        ck_assert_int_eq(metadata_reader_parse(f.reader, 1000, "one = 1\n\n", on_parsed, &c, &q), 0);
        wait_answers(&f, &c, 1);
        ck_assert_uint_eq(f.n_spawned, 2);
        /* A TOML error is an answer too, and kept. */
        ck_assert_int_eq(metadata_reader_parse(f.reader, 1000, "bad\n", on_parsed, &d, &q), 0);
        wait_answers(&f, &d, 1);
        ck_assert_ptr_null(d.seen);
        ck_assert_str_eq(d.error, "Invalid statement (at line 1, column 1)");
        ck_assert_int_eq(metadata_reader_parse(f.reader, 1000, "bad\n", on_parsed, &e, &q), 0);
        wait_answers(&f, &e, 1);
        ck_assert_str_eq(e.error, "Invalid statement (at line 1, column 1)");
        ck_assert_uint_eq(f.n_spawned, 3);
        answer_done(&a);
        answer_done(&b);
        answer_done(&c);
        answer_done(&d);
        answer_done(&e);
        teardown(&f);
}
END_TEST

/* A reader that fails (dies, or prints no JSON) says so, and the failure is not kept: the next request tries again. */
START_TEST(test_reader_failure_is_not_cached) {
        static const char *const blocks[] = { "crash = 1\n", "garbage = 1\n" };
        Fixture f;
        TomlRequest *q;

        setup(&f, "3.11.4");
        for (size_t i = 0; i < ELEMENTSOF(blocks); i++) {
                unsigned before = f.n_spawned;
                for (int round = 0; round < 2; round++) {
                        Answer a = {};
                        ck_assert_int_eq(metadata_reader_parse(f.reader, 1000, blocks[i], on_parsed, &a, &q), 0);
                        wait_answers(&f, &a, 1);
                        ck_assert_ptr_null(a.seen);
                        ck_assert_str_eq(a.error, "the metadata reader failed; see the daemon's log");
                        answer_done(&a);
                }
                ck_assert_uint_eq(f.n_spawned, before + 2);
        }
        ck_assert(f.program_ok);
        teardown(&f);
}
END_TEST

/* tomllib came in 3.11: with nothing newer, no reader starts and the request says why. */
START_TEST(test_no_python_new_enough) {
        Fixture f;
        Answer a = {};
        TomlRequest *q;

        setup(&f, "3.10.12");
        ck_assert_int_eq(metadata_reader_parse(f.reader, 1000, "one = 1\n", on_parsed, &a, &q), 0);
        ck_assert_uint_eq(a.n, 0);
        wait_answers(&f, &a, 1);
        ck_assert_ptr_null(a.seen);
        ck_assert_ptr_nonnull(strstr(a.error, "needs Python 3.11 or newer"));
        ck_assert_uint_eq(f.n_spawned, 0);
        answer_done(&a);
        teardown(&f);
}
END_TEST

/* The spawn refuses: RUNTIME_NO_SANDBOX names the sandbox, an errno does not; neither is kept. */
START_TEST(test_spawn_refused) {
        Fixture f;
        Answer a = {}, b = {}, c = {};
        TomlRequest *q;

        setup(&f, "3.12.1");
        f.fail = RUNTIME_NO_SANDBOX;
        ck_assert_int_eq(metadata_reader_parse(f.reader, 1000, "one = 1\n", on_parsed, &a, &q), 0);
        ck_assert_uint_eq(a.n, 0);
        wait_answers(&f, &a, 1);
        ck_assert_ptr_null(a.seen);
        ck_assert_str_eq(a.error, "the sandbox does not work on this server");
        f.fail = -EMFILE;
        ck_assert_int_eq(metadata_reader_parse(f.reader, 1000, "one = 1\n", on_parsed, &b, &q), 0);
        wait_answers(&f, &b, 1);
        ck_assert_str_eq(b.error, "the metadata reader could not be started");
        f.fail = 0;
        ck_assert_int_eq(metadata_reader_parse(f.reader, 1000, "one = 1\n", on_parsed, &c, &q), 0);
        wait_answers(&f, &c, 1);
        ck_assert_str_eq(c.seen, "one");
        ck_assert_uint_eq(f.n_spawned, 3);
        /* The helper places were all given back. */
        ck_assert_uint_eq(scheduler_held(f.sched, SCHED_HELPER), 0);
        answer_done(&a);
        answer_done(&b);
        answer_done(&c);
        teardown(&f);
}
END_TEST

START_TEST(test_cancel) {
        Fixture f;
        Answer a = {}, b = {}, c = {};
        TomlRequest *qa, *qb, *qc;

        setup(&f, "3.12.1");
        /* Running: the reader is killed, nobody is called, its place is free again. */
        ck_assert_int_eq(metadata_reader_parse(f.reader, 1000, "hang = 1\n", on_parsed, &a, &qa), 0);
        ck_assert_uint_eq(f.n_spawned, 1);
        ck_assert_uint_eq(scheduler_held(f.sched, SCHED_HELPER), 1);
        turn(&f);
        runtime_toml_cancel(qa);
        ck_assert_uint_eq(scheduler_held(f.sched, SCHED_HELPER), 0);
        /* Answered from the cache, cancelled before the loop delivers it. */
        ck_assert_int_eq(metadata_reader_parse(f.reader, 1000, "one = 1\n", on_parsed, &b, &qb), 0);
        wait_answers(&f, &b, 1);
        ck_assert_int_eq(metadata_reader_parse(f.reader, 1000, "one = 1\n", on_parsed, &c, &qc), 0);
        runtime_toml_cancel(qc);
        runtime_toml_cancel(NULL);
        turn(&f);
        ck_assert_uint_eq(a.n, 0);
        ck_assert_uint_eq(c.n, 0);
        ck_assert_uint_eq(f.n_spawned, 2);
        answer_done(&b);
        teardown(&f);
}
END_TEST

/* max-helpers: the blocks beyond the cap wait for a place, and get it when one is given back. */
START_TEST(test_helper_cap_queues) {
        Fixture f;
        Answer a = {}, b = {}, c = {};
        TomlRequest *qa, *qb, *qc;

        setup(&f, "3.12.1");
        scheduler_set_limits(f.sched, SCHED_HELPER, &(SchedLimits) { .total = 1, .per_user = 1 });
        ck_assert_int_eq(metadata_reader_parse(f.reader, 1000, "hang = 1\n", on_parsed, &a, &qa), 0);
        ck_assert_int_eq(metadata_reader_parse(f.reader, 1001, "two = 2\n", on_parsed, &b, &qb), 0);
        ck_assert_int_eq(metadata_reader_parse(f.reader, 1002, "three = 3\n", on_parsed, &c, &qc), 0);
        turn(&f);
        ck_assert_uint_eq(f.n_spawned, 1);
        ck_assert_uint_eq(scheduler_waiting(f.sched, SCHED_HELPER), 2);
        /* A waiting one cancelled leaves the queue; the running one cancelled lets the next start. */
        runtime_toml_cancel(qc);
        ck_assert_uint_eq(scheduler_waiting(f.sched, SCHED_HELPER), 1);
        runtime_toml_cancel(qa);
        ck_assert_uint_eq(f.n_spawned, 2);
        wait_answers(&f, &b, 1);
        ck_assert_str_eq(b.seen, "two");
        ck_assert_uint_eq(a.n, 0);
        ck_assert_uint_eq(c.n, 0);
        answer_done(&b);
        teardown(&f);
}
END_TEST

/* max-helpers-per-user: one user's blocks wait behind each other, not in front of another user's. */
START_TEST(test_helper_cap_per_user) {
        Fixture f;
        Answer a = {}, b = {}, c = {};
        TomlRequest *qa, *qb, *qc;

        setup(&f, "3.12.1");
        scheduler_set_limits(f.sched, SCHED_HELPER, &(SchedLimits) { .total = 4, .per_user = 1 });
        ck_assert_int_eq(metadata_reader_parse(f.reader, 1000, "hang = 1\n", on_parsed, &a, &qa), 0);
        ck_assert_int_eq(metadata_reader_parse(f.reader, 1000, "two = 2\n", on_parsed, &b, &qb), 0);
        ck_assert_int_eq(metadata_reader_parse(f.reader, 1001, "three = 3\n", on_parsed, &c, &qc), 0);
        ck_assert_uint_eq(f.n_spawned, 2);
        wait_answers(&f, &c, 1);
        ck_assert_str_eq(c.seen, "three");
        ck_assert_uint_eq(b.n, 0);
        ck_assert_uint_eq(scheduler_waiting_for(f.sched, SCHED_HELPER, 1000), 1);
        runtime_toml_cancel(qa);
        wait_answers(&f, &b, 1);
        ck_assert_str_eq(b.seen, "two");
        ck_assert_uint_eq(f.n_spawned, 3);
        answer_done(&b);
        answer_done(&c);
        teardown(&f);
}
END_TEST

/* An answer of more values or bytes than the daemon parses is refused by its count, and the refusal kept; one
 * within the budget is read. */
START_TEST(test_answer_budget) {
        static const struct {
                const char *block, *seen;
        } cases[] = {
                { "many 4000 fits\n", "fits" },
                { "many 5000 values\n", NULL },
                { "long 200000 fits\n", "fits" },
                { "long 300000 bytes\n", NULL },
        };
        Fixture f;
        TomlRequest *q;

        setup(&f, "3.12.1");
        for (size_t i = 0; i < ELEMENTSOF(cases); i++)
                for (uid_t uid = 1000; uid < 1002; uid++) {
                        Answer a = {};
                        ck_assert_int_eq(metadata_reader_parse(f.reader, uid, cases[i].block, on_parsed, &a, &q), 0);
                        wait_answers(&f, &a, 1);
                        if (cases[i].seen) {
                                ck_assert_ptr_null(a.error);
                                ck_assert_str_eq(a.seen, cases[i].seen);
                        } else {
                                ck_assert_ptr_null(a.seen);
                                ck_assert_ptr_nonnull(a.error);
                                ck_assert_ptr_nonnull(strstr(a.error, "at most 4096 values and 256 KiB"));
                        }
                        /* The second time, from the cache. */
                        ck_assert_uint_eq(f.n_spawned, i + 1);
                        answer_done(&a);
                }
        ck_assert(f.program_ok);
        teardown(&f);
}
END_TEST

/* The cache holds answers of METADATA_CACHE_MAX_COST in all, far fewer than METADATA_CACHE_SIZE of the largest:
 * the oldest goes first, the newest stays. Answers of many values and of long strings both count. */
START_TEST(test_cache_budget) {
        static const char *const kinds[] = { "many 4000", "long 200000" };
        const unsigned n = 40;   /* each costs more than 200 KiB: 8 MiB in all */
        char block[64];

        ck_assert_uint_lt(n, METADATA_CACHE_SIZE);
        ck_assert_uint_lt(METADATA_CACHE_MAX_COST, n * 200 * 1024);
        for (size_t kind = 0; kind < ELEMENTSOF(kinds); kind++) {
                Fixture f;
                TomlRequest *q;

                setup(&f, "3.13.0");
                for (unsigned i = 0; i < n; i++) {
                        Answer a = {};
                        snprintf(block, sizeof(block), "%s t%u\n", kinds[kind], i);
                        ck_assert_int_eq(metadata_reader_parse(f.reader, 1000, block, on_parsed, &a, &q), 0);
                        wait_answers(&f, &a, 1);
                        ck_assert_ptr_null(a.error);
                        answer_done(&a);
                }
                ck_assert_uint_eq(f.n_spawned, n);
                for (unsigned k = 0; k < 2; k++) {
                        /* The newest is kept; the oldest had to go, and is read again. */
                        Answer a = {};
                        snprintf(block, sizeof(block), "%s t%u\n", kinds[kind], k == 0 ? n - 1 : 0);
                        ck_assert_int_eq(metadata_reader_parse(f.reader, 1000, block, on_parsed, &a, &q), 0);
                        wait_answers(&f, &a, 1);
                        ck_assert_uint_eq(f.n_spawned, k == 0 ? n : n + 1);
                        answer_done(&a);
                }
                teardown(&f);
        }
}
END_TEST

/* Freed with a reader running, one waiting and an answer not yet delivered: nobody is called, nothing leaks. */
START_TEST(test_free_with_requests) {
        Fixture f;
        Answer a = {}, b = {}, c = {};
        TomlRequest *q;

        setup(&f, "3.12.1");
        scheduler_set_limits(f.sched, SCHED_HELPER, &(SchedLimits) { .total = 1, .per_user = 1 });
        ck_assert_int_eq(metadata_reader_parse(f.reader, 1000, "hang = 1\n", on_parsed, &a, &q), 0);
        ck_assert_int_eq(metadata_reader_parse(f.reader, 1001, "two = 2\n", on_parsed, &b, &q), 0);
        f.fail = RUNTIME_NO_SANDBOX;
        turn(&f);
        ck_assert_uint_eq(f.n_spawned, 1);
        f.reader = metadata_reader_free(f.reader);
        /* The waiting one was not started on the way out. */
        ck_assert_uint_eq(f.n_spawned, 1);
        ck_assert_uint_eq(scheduler_held(f.sched, SCHED_HELPER), 0);
        ck_assert_uint_eq(scheduler_waiting(f.sched, SCHED_HELPER), 0);
        turn(&f);
        ck_assert_uint_eq(a.n + b.n + c.n, 0);
        teardown(&f);
}
END_TEST

static Suite *metadata_suite(void) {
        Suite *s = suite_create("metadata");
        TCase *tc = tcase_create("reader");

        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_answer_comes_through_the_loop);
        tcase_add_test(tc, test_cache_keeps_answers);
        tcase_add_test(tc, test_common_blocks_need_no_reader);
        tcase_add_test(tc, test_reader_failure_is_not_cached);
        tcase_add_test(tc, test_no_python_new_enough);
        tcase_add_test(tc, test_spawn_refused);
        tcase_add_test(tc, test_cancel);
        tcase_add_test(tc, test_helper_cap_queues);
        tcase_add_test(tc, test_helper_cap_per_user);
        tcase_add_test(tc, test_free_with_requests);
        tcase_add_test(tc, test_answer_budget);
        tcase_add_test(tc, test_cache_budget);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(metadata_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

/* The shape every Check unit test shares: cases built from a list of
 * tests, and the end of main() that turns the failure count into the exit
 * status automake's harness reads. */
#ifndef TRACESAN_TESTS_SUPPORT_CHECK_RUN_H
#define TRACESAN_TESTS_SUPPORT_CHECK_RUN_H

#include <check.h>
#include <stddef.h>
#include <stdlib.h>

static inline int ts_check_run(Suite *suite)
{
    SRunner *runner = srunner_create(suite);
    srunner_run_all(runner, CK_NORMAL);
    int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

/* A case of `tests` in `suite`; timeout_s 0 keeps Check's default, setup
 * and teardown (may be NULL) run around each test in its own process. */
static inline void ts_check_add_case(Suite *suite, const char *name,
                                     double timeout_s, SFun setup,
                                     SFun teardown,
                                     const TTest *const *tests,
                                     size_t n_tests)
{
    TCase *tcase = tcase_create(name);
    if (timeout_s > 0)
        tcase_set_timeout(tcase, timeout_s);
    if (setup != NULL || teardown != NULL)
        tcase_add_checked_fixture(tcase, setup, teardown);
    for (size_t i = 0; i < n_tests; i++)
        tcase_add_test(tcase, tests[i]);
    suite_add_tcase(suite, tcase);
}

/* Tests that register themselves: a file whose tests form one case
 * defines them with TS_TEST instead of START_TEST (END_TEST closes both)
 * and ends main() with ts_check_main, so a test cannot be written and
 * then forgotten in a hand-kept list. */
#define TS_CHECK_MAX_TESTS 256

static const TTest *ts_check_registered[TS_CHECK_MAX_TESTS];
static size_t ts_check_n_registered;
static int ts_check_overflow;

static inline void ts_check_register(const TTest *test)
{
    if (ts_check_n_registered == TS_CHECK_MAX_TESTS) {
        ts_check_overflow = 1;
        return;
    }
    ts_check_registered[ts_check_n_registered++] = test;
}

#define TS_TEST(name)                                                        \
    static void name##_fn(int _i CK_ATTRIBUTE_UNUSED);                       \
    static const TTest name##_ttest = { "" #name, name##_fn, __FILE__,       \
                                        __LINE__ };                          \
    __attribute__((constructor)) static void name##_register(void)           \
    {                                                                        \
        ts_check_register(&name##_ttest);                                    \
    }                                                                        \
    static void name##_fn(int _i CK_ATTRIBUTE_UNUSED)

static inline int ts_check_compare_lines(const void *a, const void *b)
{
    int x = (*(const TTest *const *)a)->line;
    int y = (*(const TTest *const *)b)->line;
    return (x > y) - (x < y);
}

/* Runs every TS_TEST of the file, in the order they are written, as one
 * case of suite `name`. */
static inline int ts_check_main(const char *name, double timeout_s,
                                SFun setup, SFun teardown)
{
    if (ts_check_overflow || ts_check_n_registered == 0)
        return EXIT_FAILURE;
    qsort(ts_check_registered, ts_check_n_registered,
          sizeof ts_check_registered[0], ts_check_compare_lines);
    Suite *suite = suite_create(name);
    ts_check_add_case(suite, name, timeout_s, setup, teardown,
                      ts_check_registered, ts_check_n_registered);
    return ts_check_run(suite);
}

#define TS_CHECK_CASE(suite, name, timeout_s, setup, teardown, ...)          \
    ts_check_add_case((suite), (name), (timeout_s), (setup), (teardown),     \
                      (const TTest *const[]){ __VA_ARGS__ },                 \
                      sizeof((const TTest *const[]){ __VA_ARGS__ }) /        \
                          sizeof(const TTest *))

#endif

/* The shape every Check unit test shares: tests that register themselves
 * into cases, and the end of main() that turns the failure count into the
 * exit status automake's harness reads. */
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

/* Tests that register themselves: a file defines its tests with TS_TEST
 * instead of START_TEST (END_TEST closes both) and ends main() with
 * ts_check_main, so a test cannot be written and then forgotten in a
 * hand-kept list. Tests that need another timeout or fixture than the
 * rest of their file go in a case of their own: declared once with
 * TS_CASE, each of its tests with TS_TEST_IN. */
#define TS_CHECK_MAX_TESTS 256

typedef struct ts_check_case {
    const char *name;
    double timeout_s;        /* 0 keeps Check's default */
    SFun setup, teardown;    /* may be NULL */
    int line;
} ts_check_case;

typedef struct ts_check_entry {
    const TTest *test;
    const ts_check_case *tcase;  /* NULL: ts_check_main's own case */
} ts_check_entry;

static ts_check_entry ts_check_registered[TS_CHECK_MAX_TESTS];
static size_t ts_check_n_registered;
static int ts_check_overflow;

static inline void ts_check_register(const TTest *test,
                                     const ts_check_case *tcase)
{
    if (ts_check_n_registered == TS_CHECK_MAX_TESTS) {
        ts_check_overflow = 1;
        return;
    }
    ts_check_registered[ts_check_n_registered++] =
        (ts_check_entry){ test, tcase };
}

#define TS_CASE(var, timeout_s, setup, teardown)                             \
    static const ts_check_case var = { #var, (timeout_s), (setup),           \
                                       (teardown), __LINE__ }

#define TS_TEST_IN_(tcase, name)                                             \
    static void name##_fn(int _i CK_ATTRIBUTE_UNUSED);                       \
    static const TTest name##_ttest = { "" #name, name##_fn, __FILE__,       \
                                        __LINE__ };                          \
    __attribute__((constructor)) static void name##_register(void)           \
    {                                                                        \
        ts_check_register(&name##_ttest, (tcase));                           \
    }                                                                        \
    static void name##_fn(int _i CK_ATTRIBUTE_UNUSED)

#define TS_TEST(name) TS_TEST_IN_(NULL, name)
#define TS_TEST_IN(case_var, name) TS_TEST_IN_(&(case_var), name)

/* Entries of ts_check_main's case first, then each TS_CASE in the order
 * declared; within a case, the tests in the order they are written. */
static inline int ts_check_compare_entries(const void *a, const void *b)
{
    const ts_check_entry *x = a, *y = b;
    int case_x = x->tcase != NULL ? x->tcase->line : 0;
    int case_y = y->tcase != NULL ? y->tcase->line : 0;
    if (case_x != case_y)
        return (case_x > case_y) - (case_x < case_y);
    return (x->test->line > y->test->line) - (x->test->line < y->test->line);
}

/* Runs every test of the file as suite `name`: the TS_TESTs as one case
 * of that name with timeout_s, setup and teardown, the TS_TEST_INs in
 * their own cases. */
static inline int ts_check_main(const char *name, double timeout_s,
                                SFun setup, SFun teardown)
{
    if (ts_check_overflow || ts_check_n_registered == 0)
        return EXIT_FAILURE;
    qsort(ts_check_registered, ts_check_n_registered,
          sizeof ts_check_registered[0], ts_check_compare_entries);
    Suite *suite = suite_create(name);
    const TTest *tests[TS_CHECK_MAX_TESTS];
    for (size_t first = 0; first < ts_check_n_registered;) {
        const ts_check_case *tcase = ts_check_registered[first].tcase;
        size_t n = 0;
        while (first + n < ts_check_n_registered &&
               ts_check_registered[first + n].tcase == tcase) {
            tests[n] = ts_check_registered[first + n].test;
            n++;
        }
        if (tcase == NULL)
            ts_check_add_case(suite, name, timeout_s, setup, teardown, tests,
                              n);
        else
            ts_check_add_case(suite, tcase->name, tcase->timeout_s,
                              tcase->setup, tcase->teardown, tests, n);
        first += n;
    }
    return ts_check_run(suite);
}

#endif

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

#define TS_CHECK_CASE(suite, name, timeout_s, setup, teardown, ...)          \
    ts_check_add_case((suite), (name), (timeout_s), (setup), (teardown),     \
                      (const TTest *const[]){ __VA_ARGS__ },                 \
                      sizeof((const TTest *const[]){ __VA_ARGS__ }) /        \
                          sizeof(const TTest *))

#endif

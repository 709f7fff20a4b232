/* The end of every Check unit test's main(): run the suite, report, and
 * turn the failure count into the exit status automake's harness reads. */
#ifndef TRACESAN_TESTS_SUPPORT_CHECK_RUN_H
#define TRACESAN_TESTS_SUPPORT_CHECK_RUN_H

#include <check.h>
#include <stdlib.h>

static inline int ts_check_run(Suite *suite)
{
    SRunner *runner = srunner_create(suite);
    srunner_run_all(runner, CK_NORMAL);
    int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

#endif

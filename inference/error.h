/* How the pure libraries report a failure: the message goes into the
 * caller's buffer (which may be NULL), the function returns -1, so that a
 * failing path reads `return ts_fail(err, errlen, "...", ...);`. */
#ifndef TRACESAN_INFERENCE_ERROR_H
#define TRACESAN_INFERENCE_ERROR_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

__attribute__((format(printf, 3, 4))) static inline int
ts_fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err != NULL && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

#endif

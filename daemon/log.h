/* Leveled logging to stderr or syslog. Callers never pass coordinates:
 * messages name users, reasons and counts only. */
#ifndef TRACESAN_DAEMON_LOG_H
#define TRACESAN_DAEMON_LOG_H

typedef enum ts_log_level {
    TS_LOG_ERROR = 0,
    TS_LOG_WARN = 1,
    TS_LOG_INFO = 2,
    TS_LOG_DEBUG = 3
} ts_log_level;

/* Process-wide sink: a daemon has exactly one. */
void ts_log_init(const char *ident, ts_log_level level, int use_syslog);
void ts_log_close(void);
ts_log_level ts_log_get_level(void);
/* -1 when the name is not error|warn|info|debug. */
int ts_log_level_parse(const char *name);
void ts_log(ts_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* At most `per_second` lines a second from one source; the rest are
 * counted. ts_log_limit returns 1 when a line may be logged, and sets
 * *suppressed to the lines dropped since the last one that passed (for
 * the caller to report), or 0. */
typedef struct ts_log_limiter {
    unsigned per_second;
    long second;
    unsigned lines;
    unsigned long long suppressed;
} ts_log_limiter;
int ts_log_limit(ts_log_limiter *limiter, unsigned long long *suppressed);
/* Routes libevent's own messages here, rate limited. */
void ts_log_capture_libevent(void);

#endif

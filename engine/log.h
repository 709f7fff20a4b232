/* Leveled logging to stderr or syslog. Callers never pass coordinates:
 * messages name users, reasons and counts only. */
#ifndef TRACESAN_ENGINE_LOG_H
#define TRACESAN_ENGINE_LOG_H

#include <stddef.h>

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
/* An info line written whatever log.level says (ready, reload complete,
 * the exit summary): at syslog's notice when the level hides info. */
void ts_log_always(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
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
/* A user id as it may appear in a log line: printable ASCII, at most
 * TS_LOG_USER_MAX bytes ("..." marks a cut), "-" for none. User ids come
 * from the network. Returns out. */
#define TS_LOG_USER_MAX 64
const char *ts_log_loggable_user(const char *user_id, char *out,
                                 size_t size);
/* One rejection line at warn, through the limiter: "rejected user=U
 * reason=R: detail", preceded by "N more rejections not logged" when the
 * limiter dropped some. Never carries coordinates: detail is the
 * pipeline's, which names fields, not values. */
void ts_log_rejection(ts_log_limiter *limiter, const char *user_id,
                      const char *reason, const char *detail);
/* The count a limiter dropped and never reported, for the exit summary. */
void ts_log_rejections_summary(const ts_log_limiter *limiter);
/* Routes libevent's own messages here, rate limited. */
void ts_log_capture_libevent(void);

#endif

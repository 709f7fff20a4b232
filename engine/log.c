#include "engine/log.h"

#include <errno.h>
#include <event2/event.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

/* One line is formatted into this buffer and written with one write(2), so
 * lines from the daemon and from other processes sharing stderr never
 * interleave mid-line. Longer messages are truncated. */
#define LOG_LINE_MAX 2048

static struct {
    char ident[64];
    ts_log_level level;
    int use_syslog;
} sink = { "tracesand", TS_LOG_INFO, 0 };

static const char *const level_names[] = { "error", "warn", "info", "debug" };

void ts_log_init(const char *ident, ts_log_level level, int use_syslog)
{
    if (sink.use_syslog)
        closelog();
    snprintf(sink.ident, sizeof sink.ident, "%s",
             ident != NULL && ident[0] != '\0' ? ident : "tracesand");
    sink.level = level;
    sink.use_syslog = use_syslog;
    if (use_syslog)
        openlog(sink.ident, LOG_PID, LOG_DAEMON);
}

void ts_log_close(void)
{
    if (sink.use_syslog)
        closelog();
    sink.use_syslog = 0;
}

ts_log_level ts_log_get_level(void)
{
    return sink.level;
}

int ts_log_level_parse(const char *name)
{
    if (name == NULL)
        return -1;
    for (int i = 0; i < (int)(sizeof level_names / sizeof level_names[0]); i++)
        if (strcmp(name, level_names[i]) == 0)
            return i;
    return -1;
}

static int syslog_priority(ts_log_level level)
{
    switch (level) {
    case TS_LOG_ERROR: return LOG_ERR;
    case TS_LOG_WARN: return LOG_WARNING;
    case TS_LOG_INFO: return LOG_INFO;
    default: return LOG_DEBUG;
    }
}

/* A message must stay one line: control characters (from a user id or a
 * profile name that slipped through) would forge or split log lines. */
static void neutralise_controls(char *text)
{
    for (unsigned char *p = (unsigned char *)text; *p != '\0'; p++)
        if (*p < 0x20 || *p == 0x7f)
            *p = '?';
}

static void write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return;  /* nowhere left to report a logging failure */
        }
        buf += n;
        len -= (size_t)n;
    }
}

/* `level` names the line on stderr; `priority` is syslog's. */
static void emit(ts_log_level level, int priority, const char *fmt,
                 va_list ap)
{
    int saved_errno = errno;
    char message[LOG_LINE_MAX];
    int n = vsnprintf(message, sizeof message, fmt, ap);
    if (n < 0)
        snprintf(message, sizeof message, "(unformattable log message)");
    neutralise_controls(message);

    if (sink.use_syslog) {
        syslog(priority, "%s", message);
    } else {
        char line[LOG_LINE_MAX + 96];
        int len = snprintf(line, sizeof line, "%s: %s: %s\n", sink.ident,
                           level_names[level], message);
        if (len < 0)
            len = 0;
        if ((size_t)len >= sizeof line) {  /* truncated: keep the newline */
            len = (int)sizeof line - 1;
            line[len - 1] = '\n';
        }
        write_all(STDERR_FILENO, line, (size_t)len);
    }
    errno = saved_errno;
}

void ts_log(ts_log_level level, const char *fmt, ...)
{
    if ((int)level < 0 || level > sink.level)
        return;
    if (level > TS_LOG_DEBUG)
        level = TS_LOG_DEBUG;
    va_list ap;
    va_start(ap, fmt);
    emit(level, syslog_priority(level), fmt, ap);
    va_end(ap);
}

void ts_log_always(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emit(TS_LOG_INFO, sink.level >= TS_LOG_INFO ? LOG_INFO : LOG_NOTICE, fmt,
         ap);
    va_end(ap);
}

/* libevent logs through a process-wide callback too. Its warnings can
 * repeat thousands of times a second (a failing accept() once produced
 * 1.8 million lines in 5 s), so they share one limit: at most
 * LIBEVENT_LINES_PER_SECOND lines a second, the rest counted and reported
 * with the next line that passes. */
#define LIBEVENT_LINES_PER_SECOND 10

static ts_log_limiter libevent_limiter = { .per_second =
                                               LIBEVENT_LINES_PER_SECOND };

int ts_log_limit(ts_log_limiter *limiter, unsigned long long *suppressed)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
    *suppressed = 0;
    if (now.tv_sec != limiter->second) {
        limiter->second = now.tv_sec;
        limiter->lines = 0;
    }
    if (limiter->lines >= limiter->per_second) {
        limiter->suppressed++;
        return 0;
    }
    limiter->lines++;
    *suppressed = limiter->suppressed;
    limiter->suppressed = 0;
    return 1;
}

static void libevent_log(int severity, const char *message)
{
    ts_log_level level = severity >= EVENT_LOG_ERR    ? TS_LOG_ERROR
                         : severity >= EVENT_LOG_WARN ? TS_LOG_WARN
                         : severity >= EVENT_LOG_MSG  ? TS_LOG_INFO
                                                      : TS_LOG_DEBUG;
    unsigned long long suppressed;
    if (level > sink.level || !ts_log_limit(&libevent_limiter, &suppressed))
        return;
    if (suppressed > 0)
        ts_log(level, "libevent: %s (%llu lines suppressed before it)",
               message, suppressed);
    else
        ts_log(level, "libevent: %s", message);
}

void ts_log_capture_libevent(void)
{
    event_set_log_callback(libevent_log);
}

const char *ts_log_loggable_user(const char *user_id, char *out, size_t size)
{
    if (user_id == NULL || user_id[0] == '\0' || size < 4)
        return "-";
    size_t n = 0;
    for (; user_id[n] != '\0' && n + 1 < size && n < TS_LOG_USER_MAX; n++) {
        unsigned char c = (unsigned char)user_id[n];
        out[n] = (c >= 0x21 && c < 0x7f) ? (char)c : '?';
    }
    out[n] = '\0';
    if (user_id[n] != '\0' && n >= 3) {
        out[n - 3] = '.';
        out[n - 2] = '.';
        out[n - 1] = '.';
    }
    return out;
}

void ts_log_rejection(ts_log_limiter *limiter, const char *user_id,
                      const char *reason, const char *detail)
{
    if (ts_log_get_level() < TS_LOG_WARN)
        return;
    unsigned long long suppressed;
    if (!ts_log_limit(limiter, &suppressed))
        return;
    if (suppressed > 0)
        ts_log(TS_LOG_WARN, "%llu more rejections not logged (limit %u/s)",
               suppressed, limiter->per_second);
    char user[TS_LOG_USER_MAX + 1];
    ts_log(TS_LOG_WARN, "rejected user=%s reason=%s: %s",
           ts_log_loggable_user(user_id, user, sizeof user), reason,
           detail != NULL && detail[0] != '\0' ? detail : "-");
}

void ts_log_rejections_summary(const ts_log_limiter *limiter)
{
    if (limiter->suppressed > 0)
        ts_log(TS_LOG_WARN, "%llu more rejections not logged (limit %u/s)",
               limiter->suppressed, limiter->per_second);
}

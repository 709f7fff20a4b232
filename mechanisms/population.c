#include "mechanisms/population.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double elapsed_ms(const struct timespec *from)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - from->tv_sec) * 1e3 +
           (double)(now.tv_nsec - from->tv_nsec) / 1e6;
}

static void source_drop(ts_population_loop *loop, ts_population_source *s)
{
    if (s->owned && s->channel != NULL)
        loop->ops->channel_free((void *)s->channel);
    free(s->counts);
    memset(s, 0, sizeof *s);
}

/* Share of the mass spread evenly over all cells of an estimate. EM's
 * multiplicative steps drive a cell no report supports towards 0 and,
 * run long enough, to exactly 0 (underflow); but IBU's next start and BA's
 * prior must have full support, so one such cell would fail every later
 * cycle and leave the loop stuck on its old channel. A 1e-9 mix moves the
 * estimate by at most 1e-9 in total variation. */
#define FULL_SUPPORT_MIX 1e-9

static void full_support(double *theta, size_t n)
{
    for (size_t x = 0; x < n; x++)
        theta[x] = (1.0 - FULL_SUPPORT_MIX) * theta[x] +
                   FULL_SUPPORT_MIX / (double)n;
}

/* The current source becomes the previous one (its counts still go into
 * the next job) and `channel` the current one, counted in `counts` (n
 * zeros, allocated by the caller so that this step cannot fail). */
static void source_shift(ts_population_loop *loop, const void *channel,
                         int owned, uint32_t version, double *counts)
{
    /* Reports still waiting under the dropped channel never reach a job:
     * they move from the cycle and the total to `stale`, so that neither a
     * cycle's end nor reports_total counts reports no estimate used. They
     * were all observed since the last close, so they are part of
     * cycle_reports. */
    uint64_t dropped = loop->source[0].reports;
    loop->stale += dropped;
    loop->cycle_reports -= dropped < loop->cycle_reports ? dropped
                                                         : loop->cycle_reports;
    loop->reports_total -= dropped < loop->reports_total
                               ? dropped : loop->reports_total;
    source_drop(loop, &loop->source[0]);
    loop->source[0] = loop->source[1];
    loop->source[1] = (ts_population_source){
        .channel = channel, .owned = owned, .version = version,
        .counts = counts,
    };
}

int ts_population_loop_init_detached(ts_population_loop *loop,
                                     const ts_population_ops *ops,
                                     void *profile, const void *channel,
                                     uint32_t version)
{
    memset(loop, 0, sizeof *loop);
    loop->ops = ops;
    loop->profile = profile;
    loop->n = ops->cells(profile);
    ops->cycle(profile, &loop->cycle);
    double *counts = calloc(loop->n, sizeof *counts);
    if (counts == NULL)
        return -1;
    source_shift(loop, channel, 0, version, counts);
    return 0;
}

int ts_population_loop_init(ts_population_loop *loop,
                            const ts_population_ops *ops, void *profile)
{
    uint32_t version;
    const void *channel = ops->channel_current(profile, &version);
    return ts_population_loop_init_detached(loop, ops, profile, channel,
                                            version);
}

int ts_population_shift(ts_population_loop *loop, const void *channel,
                        uint32_t version)
{
    double *counts = calloc(loop->n, sizeof *counts);
    if (counts == NULL)
        return -1;
    source_shift(loop, channel, 0, version, counts);
    return 0;
}

void ts_population_loop_free(ts_population_loop *loop)
{
    if (loop->ops == NULL)
        return;
    int installed_owned = loop->source[1].owned;
    uint32_t version = loop->source[1].version;
    if (installed_owned)
        loop->ops->channel_install(loop->profile, NULL, version);
    source_drop(loop, &loop->source[0]);
    source_drop(loop, &loop->source[1]);
    free(loop->theta);
    memset(loop, 0, sizeof *loop);
}

/* Installs `channel` (NULL: the profile's own first or fixed channel) and
 * counts what follows under it. Either all of it happens or, when memory
 * runs out, none of it: a channel the profile releases through is always
 * one a source of the loop holds. */
static int install(ts_population_loop *loop, void *channel, uint32_t version)
{
    double *counts = calloc(loop->n, sizeof *counts);
    if (counts == NULL)
        return -1;
    loop->ops->channel_install(loop->profile, channel, version);
    const void *current =
        channel != NULL ? channel
                        : loop->ops->channel_current(loop->profile, NULL);
    source_shift(loop, current, channel != NULL, version, counts);
    return 0;
}

int ts_population_restore(ts_population_loop *loop, uint32_t version,
                          uint32_t cycles, uint64_t reports_total,
                          const double *theta, size_t n_theta, char *err,
                          size_t errlen)
{
    loop->cycles = cycles;
    loop->reports_total = reports_total;
    void *channel = NULL;
    if (theta != NULL && n_theta == loop->n) {
        double *copy = malloc(n_theta * sizeof *copy);
        if (copy == NULL) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        memcpy(copy, theta, n_theta * sizeof *copy);
        full_support(copy, n_theta);
        if (loop->ops->adaptive) {
            channel = loop->ops->channel_build(loop->profile, copy, NULL, err,
                                               errlen);
            if (channel == NULL) {
                free(copy);
                return -1;
            }
        }
        free(loop->theta);
        loop->theta = copy;
        /* The record keeps the reports counted when the estimate was
         * made: the weight of the estimate against new cycles. */
        loop->estimated_reports = reports_total;
    }
    if (install(loop, channel, version) != 0) {
        if (channel != NULL)
            loop->ops->channel_free(channel);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    /* Nothing of the previous channel is counted any more. */
    source_drop(loop, &loop->source[0]);
    return 0;
}

int ts_population_observe(ts_population_loop *loop, double lat, double lon,
                          uint32_t version, int64_t ts_ms)
{
    uint32_t cell;
    if (loop->ops->cells == NULL ||
        loop->ops->cell_of(loop->profile, lat, lon, &cell) != 0 ||
        cell >= loop->n) {
        loop->outside++;
        return 0;
    }
    /* A fixed channel is the same whatever version a report names. */
    ts_population_source *s =
        loop->ops->adaptive ? NULL : &loop->source[1];
    for (int i = 1; i >= 0 && s == NULL; i--)
        if (loop->source[i].counts != NULL &&
            loop->source[i].version == version) {
            s = &loop->source[i];
            break;
        }
    if (s == NULL) {
        loop->stale++;
        return 0;
    }
    if (loop->cycle_reports == 0)
        loop->cycle_start_ms = ts_ms;
    loop->last_ts_ms = ts_ms;
    s->counts[cell] += 1.0;
    s->reports++;
    loop->cycle_reports++;
    loop->reports_total++;
    return ts_population_due(loop);
}

int ts_population_due(const ts_population_loop *loop)
{
    if (loop->job_running || loop->cycle_reports == 0)
        return 0;
    return (loop->cycle.reports > 0 &&
            loop->cycle_reports >= loop->cycle.reports) ||
           (loop->cycle.seconds > 0 &&
            (double)(loop->last_ts_ms - loop->cycle_start_ms) >=
                loop->cycle.seconds * 1000.0);
}

void ts_population_job_free(ts_population_job *job)
{
    for (int i = 0; i < 2; i++)
        free(job->counts[i]);
    free(job->theta);
    free(job->previous);
    if (job->channel != NULL)
        job->ops->channel_free(job->channel);
    memset(job, 0, sizeof *job);
}

int ts_population_close(ts_population_loop *loop, ts_population_job *job)
{
    /* `job` may be the running job itself (the daemon keeps one per
     * loop): refuse before touching it. */
    if (loop->job_running)
        return -1;
    memset(job, 0, sizeof *job);
    if (loop->cycle_reports == 0 ||
        loop->source[0].reports + loop->source[1].reports == 0)
        return -1;
    job->ops = loop->ops;
    job->profile = loop->profile;
    job->n = loop->n;
    job->ibu_params = loop->cycle.ibu;
    job->adaptive = loop->ops->adaptive;
    job->theta = malloc(loop->n * sizeof *job->theta);
    if (job->theta == NULL)
        goto oom;
    for (size_t x = 0; x < loop->n; x++)
        job->theta[x] = loop->theta != NULL ? loop->theta[x]
                                            : 1.0 / (double)loop->n;
    if (loop->theta != NULL && loop->estimated_reports > 0) {
        job->previous = malloc(loop->n * sizeof *job->previous);
        if (job->previous == NULL)
            goto oom;
        memcpy(job->previous, loop->theta, loop->n * sizeof *job->previous);
        job->previous_reports = loop->estimated_reports;
    }
    for (int i = 0; i < 2; i++) {
        ts_population_source *s = &loop->source[i];
        if (s->counts == NULL || s->reports == 0)
            continue;
        double *fresh = calloc(loop->n, sizeof *fresh);
        if (fresh == NULL)
            goto oom;
        job->counts[job->n_sources] = s->counts;
        job->sources[job->n_sources] = (ts_ibu_source){
            loop->ops->channel_matrix(s->channel), s->counts };
        job->n_sources++;
        job->reports += s->reports;
        s->counts = fresh;
        s->reports = 0;
    }
    loop->cycle_reports = 0;
    loop->job_running = 1;
    return 0;
oom:
    ts_population_job_free(job);
    return -1;
}

void ts_population_run(ts_population_job *job)
{
    struct timespec started;
    clock_gettime(CLOCK_MONOTONIC, &started);
    job->ok = ts_gibu(job->sources, job->n_sources, job->n, job->theta,
                      &job->ibu_params, &job->ibu, job->err,
                      sizeof job->err) == 0;
    job->ibu_ms = elapsed_ms(&started);
    if (!job->ok)
        return;
    /* Step iv: one cycle's reports are a small sample; the estimate
     * rests on all of them. Without it the loop forgets every earlier
     * cycle, and a channel fitted to one noisy estimate makes the next
     * estimate noisier (measured: the EMD grew cycle after cycle). */
    if (job->previous != NULL) {
        double w = (double)job->reports /
                   ((double)job->reports + (double)job->previous_reports);
        for (size_t x = 0; x < job->n; x++)
            job->theta[x] = w * job->theta[x] + (1.0 - w) * job->previous[x];
    }
    full_support(job->theta, job->n);
    if (!job->adaptive)
        return;
    clock_gettime(CLOCK_MONOTONIC, &started);
    job->channel = job->ops->channel_build(job->profile, job->theta,
                                           &job->build, job->err,
                                           sizeof job->err);
    job->build_ms = elapsed_ms(&started);
    job->ok = job->channel != NULL;
}

int ts_population_finish(ts_population_loop *loop, ts_population_job *job)
{
    loop->job_running = 0;
    if (!job->ok) {
        ts_population_job_free(job);
        return -1;
    }
    free(loop->theta);
    loop->theta = job->theta;
    job->theta = NULL;
    loop->estimated_reports += job->reports;
    loop->cycles++;
    int installed = 0;
    if (job->channel != NULL) {
        uint32_t version = loop->source[1].version + 1;
        if (install(loop, job->channel, version) == 0) {
            job->channel = NULL;
            installed = 1;
        }
    }
    ts_population_job_free(job);
    return installed;
}

/* ------------------------------------------------------------ records */

#define RECORD_V1_FIXED (1 + 4 + 4 + 8 + 4)
#define RECORD_V2_TAIL (8 + 8 + 8 + 8 + 8 + 8)

static unsigned char *put_le(unsigned char *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (unsigned char)(v >> (8 * i));
    return p + bytes;
}

static uint64_t get_le(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static unsigned char *put_doubles(unsigned char *p, const double *v,
                                  size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t bits;
        memcpy(&bits, &v[i], sizeof bits);
        p = put_le(p, bits, 8);
    }
    return p;
}

size_t ts_population_record_size(const ts_population_record *r)
{
    size_t cells = 8 * r->n;
    if (r->format == 1)
        return RECORD_V1_FIXED + (r->theta != NULL ? cells : 0);
    return RECORD_V1_FIXED + 1 + (r->theta != NULL ? cells : 0) + 1 +
           (r->previous_kind == TS_PRIOR_ESTIMATE ? cells : 0) +
           RECORD_V2_TAIL;
}

void ts_population_record_encode(const ts_population_record *r,
                                 unsigned char *out)
{
    unsigned char *p = out;
    *p++ = (unsigned char)r->format;
    p = put_le(p, r->version, 4);
    p = put_le(p, r->cycles, 4);
    p = put_le(p, r->reports_total, 8);
    /* Format 1 says "no estimate" with no cells. */
    p = put_le(p, r->format == 1 && r->theta == NULL ? 0 : r->n, 4);
    if (r->format == 1) {
        if (r->theta != NULL)
            put_doubles(p, r->theta, r->n);
        return;
    }
    *p++ = r->theta != NULL ? TS_PRIOR_ESTIMATE : TS_PRIOR_UNIFORM;
    if (r->theta != NULL)
        p = put_doubles(p, r->theta, r->n);
    *p++ = (unsigned char)r->previous_kind;
    if (r->previous_kind == TS_PRIOR_ESTIMATE)
        p = put_doubles(p, r->previous, r->n);
    p = put_le(p, r->stale, 8);
    p = put_le(p, r->outside, 8);
    p = put_le(p, r->estimated_reports, 8);
    p = put_le(p, r->last_reports, 8);
    p = put_le(p, (uint64_t)r->estimated_at_ms, 8);
    put_le(p, r->out_seq, 8);
}

void ts_population_record_free(ts_population_record *r)
{
    free(r->theta);
    free(r->previous);
    r->theta = r->previous = NULL;
}

/* n doubles at *p (len bytes left) into a new array; NULL with *oom or
 * *short_ set. */
static double *take_doubles(const unsigned char **p, size_t *left, size_t n,
                            int *oom, int *truncated)
{
    if (*left / 8 < n) {
        *truncated = 1;
        return NULL;
    }
    double *v = malloc((n > 0 ? n : 1) * sizeof *v);
    if (v == NULL) {
        *oom = 1;
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t bits = get_le(*p + 8 * i, 8);
        memcpy(&v[i], &bits, sizeof bits);
    }
    *p += 8 * n;
    *left -= 8 * n;
    return v;
}

int ts_population_record_decode(const void *bytes, size_t len,
                                ts_population_record *r, int *oom)
{
    memset(r, 0, sizeof *r);
    *oom = 0;
    const unsigned char *p = bytes;
    if (len < RECORD_V1_FIXED || (p[0] != 1 && p[0] != 2))
        return -1;
    r->format = p[0];
    r->version = (uint32_t)get_le(p + 1, 4);
    r->cycles = (uint32_t)get_le(p + 5, 4);
    r->reports_total = get_le(p + 9, 8);
    r->n = (size_t)get_le(p + 17, 4);
    p += RECORD_V1_FIXED;
    size_t left = len - RECORD_V1_FIXED;
    int truncated = 0;
    if (r->format == 1) {
        if (left != 8 * r->n)
            return -1;
        if (r->n > 0 &&
            (r->theta = take_doubles(&p, &left, r->n, oom, &truncated)) ==
                NULL)
            return -1;
        return 0;
    }
    if (left < 1 || (p[0] != TS_PRIOR_UNIFORM && p[0] != TS_PRIOR_ESTIMATE))
        return -1;
    int has_theta = *p++ == TS_PRIOR_ESTIMATE;
    left--;
    if (has_theta &&
        (r->theta = take_doubles(&p, &left, r->n, oom, &truncated)) == NULL)
        return -1;
    if (left < 1 || p[0] > TS_PRIOR_ESTIMATE)
        goto corrupt;
    r->previous_kind = (ts_population_prior)*p++;
    left--;
    if (r->previous_kind == TS_PRIOR_ESTIMATE &&
        (r->previous = take_doubles(&p, &left, r->n, oom, &truncated)) ==
            NULL)
        goto corrupt;
    if (left != RECORD_V2_TAIL)
        goto corrupt;
    r->stale = get_le(p, 8);
    r->outside = get_le(p + 8, 8);
    r->estimated_reports = get_le(p + 16, 8);
    r->last_reports = get_le(p + 24, 8);
    r->estimated_at_ms = (int64_t)get_le(p + 32, 8);
    r->out_seq = get_le(p + 40, 8);
    return 0;
corrupt:
    ts_population_record_free(r);
    return -1;
}

int ts_population_resume(ts_population_loop *loop,
                         const ts_population_ops *ops, void *profile,
                         const ts_population_record *record,
                         const void *channel, const void *previous)
{
    size_t n = ops->cells(profile);
    double *theta = NULL, *counts = NULL;
    if (record->theta != NULL && (theta = malloc(n * sizeof *theta)) == NULL)
        return -1;
    if (previous != NULL && (counts = calloc(n, sizeof *counts)) == NULL) {
        free(theta);
        return -1;
    }
    ts_population_loop fresh;
    if (ts_population_loop_init_detached(&fresh, ops, profile, channel,
                                         record->version) != 0) {
        free(theta);
        free(counts);
        return -1;
    }
    ts_population_loop_free(loop);
    *loop = fresh;
    if (previous != NULL)
        loop->source[0] = (ts_population_source){
            .channel = previous, .version = record->version - 1,
            .counts = counts,
        };
    if (theta != NULL)
        memcpy(theta, record->theta, loop->n * sizeof *theta);
    loop->theta = theta;
    loop->cycles = record->cycles;
    loop->reports_total = record->reports_total;
    loop->stale = record->stale;
    loop->outside = record->outside;
    loop->estimated_reports = record->estimated_reports;
    return 0;
}

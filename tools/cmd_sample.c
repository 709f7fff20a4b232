/* tracesan sample: the query sampling of the predictive-mechanism paper
 * (Chatzikokolakis, Palamidessi, Stronati, PETS 2014, Section 5), so that
 * anyone can rerun its setting on a dense GPS trace.
 *
 * A GPS trace records every movement; a user queries a location-based
 * service only now and then, and (in the paper's use case) only while
 * still or slow. So, per user in time order:
 *   1. a point is "slow" when the speed from the previous fix (within
 *      SPEED_HORIZON_S) is below --max-speed-kmh; a point without a usable
 *      previous fix uses the next one; an isolated point counts as slow;
 *   2. the first slow point is a query; after each query the next one is
 *      the first slow point at least `gap` later, where gap is the long
 *      interval (60 min) with probability p and the short one (1 min)
 *      otherwise, plus Gaussian noise of GAP_NOISE_FRACTION of the gap.
 * The randomness is a seeded ts_rng stream, consumed user by user in
 * order of first appearance, so one seed and one file give one sample.
 *
 * The output holds true coordinates (it is a query trace to be sanitized,
 * not a published one) in the sanitize input format: user,ts,lat,lon.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "geometry/geo.h"
#include "mechanisms/rng.h"
#include "tools/commands.h"
#include "tools/csv.h"
#include "tools/name_index.h"
#include "tools/trace.h"

#define DEFAULT_MAX_SPEED_KMH 15.0
#define DEFAULT_SHORT_GAP_S 60.0
#define DEFAULT_LONG_GAP_S 3600.0
/* "both with addition of a small Gaussian noise": σ = 10 % of the gap. */
#define GAP_NOISE_FRACTION 0.1
/* A fix further apart than this says nothing about the current speed
 * (the receiver was off, or the user was indoors). */
#define SPEED_HORIZON_S 600.0

static void usage(FILE *out)
{
    fputs(
        "usage: " TS_TOOL_NAME " sample --seed N --p P [--max-speed-kmh S]\n"
        "                       [--short-gap-s S] [--long-gap-s S] "
        "IN.csv > OUT.csv\n"
        "\n"
        "Samples query points from a dense GPS trace as in Section 5 of the\n"
        "predictive-mechanism paper: only where the user moves slower than\n"
        "--max-speed-kmh, one query after each gap, the gap being the long\n"
        "one with probability P and the short one otherwise (each with 10 %\n"
        "Gaussian noise). IN.csv: header with user,ts,lat,lon (gzip and '-'\n"
        "accepted). OUT.csv: user,ts,lat,lon, sorted by user then time.\n"
        "\n"
        "options:\n"
        "  -s, --seed N            seed of the sampling (required)\n"
        "  -p, --p P               probability of a long gap, 0..1 (required)\n"
        "      --max-speed-kmh S   speed limit of query stretches (default 15)\n"
        "      --short-gap-s S     short gap in seconds (default 60)\n"
        "      --long-gap-s S      long gap in seconds (default 3600)\n"
        "  -h, --help              show this help\n"
        "\n"
        "stderr: sample: rows=N users=N slow=N sampled=N [skipped=N]\n",
        out);
}

/* Speed in m/s between rows a and b (b later), or NaN when they are not
 * usable together (same time, or too far apart in time). */
static double speed_between(const ts_trace_point *a, const ts_trace_point *b)
{
    double dt = (double)(b->ts_ms - a->ts_ms) / 1000.0;
    if (!(dt > 0.0) || dt > SPEED_HORIZON_S)
        return NAN;
    return ts_geo_distance_m(a->lat, a->lon, b->lat, b->lon) / dt;
}

/* Slow flag of rows[i] inside the user's run rows[first .. end). */
static int is_slow(const ts_trace_point *rows, size_t first, size_t end, size_t i,
                   double max_speed_ms)
{
    double speed = NAN;
    for (size_t j = i; j > first && isnan(speed); j--) {
        if (rows[i].ts_ms - rows[j - 1].ts_ms > SPEED_HORIZON_S * 1000.0)
            break;
        speed = speed_between(&rows[j - 1], &rows[i]);
    }
    for (size_t j = i + 1; j < end && isnan(speed); j++) {
        if (rows[j].ts_ms - rows[i].ts_ms > SPEED_HORIZON_S * 1000.0)
            break;
        speed = speed_between(&rows[i], &rows[j]);
    }
    return isnan(speed) || speed < max_speed_ms;
}

/* Standard normal by Box-Muller from the open-interval uniform (never 0,
 * so the log is finite). */
static double gaussian(ts_rng *rng)
{
    double u = ts_rng_uniform_open(rng);
    double v = ts_rng_uniform_open(rng);
    return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

static double next_gap_s(ts_rng *rng, double p, double short_gap_s,
                         double long_gap_s)
{
    double gap = ts_rng_uniform_open(rng) < p ? long_gap_s : short_gap_s;
    gap += GAP_NOISE_FRACTION * gap * gaussian(rng);
    /* The noise is small; this only guards the 10-sigma tail. */
    return gap < 1.0 ? 1.0 : gap;
}

static int write_row(const ts_trace *trace, const ts_trace_point *row)
{
    char text[64];
    if (ts_csv_write_field(stdout, ts_name_index_name(trace->users,
                                                      row->user)) != 0)
        return -1;
    fputc(',', stdout);
    ts_csv_format_ts(row->ts_ms, text, sizeof text);
    fputs(text, stdout);
    fputc(',', stdout);
    ts_csv_format_fixed7(row->lat, text, sizeof text);
    fputs(text, stdout);
    fputc(',', stdout);
    ts_csv_format_fixed7(row->lon, text, sizeof text);
    fputs(text, stdout);
    return fputc('\n', stdout) == EOF ? -1 : 0;
}

int cmd_sample(int argc, char **argv)
{
    double p = NAN, max_speed_kmh = DEFAULT_MAX_SPEED_KMH;
    double short_gap_s = DEFAULT_SHORT_GAP_S, long_gap_s = DEFAULT_LONG_GAP_S;
    const ts_tool_option options[] = {
        { "p", 'p', TS_ARG_NUMBER, .dest = &p },
        { "max-speed-kmh", 0, TS_ARG_POSITIVE, .dest = &max_speed_kmh },
        { "short-gap-s", 0, TS_ARG_POSITIVE, .dest = &short_gap_s },
        { "long-gap-s", 0, TS_ARG_POSITIVE, .dest = &long_gap_s },
        { 0 },
    };
    const ts_tool_command command = {
        "sample", TS_OPT_SEED, options, 1, "one input file ('-' for stdin)",
        usage,
    };
    ts_tool_common common;
    int first = ts_tool_parse(&command, argc, argv, &common);
    if (first <= 0)
        return first == 0 ? 0 : 1;
    if (!common.seed_given || isnan(p)) {
        fprintf(stderr, TS_TOOL_NAME " sample: --seed and --p are required\n");
        usage(stderr);
        return 1;
    }
    if (!(p >= 0.0 && p <= 1.0)) {
        fprintf(stderr, TS_TOOL_NAME " sample: --p must be in [0, 1]\n");
        return 1;
    }
    const char *input_path = argv[first];

    int status = 1;
    ts_trace trace;
    ts_rng *rng = NULL;
    /* Unusable rows are counted, never echoed: fields may be coordinates.
     * A query needs a time: ts 0 and before are unusable. */
    if (ts_trace_load(&trace, input_path, 1) != 0)
        goto out;

    rng = ts_rng_new_seeded(common.seed);
    if (rng == NULL) {
        fprintf(stderr, TS_TOOL_NAME ": out of memory\n");
        goto out;
    }
    if (fputs("user,ts,lat,lon\n", stdout) == EOF)
        goto write_error;
    const double max_speed_ms = max_speed_kmh / 3.6;
    uint64_t slow = 0, sampled = 0;
    for (size_t first = 0; first < trace.n;) {
        size_t end = first;
        while (end < trace.n &&
               trace.points[end].user == trace.points[first].user)
            end++;
        int64_t next_ms = INT64_MIN;
        for (size_t i = first; i < end; i++) {
            if (!is_slow(trace.points, first, end, i, max_speed_ms))
                continue;
            slow++;
            if (trace.points[i].ts_ms < next_ms)
                continue;
            if (write_row(&trace, &trace.points[i]) != 0)
                goto write_error;
            sampled++;
            double gap_s = next_gap_s(rng, p, short_gap_s, long_gap_s);
            next_ms =
                trace.points[i].ts_ms + (int64_t)llround(gap_s * 1000.0);
        }
        first = end;
    }
    if (fflush(stdout) != 0 || ferror(stdout))
        goto write_error;
    fprintf(stderr,
            "sample: rows=%" PRIu64 " users=%zu slow=%" PRIu64
            " sampled=%" PRIu64,
            trace.rows_read, ts_name_index_count(trace.users), slow,
            sampled);
    if (trace.skipped != 0)
        fprintf(stderr, " skipped=%" PRIu64, trace.skipped);
    fputc('\n', stderr);
    status = 0;
    goto out;

write_error:
    fprintf(stderr, TS_TOOL_NAME ": cannot write the output\n");
out:
    ts_rng_free(rng);
    ts_trace_free(&trace);
    return status;
}

/* The PRIVIC loop's records (mechanisms/population.c): the round trip of
 * a record, and a loop resumed from the records a job closed going on
 * exactly as the one that never stopped. */
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <gsl/gsl_cdf.h>
#include <gsl/gsl_errno.h>
#include <gsl/gsl_integration.h>
#include <gsl/gsl_linalg.h>
#include <gsl/gsl_sf_bessel.h>
#include "geometry/geo.h"
#include "inference/emd.h"
#include "inference/grid.h"
#include "inference/ibu.h"
#include "mechanisms/ba_channel.h"
#include "mechanisms/laplace_channel.h"
#include "mechanisms/mechanism.h"
#include "mechanisms/planar_laplace.h"
#include "mechanisms/population.h"
#include "mechanisms/privic.h"
#include "mechanisms/rng.h"
#include "tests/support/check_run.h"
#include "tests/support/fake_params.h"
#include "tests/support/privic_fixture.h"
#include "tests/support/fake_population.h"

/* ------------------------------------------- records and resuming */

static int records_equal(const ts_population_record *a,
                         const ts_population_record *b)
{
    if (a->format != b->format || a->version != b->version ||
        a->cycles != b->cycles || a->reports_total != b->reports_total ||
        a->n != b->n || (a->theta == NULL) != (b->theta == NULL))
        return 0;
    if (a->theta != NULL &&
        memcmp(a->theta, b->theta, a->n * sizeof *a->theta) != 0)
        return 0;
    if (a->format == 1)
        return 1;
    return a->previous_kind == b->previous_kind &&
           (a->previous_kind != TS_PRIOR_ESTIMATE ||
            memcmp(a->previous, b->previous, a->n * sizeof *a->previous) ==
                0) &&
           a->stale == b->stale && a->outside == b->outside &&
           a->estimated_reports == b->estimated_reports &&
           a->last_reports == b->last_reports &&
           a->estimated_at_ms == b->estimated_at_ms &&
           a->out_seq == b->out_seq;
}

/* Encodes, decodes and compares; every shorter prefix and one longer
 * buffer must be refused (a record cut short by a lost byte is never
 * taken for another one). */
static void check_round_trip(const ts_population_record *r)
{
    size_t len = ts_population_record_size(r);
    unsigned char *bytes = malloc(len + 1);
    ck_assert_ptr_nonnull(bytes);
    ts_population_record_encode(r, bytes);
    ts_population_record back;
    int oom;
    ck_assert_int_eq(ts_population_record_decode(bytes, len, &back, &oom), 0);
    ck_assert_msg(records_equal(r, &back), "format %d: not the same record",
                  r->format);
    ts_population_record_free(&back);
    for (size_t cut = 0; cut < len; cut++)
        ck_assert_msg(ts_population_record_decode(bytes, cut, &back, &oom) !=
                          0, "format %d: a %zu-byte prefix of %zu decoded",
                      r->format, cut, len);
    bytes[len] = 0;
    ck_assert_int_ne(ts_population_record_decode(bytes, len + 1, &back, &oom),
                     0);
    free(bytes);
}

TS_TEST(test_population_records_round_trip)
{
    double theta[FP_N], previous[FP_N];
    for (size_t x = 0; x < FP_N; x++) {
        theta[x] = (x + 1.0) / (FP_N * (FP_N + 1) / 2.0);
        previous[x] = 1.0 / FP_N + (x % 2 ? 1e-3 : -1e-3);
    }
    /* Format 1, the single-node store's record, byte for byte as before
     * (version 1 byte, u32 version, u32 cycles, u64 reports, u32 cells,
     * f64 estimate: the records of stores written by older versions). */
    ts_population_record one = {
        .format = 1, .version = 7, .cycles = 3, .reports_total = 1234,
        .n = FP_N, .theta = theta,
    };
    ck_assert_uint_eq(ts_population_record_size(&one), 21 + 8 * FP_N);
    unsigned char bytes[21 + 8 * FP_N];
    ts_population_record_encode(&one, bytes);
    ck_assert_uint_eq(bytes[0], 1);
    ck_assert_uint_eq(bytes[1], 7);
    ck_assert_uint_eq(bytes[5], 3);
    ck_assert_uint_eq(bytes[9] | bytes[10] << 8, 1234);
    ck_assert_uint_eq(bytes[17], FP_N);
    double first;
    memcpy(&first, bytes + 21, sizeof first);  /* little-endian host */
    ck_assert_double_eq(first, theta[0]);
    check_round_trip(&one);
    one.theta = NULL;  /* no estimate: no cells */
    one.n = 0;
    ck_assert_uint_eq(ts_population_record_size(&one), 21);
    check_round_trip(&one);

    ts_population_record two = {
        .format = 2, .version = 12, .cycles = 11, .reports_total = 5000,
        .n = FP_N, .theta = theta, .previous_kind = TS_PRIOR_ESTIMATE,
        .previous = previous, .stale = 17, .outside = 2,
        .estimated_reports = 4900, .last_reports = 450,
        .estimated_at_ms = -5, .out_seq = 987654321012ull,
    };
    check_round_trip(&two);
    two.previous_kind = TS_PRIOR_UNIFORM;
    two.previous = NULL;
    check_round_trip(&two);
    two.theta = NULL;
    two.previous_kind = TS_PRIOR_NONE;
    check_round_trip(&two);

    /* Not a record: another format byte, or a kind out of range. */
    size_t len = ts_population_record_size(&two);
    unsigned char *b = malloc(len);
    ck_assert_ptr_nonnull(b);
    ts_population_record_encode(&two, b);
    ts_population_record back;
    int oom;
    b[0] = 3;
    ck_assert_int_ne(ts_population_record_decode(b, len, &back, &oom), 0);
    b[0] = 2;
    b[21] = 7;
    ck_assert_int_ne(ts_population_record_decode(b, len, &back, &oom), 0);
    free(b);
}
END_TEST

/* A stream of published reports as the cluster's holder reads it: each
 * drawn through the version its instance had installed, which lags the
 * newest by 0, 1 or 2 (an instance that had not adopted it yet). */
typedef struct published {
    uint32_t cell;
    uint32_t version;
} published;

/* Holds the channels of every version (a detached loop borrows them). */
typedef struct version_channels {
    const void *of[64];
    void *owned[64];
} version_channels;

static published draw_published(ts_rng *rng, uint32_t newest)
{
    double u = ts_rng_uniform_open(rng);
    uint32_t lag = u < 0.7 ? 0 : u < 0.9 ? 1 : 2;
    published p = { (uint32_t)(ts_rng_uniform_open(rng) * FP_N),
                    newest > lag ? newest - lag : 1 };
    return p;
}

/* The record a holder writes for `job`, closed at out_seq with the
 * loop's counters at that moment. */
static ts_population_record record_of_job(const ts_population_loop *loop,
                                          const ts_population_job *job,
                                          uint64_t out_seq,
                                          uint64_t reports_total,
                                          uint64_t stale, uint64_t outside)
{
    return (ts_population_record){
        .format = 2, .version = loop->source[1].version + 1,
        .cycles = loop->cycles + 1, .reports_total = reports_total,
        .n = loop->n, .theta = job->theta,
        .previous_kind = loop->theta != NULL ? TS_PRIOR_ESTIMATE
                                             : TS_PRIOR_UNIFORM,
        .previous = loop->theta, .stale = stale, .outside = outside,
        .estimated_reports = loop->estimated_reports + job->reports,
        .last_reports = job->reports, .out_seq = out_seq,
    };
}

static void assert_same_loop(const ts_population_loop *a,
                             const ts_population_loop *b)
{
    ck_assert_uint_eq(a->cycles, b->cycles);
    ck_assert_uint_eq(a->reports_total, b->reports_total);
    ck_assert_uint_eq(a->stale, b->stale);
    ck_assert_uint_eq(a->outside, b->outside);
    ck_assert_uint_eq(a->estimated_reports, b->estimated_reports);
    ck_assert_uint_eq(a->cycle_reports, b->cycle_reports);
    ck_assert_int_eq(a->theta != NULL, b->theta != NULL);
    if (a->theta != NULL)
        ck_assert(memcmp(a->theta, b->theta, a->n * sizeof *a->theta) == 0);
    for (int i = 0; i < 2; i++) {
        ck_assert_uint_eq(a->source[i].version, b->source[i].version);
        ck_assert_uint_eq(a->source[i].reports, b->source[i].reports);
        ck_assert_ptr_eq(a->source[i].channel, b->source[i].channel);
        ck_assert_int_eq(a->source[i].counts != NULL,
                         b->source[i].counts != NULL);
        if (a->source[i].counts != NULL)
            ck_assert(memcmp(a->source[i].counts, b->source[i].counts,
                             a->n * sizeof *a->source[i].counts) == 0);
    }
}

/* A holder's job between its close and its write, and the loop's
 * counters at the close (what the record will say it accounts for). */
typedef struct job_in_flight {
    ts_population_job job;
    int open;
    uint64_t out_seq, total, stale, outside, finish_at;
} job_in_flight;

static void job_closed(job_in_flight *j, const ts_population_loop *loop,
                       uint64_t seq, uint64_t lag)
{
    ts_population_run(&j->job);
    ck_assert_msg(j->job.ok, "%s", j->job.err);
    j->open = 1;
    j->out_seq = seq;
    j->total = loop->reports_total;
    j->stale = loop->stale;
    j->outside = loop->outside;
    j->finish_at = seq + lag;
}

/* What a failover relies on: a holder that resumes from the last record
 * and reads the stream again from the position after it is, report for
 * report, the holder that went on. Holder A counts a stream whose reports
 * lag the newest version, closes cycles, writes each result once the
 * reports that arrived while its job ran were counted (as the cluster's
 * job thread lets them), and shifts; at each write, a fresh holder B is
 * resumed from that record alone and fed the stream after its out_seq.
 * Both must agree on every counter and count, and then on the next
 * cycle's estimate. The accounting of every record is checked too: each
 * report up to out_seq counted, stale or outside exactly once. */
TS_TEST(test_population_resume_goes_on_exactly)
{
    enum { CYCLE = 60, STREAM = 2000, JOB_LAG = 25 };
    fake_pop f;
    fp_init(&f, CYCLE);
    version_channels ch = { .of = { [1] = f.first } };
    static published stream[STREAM + 1];
    ts_rng *rng = ts_rng_new_seeded(2626);
    ts_population_loop a;
    ck_assert_int_eq(ts_population_loop_init_detached(&a, &fp_ops, &f,
                                                      f.first, 1), 0);
    uint32_t newest = 1;
    job_in_flight j = { .open = 0 };
    unsigned resumed = 0;
    for (uint64_t seq = 1; seq <= STREAM; seq++) {
        stream[seq] = draw_published(rng, newest);
        ts_population_observe(&a, stream[seq].cell / FP_SIDE + 0.5,
                              stream[seq].cell % FP_SIDE + 0.5,
                              stream[seq].version, (int64_t)seq);
        if (j.open && seq == j.finish_at) {
            ts_population_record r = record_of_job(&a, &j.job, j.out_seq,
                                                   j.total, j.stale,
                                                   j.outside);
            /* Every report up to out_seq is accounted for once. */
            ck_assert_uint_eq(r.reports_total + r.stale + r.outside,
                              j.out_seq);
            ts_population_record copy;
            size_t len = ts_population_record_size(&r);
            unsigned char *bytes = malloc(len);
            ck_assert_ptr_nonnull(bytes);
            ts_population_record_encode(&r, bytes);
            int oom;
            ck_assert_int_eq(ts_population_record_decode(bytes, len, &copy,
                                                         &oom), 0);
            free(bytes);
            void *next = j.job.channel;
            j.job.channel = NULL;
            ck_assert_int_eq(ts_population_finish(&a, &j.job), 0);
            ck_assert_int_eq(ts_population_shift(&a, next, r.version), 0);
            ch.of[r.version] = ch.owned[r.version] = next;
            newest = r.version;
            j.open = 0;

            /* B: the record and the stream after out_seq, nothing else. */
            ts_population_loop b;
            memset(&b, 0, sizeof b);
            ck_assert_int_eq(ts_population_resume(&b, &fp_ops, &f, &copy,
                                                  ch.of[copy.version],
                                                  ch.of[copy.version - 1]),
                             0);
            for (uint64_t k = copy.out_seq + 1; k <= seq; k++)
                ts_population_observe(&b, stream[k].cell / FP_SIDE + 0.5,
                                      stream[k].cell % FP_SIDE + 0.5,
                                      stream[k].version, (int64_t)k);
            assert_same_loop(&a, &b);
            /* And both make the same next estimate. */
            if (ts_population_due(&a)) {
                ts_population_job jb;
                ck_assert_int_eq(ts_population_close(&a, &j.job), 0);
                ck_assert_int_eq(ts_population_close(&b, &jb), 0);
                job_closed(&j, &a, seq, JOB_LAG);
                ts_population_run(&jb);
                ck_assert(jb.ok);
                ck_assert(memcmp(j.job.theta, jb.theta,
                                 FP_N * sizeof *jb.theta) == 0);
                ts_population_job_free(&jb);
            }
            ts_population_record_free(&copy);
            ts_population_loop_free(&b);
            resumed++;
        }
        if (!j.open && ts_population_due(&a)) {
            ck_assert_int_eq(ts_population_close(&a, &j.job), 0);
            job_closed(&j, &a, seq, JOB_LAG);
        }
    }
    printf("resume: %u resumes agreed; %" PRIu64 " reports counted, %"
           PRIu64 " stale, version %u\n", resumed, a.reports_total, a.stale,
           newest);
    ck_assert_uint_ge(resumed, 10);
    ck_assert_uint_gt(a.stale, 0);   /* the lag reached beyond two */
    if (j.open)
        ts_population_job_free(&j.job);
    ts_population_loop_free(&a);
    for (size_t v = 0; v < 64; v++)
        if (ch.owned[v] != NULL)
            fp_free(ch.owned[v]);
    ts_rng_free(rng);
    fp_destroy(&f);
}
END_TEST


static void setup(void)
{
    /* As tracesand and tracesan do: a failed quadrature is an error
     * return, not an abort. */
    gsl_set_error_handler_off();
}

int main(void)
{
    return ts_check_main("population_records", 300, setup, NULL);
}

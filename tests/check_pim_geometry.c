/* Unit tests for the PIM geometry: mechanisms/hull.c and mechanisms/polygon.c.
 *
 * Hulls and Minkowski sums are compared with brute force as exact vertex
 * sets. For that the comparison must not hinge on rounding: every random
 * coordinate is a multiple of 2^-10 below 2^11 in magnitude, so sums,
 * differences, differences of those and the cross products of the
 * predicates all fit in 53 bits and are exact. Both sides then decide the
 * same exact geometry, including the collinear and duplicate points that a
 * small integer grid produces in bulk (a vertex of a sum of rounded reals
 * and an integer segment would otherwise be "collinear" only up to an ulp).
 *
 * Statistical tests (second moment by Monte Carlo, chi-square of the
 * uniform sampler) use fixed seeds; their tolerances are stated where they
 * are used. Assertions inside loops are counted and checked once (Check
 * logs every passing assertion).
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_cdf.h>

#include "mechanisms/hull.h"
#include "mechanisms/pim.h"
#include "mechanisms/polygon.h"
#include "mechanisms/rng.h"
#include "tests/support/check_run.h"

#define MAX_POINTS 64
#define MAX_SUMS (MAX_POINTS * MAX_POINTS)

/* ------------------------------------------------------------- helpers */

static double cross3(ts_vec2 o, ts_vec2 a, ts_vec2 b)
{
    return (a.x - o.x) * (b.y - o.y) - (a.y - o.y) * (b.x - o.x);
}

static int vec_compare(const void *pa, const void *pb)
{
    const ts_vec2 *a = pa, *b = pb;
    if (a->x != b->x)
        return a->x < b->x ? -1 : 1;
    return (a->y > b->y) - (a->y < b->y);
}

static size_t sort_unique(ts_vec2 *v, size_t n)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, vec_compare);
    size_t m = 1;
    for (size_t i = 1; i < n; i++)
        if (vec_compare(&v[i], &v[m - 1]) != 0)
            v[m++] = v[i];
    return m;
}

/* Brute force: p is a vertex of Conv(S) iff p is not in the closed hull of
 * the other points, iff some other point s makes every other point s' lie
 * strictly left of the ray p -> s or on that ray beyond p (the directions
 * s' - p then fit in a half-open half-plane, so no convex combination of
 * them is 0; conversely take s the clockwise-most direction). O(m^3).
 * Writes the vertices sorted; returns their count. */
static size_t brute_force_vertices(const ts_vec2 *input, size_t n, ts_vec2 *out)
{
    static ts_vec2 pts[MAX_SUMS];
    memcpy(pts, input, n * sizeof *pts);
    size_t m = sort_unique(pts, n), count = 0;
    for (size_t i = 0; i < m; i++) {
        int vertex = m == 1;
        for (size_t j = 0; j < m && !vertex; j++) {
            if (j == i)
                continue;
            ts_vec2 d = {pts[j].x - pts[i].x, pts[j].y - pts[i].y};
            int ok = 1;
            for (size_t k = 0; k < m && ok; k++) {
                if (k == i)
                    continue;
                ts_vec2 e = {pts[k].x - pts[i].x, pts[k].y - pts[i].y};
                double c = d.x * e.y - d.y * e.x;
                ok = c > 0.0 || (c == 0.0 && d.x * e.x + d.y * e.y > 0.0);
            }
            vertex = ok;
        }
        if (vertex)
            out[count++] = pts[i];
    }
    return count;
}

/* The output convention of hull.h: strictly convex counter-clockwise and
 * starting at the lexicographically smallest vertex. */
static int well_formed(const ts_vec2 *v, size_t n)
{
    for (size_t i = 1; i < n; i++)
        if (vec_compare(&v[i], &v[0]) <= 0)
            return 0;
    if (n < 3)
        return 1;
    for (size_t i = 0; i < n; i++)
        if (!(cross3(v[i], v[(i + 1) % n], v[(i + 2) % n]) > 0.0))
            return 0;
    return 1;
}

static int same_set(const ts_vec2 *a, size_t na, const ts_vec2 *sorted_b, size_t nb)
{
    static ts_vec2 tmp[MAX_SUMS];
    if (na != nb)
        return 0;
    memcpy(tmp, a, na * sizeof *tmp);
    qsort(tmp, na, sizeof *tmp, vec_compare);
    return memcmp(tmp, sorted_b, na * sizeof *tmp) == 0;
}

/* Snap to the 2^-10 lattice (see the header comment). */
static double lattice(double x)
{
    return ldexp(nearbyint(ldexp(x, 10)), -10);
}

/* Uniform double in [lo, hi). */
static double uniform(ts_rng *rng, double lo, double hi)
{
    return lo + (hi - lo) * ts_rng_uniform_open(rng);
}

typedef enum point_kind { SMALL_GRID, REALS, CIRCLE, LINE } point_kind;

static void random_points(ts_rng *rng, point_kind kind, ts_vec2 *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        switch (kind) {
        case SMALL_GRID: /* many duplicates and collinear triples */
            p[i] = (ts_vec2){(double)(ts_rng_u64(rng) % 9), (double)(ts_rng_u64(rng) % 9)};
            break;
        case REALS:
            p[i] = (ts_vec2){lattice(uniform(rng, -1e3, 1e3)),
                              lattice(uniform(rng, -1e3, 1e3))};
            break;
        case CIRCLE: { /* (nearly) every point is a vertex */
            double a = ts_rng_angle(rng);
            p[i] = (ts_vec2){lattice(1000.0 * cos(a)), lattice(1000.0 * sin(a))};
            break;
        }
        case LINE: { /* all collinear: the hull is a segment */
            double t = (double)(ts_rng_u64(rng) % 50);
            p[i] = (ts_vec2){3.0 * t - 7.0, -2.0 * t + 11.0};
            break;
        }
        }
    }
}

static int point_in_convex(const ts_vec2 *v, size_t n, ts_vec2 p)
{
    for (size_t i = 0; i < n; i++)
        if (cross3(v[i], v[(i + 1) % n], p) < 0.0)
            return 0;
    return 1;
}

/* A sensitivity hull of the kind PIM builds: random cells of a 340 m grid. */
static size_t random_cell_k(ts_rng *rng, size_t cells, ts_pim_context *ctx)
{
    ts_vec2 centres[MAX_POINTS];
    for (size_t i = 0; i < cells; i++)
        centres[i] = (ts_vec2){340.0 * (double)(ts_rng_u64(rng) % 7) + 12345.0,
                                340.0 * (double)(ts_rng_u64(rng) % 5) - 6789.0};
    ck_assert_int_eq(ts_pim_context_build(ctx, centres, cells, 340.0), 0);
    return ctx->k_count;
}

/* ---------------------------------------------------------------- hulls */

/* Trials of ts_convex_hull against the brute force. */
typedef struct hull_tally {
    int mismatches, malformed, trials;
    size_t max_vertices;
} hull_tally;

/* One trial on n random points of `kind` (pts, work and brute hold n,
 * hull 2 n). A LINE's hull is a segment: at most 2 vertices, exactly 2
 * when `segment` (n > 1 distinct points certain). */
static void hull_trial(hull_tally *t, ts_rng *rng, point_kind kind, size_t n,
                       int segment, ts_vec2 *pts, ts_vec2 *work,
                       ts_vec2 *hull, ts_vec2 *brute)
{
    random_points(rng, kind, pts, n);
    memcpy(work, pts, n * sizeof *pts);
    size_t h = ts_convex_hull(work, n, hull);
    size_t b = brute_force_vertices(pts, n, brute);
    t->mismatches += !same_set(hull, h, brute, b);
    t->malformed += !well_formed(hull, h);
    if (kind == LINE)
        t->malformed += segment ? h != 2 : h > 2;
    if (h > t->max_vertices)
        t->max_vertices = h;
    t->trials++;
}

/* Every hull matched and was well formed, and the circle sets really were
 * large (some hull had min_vertices). */
static void assert_hulls(const hull_tally *t, size_t min_vertices)
{
    ck_assert_msg(t->mismatches == 0, "%d of %d hulls differ from brute force",
                  t->mismatches, t->trials);
    ck_assert_int_eq(t->malformed, 0);
    ck_assert_uint_ge(t->max_vertices, min_vertices);
}

TS_TEST(test_hull_matches_brute_force)
{
    static const point_kind kinds[] = {SMALL_GRID, REALS, CIRCLE, LINE};
    ts_rng *rng = ts_rng_new_seeded(1001);
    ts_vec2 pts[MAX_POINTS], work[MAX_POINTS], hull[2 * MAX_POINTS], brute[MAX_POINTS];
    hull_tally t = {0};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (int trial = 0; trial < 150; trial++) {
            size_t n = 1 + (size_t)(ts_rng_u64(rng) % 40);
            hull_trial(&t, rng, kinds[k], n, 0, pts, work, hull, brute);
        }
    ts_rng_free(rng);
    assert_hulls(&t, 30);
}
END_TEST

TS_TEST(test_hull_degenerate_inputs)
{
    ts_vec2 hull[16];
    ts_vec2 one[3] = {{2.0, 3.0}, {2.0, 3.0}, {2.0, 3.0}};
    ck_assert_uint_eq(ts_convex_hull(one, 3, hull), 1);
    ck_assert(hull[0].x == 2.0 && hull[0].y == 3.0);

    ts_vec2 two[4] = {{5.0, 1.0}, {-1.0, 4.0}, {5.0, 1.0}, {-1.0, 4.0}};
    ck_assert_uint_eq(ts_convex_hull(two, 4, hull), 2);
    ck_assert(hull[0].x == -1.0 && hull[1].x == 5.0);

    /* Collinear with interior points, and points on a square's edges. */
    ts_vec2 line[5] = {{0, 0}, {2, 2}, {1, 1}, {4, 4}, {3, 3}};
    ck_assert_uint_eq(ts_convex_hull(line, 5, hull), 2);
    ts_vec2 square[8] = {{0, 0}, {1, 0}, {2, 0}, {2, 1}, {2, 2}, {1, 2}, {0, 2}, {0, 1}};
    ck_assert_uint_eq(ts_convex_hull(square, 8, hull), 4);
    ck_assert(hull[0].x == 0 && hull[0].y == 0 && hull[1].x == 2 && hull[1].y == 0 &&
              hull[2].x == 2 && hull[2].y == 2 && hull[3].x == 0 && hull[3].y == 2);

    /* -0.0 and +0.0 are one point, whatever order they come in. */
    ts_vec2 zeros[3] = {{-0.0, 0.0}, {0.0, -0.0}, {1.0, 0.0}};
    ck_assert_uint_eq(ts_convex_hull(zeros, 3, hull), 2);
    ck_assert(!signbit(hull[0].x) && !signbit(hull[0].y));

    ts_vec2 bad[2] = {{0.0, NAN}, {1.0, 1.0}};
    ck_assert_uint_eq(ts_convex_hull(bad, 2, hull), 0);
    ts_vec2 inf[2] = {{INFINITY, 0.0}, {1.0, 1.0}};
    ck_assert_uint_eq(ts_convex_hull(inf, 2, hull), 0);
    ck_assert_uint_eq(ts_convex_hull(bad, 0, hull), 0);
}
END_TEST

/* The result does not depend on the order of the input (the tie rule). */
TS_TEST(test_hull_order_independent)
{
    ts_rng *rng = ts_rng_new_seeded(1002);
    ts_vec2 pts[40], shuffled[40], h1[80], h2[80];
    int differ = 0;
    for (int trial = 0; trial < 100; trial++) {
        random_points(rng, SMALL_GRID, pts, 40);
        memcpy(shuffled, pts, sizeof pts);
        for (size_t i = 39; i > 0; i--) {
            size_t j = (size_t)(ts_rng_u64(rng) % (i + 1));
            ts_vec2 t = shuffled[i];
            shuffled[i] = shuffled[j];
            shuffled[j] = t;
        }
        size_t a = ts_convex_hull(pts, 40, h1), b = ts_convex_hull(shuffled, 40, h2);
        differ += a != b || memcmp(h1, h2, a * sizeof *h1) != 0;
    }
    ts_rng_free(rng);
    ck_assert_int_eq(differ, 0);
}
END_TEST

/* Hulls of more than 64 points, sizes on and off multiples of 8: the
 * lexicographic sort of ts_convex_hull works in runs of 8 and merges
 * widths 8, 16, 32, 64, 128, 256, so these sizes take partial runs, an odd
 * and an even number of merge passes, and a last block with no partner.
 * Circle points are (nearly) all vertices, so an element lost or doubled
 * by the sort shows in the vertex set. Exact comparison (lattice points,
 * see the header comment). */
#define LARGE_POINTS 320
TS_TEST(test_hull_large_n_matches_brute_force)
{
    static const point_kind kinds[] = {SMALL_GRID, REALS, CIRCLE, LINE};
    static const size_t sizes[] = {65, 66, 71, 72, 100, 127, 128, 129, 200, 257, 300, 317};
    ts_rng *rng = ts_rng_new_seeded(1009);
    static ts_vec2 pts[LARGE_POINTS], work[LARGE_POINTS], hull[2 * LARGE_POINTS],
        brute[LARGE_POINTS];
    hull_tally t = {0};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            for (int trial = 0; trial < 3; trial++)
                hull_trial(&t, rng, kinds[k], sizes[s], 1, pts, work, hull,
                           brute);
    ts_rng_free(rng);
    assert_hulls(&t, 200);
}
END_TEST

/* ------------------------------------------------- PIM context hull */

/* Centre sets of the kinds a delta-set produces, and worse. Cells of side
 * `cell` on a grid whose origin is (x0, y0); every coordinate is an integer
 * or a multiple of 2^-2, so the brute force decides the exact geometry. */
typedef enum centre_kind {
    C_RANDOM,     /* lattice reals, no structure */
    C_PATCH,      /* full w x h patch, shuffled */
    C_HOLES,      /* patch with ~1/3 of the cells missing, corners too */
    C_ROW,        /* collinear: row, column, diagonals, slope 1/2 */
    C_CIRCLE,     /* (nearly) every point a vertex, many near Q's edges */
    C_DUPLICATES, /* a patch with every centre repeated, extremes most */
    C_DIAMOND,    /* |col| + |row| <= r: hull edges on Q's diagonals */
    C_KINDS
} centre_kind;

static const char *const centre_kind_name[C_KINDS] = {
    "random", "patch", "holes", "row", "circle", "duplicates", "diamond"};

static void shuffle_points(ts_rng *rng, ts_vec2 *p, size_t n)
{
    for (size_t i = n; i-- > 1;) {
        size_t j = (size_t)(ts_rng_u64(rng) % (i + 1));
        ts_vec2 t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
}

/* Writes up to `room` centres; returns how many. */
static size_t random_centres(ts_rng *rng, centre_kind kind, double x0, double y0, double cell,
                             ts_vec2 *p, size_t room)
{
#define CELL(c, r) ((ts_vec2){x0 + cell * (double)(c), y0 + cell * (double)(r)})
    size_t n = 0;
    switch (kind) {
    case C_RANDOM: {
        size_t want = 16 + (size_t)(ts_rng_u64(rng) % 200);
        for (; n < want; n++)
            p[n] = (ts_vec2){x0 + lattice(uniform(rng, -2e3, 2e3)),
                              y0 + lattice(uniform(rng, -2e3, 2e3))};
        break;
    }
    case C_PATCH: {
        static const int dims[][2] = {{10, 10}, {4, 4}, {16, 1}, {1, 17}, {17, 3},
                                      {5, 12}, {20, 20}, {2, 8}};
        const int *d = dims[ts_rng_u64(rng) % (sizeof dims / sizeof dims[0])];
        for (int r = 0; r < d[1]; r++)
            for (int c = 0; c < d[0]; c++)
                p[n++] = CELL(c, r);
        break;
    }
    case C_HOLES: {
        int w = 5 + (int)(ts_rng_u64(rng) % 10), h = 5 + (int)(ts_rng_u64(rng) % 10);
        for (int r = 0; r < h; r++)
            for (int c = 0; c < w; c++) {
                int corner = (r == 0 || r == h - 1) && (c == 0 || c == w - 1);
                if (ts_rng_u64(rng) % 3 != 0 && !(corner && ts_rng_u64(rng) % 2))
                    p[n++] = CELL(c, r);
            }
        break;
    }
    case C_ROW: {
        static const int steps[][2] = {{1, 0}, {0, 1}, {1, 1}, {1, -1}, {2, 1}, {-1, 2}};
        const int *st = steps[ts_rng_u64(rng) % (sizeof steps / sizeof steps[0])];
        size_t len = 16 + (size_t)(ts_rng_u64(rng) % 40);
        for (; n < len; n++) {
            int t = (int)(ts_rng_u64(rng) % (len + 5)); /* with repeats */
            p[n] = CELL(st[0] * t, st[1] * t);
        }
        break;
    }
    case C_CIRCLE: {
        size_t want = 16 + (size_t)(ts_rng_u64(rng) % 250);
        for (; n < want; n++) {
            double a = ts_rng_angle(rng);
            p[n] = (ts_vec2){x0 + lattice(1500.0 * cos(a)), y0 + lattice(1500.0 * sin(a))};
        }
        break;
    }
    case C_DUPLICATES: {
        int w = 3 + (int)(ts_rng_u64(rng) % 6), h = 1 + (int)(ts_rng_u64(rng) % 6);
        for (int r = 0; r < h; r++)
            for (int c = 0; c < w; c++) {
                int extreme = (r == 0 || r == h - 1) && (c == 0 || c == w - 1);
                int copies = 1 + (int)(ts_rng_u64(rng) % 3) + 3 * extreme;
                for (int k = 0; k < copies; k++)
                    p[n++] = CELL(c, r);
            }
        /* Sometimes one single point, many times. */
        if (ts_rng_u64(rng) % 4 == 0)
            for (size_t i = 0; i < n; i++)
                p[i] = CELL(3, -2);
        break;
    }
    case C_DIAMOND: {
        int rad = 2 + (int)(ts_rng_u64(rng) % 8);
        for (int r = -rad; r <= rad; r++)
            for (int c = -rad; c <= rad; c++)
                if (abs(r) + abs(c) <= rad)
                    p[n++] = CELL(c, r);
        break;
    }
    default:
        break;
    }
#undef CELL
    ck_assert_uint_le(n, room);
    shuffle_points(rng, p, n);
    return n;
}

/* Same vertex sets up to tol: as many vertices, and a one-to-one match. */
#define CTX_POINTS 512
static int same_set_tol(const ts_vec2 *a, size_t na, const ts_vec2 *b, size_t nb, double tol)
{
    static int used[4 * CTX_POINTS];
    ck_assert_uint_le(na, 4 * CTX_POINTS);
    if (na != nb)
        return 0;
    memset(used, 0, na * sizeof *used);
    for (size_t i = 0; i < na; i++) {
        size_t j = 0;
        while (j < nb && (used[j] || fabs(a[i].x - b[j].x) > tol || fabs(a[i].y - b[j].y) > tol))
            j++;
        if (j == nb)
            return 0;
        used[j] = 1;
    }
    return 1;
}

/* ts_convex_hull drops points strictly inside the Akl-Toussaint octagon
 * before the chain (n >= 16). ts_pim_context_build's ctx->hull, the hull of the
 * cells' squares (Conv(centres) + [-cell/2, cell/2]^2), must be that of
 * ALL the centres: against brute force, first the vertices of the
 * centres, then the vertices of their four corners each. Tolerance
 * 1e-9 * scale (scale = largest coordinate): the coordinates are exact, so
 * this only forgives rounding the code may legitimately do. Also checked:
 * the output convention. Grid origins from
 * 0 to UTM-like 4.5e5 m and cells of 340 and 100.25 m. */
TS_TEST(test_context_hull_matches_brute_force)
{
    static const struct {
        double x0, y0, cell;
    } grids[] = {{12345.0, -6789.0, 340.0}, {0.0, 0.0, 100.25}, {451234.5, 4412345.25, 340.0}};
    ts_rng *rng = ts_rng_new_seeded(1010);
    static ts_vec2 centres[CTX_POINTS], centre_hull[CTX_POINTS],
        corners[4 * CTX_POINTS], brute[4 * CTX_POINTS];
    ts_pim_context ctx;
    ts_pim_context_init(&ctx);
    int mismatches = 0, malformed = 0, trials = 0, filtered = 0;
    int per_kind[C_KINDS] = {0};
    size_t max_n = 0;
    for (size_t g = 0; g < sizeof grids / sizeof grids[0]; g++)
        for (int kind = 0; kind < C_KINDS; kind++)
            for (int trial = 0; trial < 25; trial++) {
                double cell = grids[g].cell, half = 0.5 * cell;
                size_t n = random_centres(rng, (centre_kind)kind, grids[g].x0, grids[g].y0,
                                          cell, centres, CTX_POINTS);
                /* Around the filter's threshold of 16 centres too. */
                if (trial % 5 == 4 && n > 15)
                    n = 15 + (size_t)(ts_rng_u64(rng) % 3);
                max_n = n > max_n ? n : max_n;
                filtered += n >= 16;
                ck_assert_int_eq(ts_pim_context_build(&ctx, centres, n, cell), 0);

                /* Brute force: vertices of the centres, then of the four
                 * corners of each. */
                size_t h = brute_force_vertices(centres, n, centre_hull);
                size_t nc = 0;
                for (size_t i = 0; i < h; i++) {
                    corners[nc++] = (ts_vec2){centre_hull[i].x - half, centre_hull[i].y - half};
                    corners[nc++] = (ts_vec2){centre_hull[i].x + half, centre_hull[i].y - half};
                    corners[nc++] = (ts_vec2){centre_hull[i].x + half, centre_hull[i].y + half};
                    corners[nc++] = (ts_vec2){centre_hull[i].x - half, centre_hull[i].y + half};
                }
                size_t b = brute_force_vertices(corners, nc, brute);

                double scale = 0.0;
                for (size_t i = 0; i < b; i++)
                    scale = fmax(scale, fmax(fabs(brute[i].x), fabs(brute[i].y)));
                double tol = 1e-9 * scale;
                int bad = !same_set_tol(ctx.hull, ctx.hull_count, brute, b, tol);
                if (bad && mismatches < 5)
                    fprintf(stderr, "context hull (%s, n %zu, grid %zu): %zu vertices, "
                                    "brute force %zu\n",
                            centre_kind_name[kind], n, g, ctx.hull_count, b);
                mismatches += bad;
                malformed += !well_formed(ctx.hull, ctx.hull_count);

                per_kind[kind]++;
                trials++;
            }
    ts_pim_context_free(&ctx);
    ts_rng_free(rng);
    fprintf(stderr, "context hulls: %d sets (%d through the octagon filter), up to %zu centres\n",
            trials, filtered, max_n);
    ck_assert_msg(mismatches == 0, "%d of %d context hulls differ from brute force", mismatches,
                  trials);
    ck_assert_int_eq(malformed, 0);
    ck_assert_int_ge(filtered, trials / 2);
    ck_assert_uint_ge(max_n, 200);
}
END_TEST

/* ------------------------------------------------------ Minkowski sums */

TS_TEST(test_sensitivity_hull_matches_brute_force)
{
    static const point_kind kinds[] = {SMALL_GRID, REALS, CIRCLE, LINE};
    ts_rng *rng = ts_rng_new_seeded(1003);
    static ts_vec2 pts[MAX_POINTS], work[MAX_POINTS], hull[2 * MAX_POINTS],
        k[4 * MAX_POINTS], diffs[MAX_SUMS], brute[MAX_SUMS];
    int mismatches = 0, malformed = 0, asymmetric = 0, trials = 0;
    for (size_t kind = 0; kind < sizeof kinds / sizeof kinds[0]; kind++)
        for (int trial = 0; trial < 60; trial++) {
            size_t n = 1 + (size_t)(ts_rng_u64(rng) % 16);
            random_points(rng, kinds[kind], pts, n);
            memcpy(work, pts, n * sizeof *pts);
            size_t h = ts_convex_hull(work, n, hull);
            size_t m = ts_sensitivity_hull(hull, h, k);

            /* K = Conv{ p_i - p_j } over ALL input pairs. */
            size_t nd = 0;
            for (size_t i = 0; i < n; i++)
                for (size_t j = 0; j < n; j++)
                    diffs[nd++] = (ts_vec2){pts[i].x - pts[j].x, pts[i].y - pts[j].y};
            size_t b = brute_force_vertices(diffs, nd, brute);
            mismatches += !same_set(k, m, brute, b);
            malformed += !well_formed(k, m);
            /* Exact central symmetry: vertex i + m/2 is -vertex i. */
            if (m > 1) {
                asymmetric += m % 2 != 0;
                for (size_t i = 0; i < m && m % 2 == 0; i++)
                    asymmetric += k[(i + m / 2) % m].x != -k[i].x ||
                                  k[(i + m / 2) % m].y != -k[i].y;
            }
            trials++;
        }
    ts_rng_free(rng);
    ck_assert_msg(mismatches == 0, "%d of %d sensitivity hulls differ", mismatches, trials);
    ck_assert_int_eq(malformed, 0);
    ck_assert_int_eq(asymmetric, 0);
}
END_TEST

TS_TEST(test_minkowski_sum_matches_brute_force)
{
    static const point_kind kinds[] = {SMALL_GRID, REALS, CIRCLE, LINE};
    ts_rng *rng = ts_rng_new_seeded(1004);
    static ts_vec2 a[MAX_POINTS], b[MAX_POINTS], work[MAX_POINTS], ha[2 * MAX_POINTS],
        hb[2 * MAX_POINTS], sum[4 * MAX_POINTS], sums[MAX_SUMS], brute[MAX_SUMS];
    int mismatches = 0, malformed = 0, trials = 0;
    for (size_t ka = 0; ka < 4; ka++)
        for (size_t kb = 0; kb < 4; kb++)
            for (int trial = 0; trial < 15; trial++) {
                size_t na = 1 + (size_t)(ts_rng_u64(rng) % 15);
                size_t nb = 1 + (size_t)(ts_rng_u64(rng) % 15);
                random_points(rng, kinds[ka], a, na);
                random_points(rng, kinds[kb], b, nb);
                memcpy(work, a, na * sizeof *a);
                size_t pa = ts_convex_hull(work, na, ha);
                memcpy(work, b, nb * sizeof *b);
                size_t pb = ts_convex_hull(work, nb, hb);
                size_t m = ts_minkowski_sum(ha, pa, hb, pb, sum);
                size_t ns = 0;
                for (size_t i = 0; i < na; i++)
                    for (size_t j = 0; j < nb; j++)
                        sums[ns++] = (ts_vec2){a[i].x + b[j].x, a[i].y + b[j].y};
                size_t nbf = brute_force_vertices(sums, ns, brute);
                mismatches += !same_set(sum, m, brute, nbf);
                malformed += !well_formed(sum, m);
                trials++;
            }
    ts_rng_free(rng);
    ck_assert_msg(mismatches == 0, "%d of %d Minkowski sums differ", mismatches, trials);
    ck_assert_int_eq(malformed, 0);
    ck_assert_uint_eq(ts_minkowski_sum(a, 0, b, 3, sum), 0);
}
END_TEST

/* ------------------------------------------------- area and moments */

TS_TEST(test_area_centroid_moment_closed_forms)
{
    /* Unit right triangle: area 1/2, centroid (1/3, 1/3), E[x^2] = 1/6,
     * E[xy] = 1/12 (direct integration). */
    ts_vec2 tri[3] = {{0, 0}, {1, 0}, {0, 1}};
    ts_sym2 m;
    ts_vec2 c;
    ck_assert_double_eq_tol(ts_polygon_signed_area(tri, 3), 0.5, 1e-15);
    ts_vec2 tri_cw[3] = {{0, 0}, {0, 1}, {1, 0}};
    ck_assert_double_eq_tol(ts_polygon_signed_area(tri_cw, 3), -0.5, 1e-15);
    ck_assert_double_eq_tol(ts_polygon_area(tri_cw, 3), 0.5, 1e-15);
    ck_assert_int_eq(ts_polygon_centroid(tri, 3, &c), 0);
    ck_assert_double_eq_tol(c.x, 1.0 / 3.0, 1e-15);
    ck_assert_double_eq_tol(c.y, 1.0 / 3.0, 1e-15);
    ck_assert_int_eq(ts_polygon_second_moment(tri, 3, &m), 0);
    ck_assert_double_eq_tol(m.xx, 1.0 / 6.0, 1e-15);
    ck_assert_double_eq_tol(m.xy, 1.0 / 12.0, 1e-15);
    ck_assert_double_eq_tol(m.yy, 1.0 / 6.0, 1e-15);

    /* Rectangle [-a, a] x [-b, b]: E[x^2] = a^2 / 3, E[y^2] = b^2 / 3, and
     * translated by (u, v): E[x^2] = a^2/3 + u^2, E[xy] = u v. */
    double a = 300.0, b = 40.0, u = 5e4, v = -2e4;
    ts_vec2 rect[4] = {{-a + u, -b + v}, {a + u, -b + v}, {a + u, b + v}, {-a + u, b + v}};
    ck_assert_double_eq_tol(ts_polygon_area(rect, 4), 4 * a * b, 1e-9);
    ck_assert_int_eq(ts_polygon_centroid(rect, 4, &c), 0);
    ck_assert_double_eq_tol(c.x, u, 1e-9);
    ck_assert_double_eq_tol(c.y, v, 1e-9);
    ck_assert_int_eq(ts_polygon_second_moment(rect, 4, &m), 0);
    ck_assert_double_eq_tol(m.xx / (a * a / 3 + u * u), 1.0, 1e-13);
    ck_assert_double_eq_tol(m.xy / (u * v), 1.0, 1e-13);
    ck_assert_double_eq_tol(m.yy / (b * b / 3 + v * v), 1.0, 1e-13);

    /* Degenerate polygons have no uniform distribution. */
    ts_vec2 seg[3] = {{0, 0}, {1, 1}, {2, 2}};
    ck_assert_int_eq(ts_polygon_second_moment(seg, 3, &m), -1);
    ck_assert_int_eq(ts_polygon_centroid(seg, 3, &c), -1);
    ck_assert_int_eq(ts_polygon_second_moment(seg, 2, &m), -1);
}
END_TEST

/* Exact second moment against Monte Carlo. Points are drawn uniformly in
 * the bounding box and rejected outside the polygon (independent of the
 * library's sampler). With N accepted points the standard error of each
 * moment is sd(y_i y_j) / sqrt(N); we require the MC estimate within 5 SE
 * of the exact value AND within 1 % (of the entry for the diagonal, of
 * sqrt(xx yy) for the off-diagonal, which can be near 0), and we require
 * 5 SE < 1 %, i.e. N large enough that the 1 % criterion is meaningful. */
static void check_moment_by_monte_carlo(const ts_vec2 *v, size_t n, ts_rng *rng,
                                        const char *what)
{
    ts_sym2 exact;
    ck_assert_int_eq(ts_polygon_second_moment(v, n, &exact), 0);
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        x0 = fmin(x0, v[i].x), x1 = fmax(x1, v[i].x);
        y0 = fmin(y0, v[i].y), y1 = fmax(y1, v[i].y);
    }
    double s[3] = {0}, s2[3] = {0};
    long accepted = 0;
    for (long i = 0; i < 2000000; i++) {
        ts_vec2 p = {uniform(rng, x0, x1), uniform(rng, y0, y1)};
        if (!point_in_convex(v, n, p))
            continue;
        double q[3] = {p.x * p.x, p.x * p.y, p.y * p.y};
        for (int j = 0; j < 3; j++)
            s[j] += q[j], s2[j] += q[j] * q[j];
        accepted++;
    }
    double exact_v[3] = {exact.xx, exact.xy, exact.yy};
    double scale[3] = {exact.xx, sqrt(exact.xx * exact.yy), exact.yy};
    for (int j = 0; j < 3; j++) {
        double mean = s[j] / accepted;
        double se = sqrt((s2[j] / accepted - mean * mean) / accepted);
        double err = fabs(mean - exact_v[j]);
        fprintf(stderr, "%s moment %d: exact %.6g mc %.6g rel err %.2e (SE %.2e)\n", what, j,
                exact_v[j], mean, err / scale[j], se / scale[j]);
        ck_assert_msg(5.0 * se < 0.01 * scale[j], "%s: MC too small", what);
        ck_assert_msg(err < 0.01 * scale[j], "%s: entry %d off by %.3g %%", what, j,
                      100 * err / scale[j]);
        ck_assert_msg(err < 5.0 * se, "%s: entry %d off by %.1f SE", what, j, err / se);
    }
}

TS_TEST(test_second_moment_monte_carlo)
{
    ts_rng *rng = ts_rng_new_seeded(1005);
    ts_vec2 pts[20], hull[40];
    /* A generic convex polygon away from the origin (moment about 0). */
    random_points(rng, REALS, pts, 20);
    size_t h = ts_convex_hull(pts, 20, hull);
    check_moment_by_monte_carlo(hull, h, rng, "random hull");
    /* A sensitivity hull from grid cells (centred, the PIM case). */
    ts_pim_context ctx;
    ts_pim_context_init(&ctx);
    size_t m = random_cell_k(rng, 6, &ctx);
    check_moment_by_monte_carlo(ctx.k, m, rng, "cell K");
    /* A thin tilted one: a diagonal row of cells. */
    ts_vec2 diag[6];
    for (int i = 0; i < 6; i++)
        diag[i] = (ts_vec2){100.0 * i, 60.0 * i};
    ck_assert_int_eq(ts_pim_context_build(&ctx, diag, 6, 50.0), 0);
    check_moment_by_monte_carlo(ctx.k, ctx.k_count, rng, "thin K");
    ts_pim_context_free(&ctx);
    ts_rng_free(rng);
}
END_TEST

/* ------------------------------------------------- isotropic transform */

static double isotropy_error(ts_sym2 sigma, ts_mat2 t, ts_mat2 inv)
{
    ts_mat2 s = {sigma.xx, sigma.xy, sigma.xy, sigma.yy};
    /* T S T^T */
    ts_mat2 ts = {t.a * s.a + t.b * s.c, t.a * s.b + t.b * s.d, t.c * s.a + t.d * s.c,
                   t.c * s.b + t.d * s.d};
    ts_mat2 r = {ts.a * t.a + ts.b * t.b, ts.a * t.c + ts.b * t.d, ts.c * t.a + ts.d * t.b,
                  ts.c * t.c + ts.d * t.d};
    /* T^{-1} T */
    ts_mat2 q = {inv.a * t.a + inv.b * t.c, inv.a * t.b + inv.b * t.d,
                  inv.c * t.a + inv.d * t.c, inv.c * t.b + inv.d * t.d};
    double e = fmax(fmax(fabs(r.a - 1), fabs(r.d - 1)), fmax(fabs(r.b), fabs(r.c)));
    e = fmax(e, fmax(fmax(fabs(q.a - 1), fabs(q.d - 1)), fmax(fabs(q.b), fabs(q.c))));
    return e;
}

TS_TEST(test_isotropic_transform_exact)
{
    ts_rng *rng = ts_rng_new_seeded(1006);
    ts_pim_context ctx;
    ts_pim_context_init(&ctx);
    double worst = 0.0;
    int not_symmetric = 0, not_positive = 0;
    for (int trial = 0; trial < 200; trial++) {
        random_cell_k(rng, 1 + (size_t)(ts_rng_u64(rng) % 12), &ctx);
        double e = isotropy_error(ctx.moment, ctx.transform, ctx.inverse);
        worst = fmax(worst, e);
        not_symmetric += ctx.transform.b != ctx.transform.c;
        not_positive += !(ctx.transform.a > 0 && ts_mat2_det(ctx.transform) > 0);
        /* The transformed polygon really is isotropic: E[y y^T] = I. */
        ts_sym2 iso;
        ck_assert_int_eq(ts_polygon_second_moment(ctx.k_iso, ctx.k_count, &iso), 0);
        worst = fmax(worst, fmax(fmax(fabs(iso.xx - 1), fabs(iso.yy - 1)), fabs(iso.xy)));
    }
    /* Random SPD matrices with condition numbers up to 1e3 in arbitrary
     * orientation: entries of T S T^T are sums of terms up to cond(S) in
     * size, so 1e-12 leaves room for cond * a few ulps. */
    for (int trial = 0; trial < 1000; trial++) {
        double l1 = exp(uniform(rng, -5, 15)), l2 = l1 * exp(uniform(rng, -6.9, 6.9));
        double th = ts_rng_angle(rng), c = cos(th), s = sin(th);
        ts_sym2 sigma = {l1 * c * c + l2 * s * s, (l1 - l2) * c * s, l1 * s * s + l2 * c * c};
        ts_mat2 t, inv;
        ck_assert_int_eq(ts_isotropic_transform(sigma, &t, &inv), 0);
        worst = fmax(worst, isotropy_error(sigma, t, inv));
    }
    fprintf(stderr, "isotropic transform: worst |T S T^T - I|, |T^-1 T - I| = %.2e\n", worst);
    ck_assert_msg(worst < 1e-12, "worst error %.3g", worst);
    ck_assert_int_eq(not_symmetric, 0);
    ck_assert_int_eq(not_positive, 0);

    ts_mat2 t, inv;
    ck_assert_int_eq(ts_isotropic_transform((ts_sym2){1, 1, 1}, &t, &inv), -1);  /* singular */
    ck_assert_int_eq(ts_isotropic_transform((ts_sym2){1, 2, 1}, &t, &inv), -1);  /* indefinite */
    ck_assert_int_eq(ts_isotropic_transform((ts_sym2){-1, 0, -1}, &t, &inv), -1);
    ck_assert_int_eq(ts_isotropic_transform((ts_sym2){NAN, 0, 1}, &t, &inv), -1);
    ts_pim_context_free(&ctx);
    ts_rng_free(rng);
}
END_TEST

/* ------------------------------------------------------ uniform sampler */

/* Chi-square test of a sampler over a sub-triangulation that the sampler
 * does not use: fan triangles from the CENTROID (the sampler fans from
 * v[0]), each cut into m^2 congruent triangles by dividing its two sides
 * from the centroid into m parts (barycentric grid). Region r has area
 * A_r = A_fan / m^2, expected count N A_r / A. Under uniformity the
 * statistic is chi-square with (regions - 1) degrees of freedom; we fail
 * above its 0.999 quantile (gsl_cdf_chisq_Qinv). */
#define SUBDIV 5
typedef ts_vec2 (*sampler_fn)(const ts_vec2 *v, size_t n, const double *fan, ts_rng *rng);

static double chi_square_statistic(const ts_vec2 *v, size_t n, sampler_fn sample, long draws,
                                   ts_rng *rng, int *dof)
{
    double fan[4 * MAX_POINTS];
    ck_assert_int_eq(ts_polygon_fan_table(v, n, fan), 0);
    ts_vec2 c;
    ck_assert_int_eq(ts_polygon_centroid(v, n, &c), 0);
    double area = ts_polygon_area(v, n);
    size_t regions = n * SUBDIV * SUBDIV * 2; /* upright and inverted slots */
    long *counts = calloc(regions, sizeof *counts);
    long lost = 0;
    for (long i = 0; i < draws; i++) {
        ts_vec2 p = sample(v, n, fan, rng);
        size_t t = n;
        for (size_t k = 0; k < n && t == n; k++)
            if (cross3(c, v[k], p) >= 0.0 && cross3(c, p, v[(k + 1) % n]) >= 0.0)
                t = k;
        if (t == n) {
            lost++;
            continue;
        }
        ts_vec2 e1 = {v[t].x - c.x, v[t].y - c.y}, e2 = {v[(t + 1) % n].x - c.x,
                                                          v[(t + 1) % n].y - c.y};
        ts_vec2 d = {p.x - c.x, p.y - c.y};
        double det = e1.x * e2.y - e1.y * e2.x;
        double l1 = SUBDIV * (d.x * e2.y - d.y * e2.x) / det;
        double l2 = SUBDIV * (e1.x * d.y - e1.y * d.x) / det;
        int a = (int)floor(l1), b = (int)floor(l2);
        a = a < 0 ? 0 : a, b = b < 0 ? 0 : b;
        int inverted = (l1 - a) + (l2 - b) > 1.0;
        while (a + b > SUBDIV - 1 - inverted) { /* rounding at the outer edge */
            if (inverted)
                inverted = 0;
            else if (a > b)
                a--;
            else
                b--;
        }
        counts[((t * SUBDIV + (size_t)a) * SUBDIV + (size_t)b) * 2 + (size_t)inverted]++;
    }
    ck_assert_int_eq(lost, 0);
    double chi2 = 0.0;
    int used = 0;
    for (size_t t = 0; t < n; t++) {
        ts_vec2 tri[3] = {c, v[t], v[(t + 1) % n]};
        double expected = (double)draws * ts_polygon_area(tri, 3) / (SUBDIV * SUBDIV) / area;
        for (int a = 0; a < SUBDIV; a++)
            for (int b = 0; b < SUBDIV; b++)
                for (int inv = 0; inv < 2; inv++) {
                    if (a + b > SUBDIV - 1 - inv)
                        continue;
                    double o = (double)counts[((t * SUBDIV + (size_t)a) * SUBDIV + (size_t)b) *
                                                  2 + (size_t)inv];
                    chi2 += (o - expected) * (o - expected) / expected;
                    used++;
                }
    }
    free(counts);
    *dof = used - 1;
    return chi2;
}

/* Broken samplers for "test the test". */
static ts_vec2 triangle_chosen_uniformly(const ts_vec2 *v, size_t n, const double *fan,
                                          ts_rng *rng)
{
    (void)fan;
    size_t k = (size_t)(ts_rng_u64(rng) % (n - 2));
    double u = ts_rng_uniform_open(rng), w = ts_rng_uniform_open(rng);
    if (u + w > 1)
        u = 1 - u, w = 1 - w;
    return (ts_vec2){v[0].x + u * (v[k + 1].x - v[0].x) + w * (v[k + 2].x - v[0].x),
                      v[0].y + u * (v[k + 1].y - v[0].y) + w * (v[k + 2].y - v[0].y)};
}

static ts_vec2 naive_barycentric(const ts_vec2 *v, size_t n, const double *fan, ts_rng *rng)
{
    /* Triangle picked by area like the real sampler, but (u, w) drawn as
     * u uniform, w uniform on (0, 1 - u): crowds the apex v[k+2]. */
    double target = ts_rng_uniform_open(rng) * fan[n - 3];
    size_t k = 0;
    while (k + 1 < n - 2 && fan[k] <= target)
        k++;
    double u = ts_rng_uniform_open(rng), w = (1 - u) * ts_rng_uniform_open(rng);
    return (ts_vec2){v[0].x + u * (v[k + 1].x - v[0].x) + w * (v[k + 2].x - v[0].x),
                      v[0].y + u * (v[k + 1].y - v[0].y) + w * (v[k + 2].y - v[0].y)};
}

TS_TEST(test_uniform_sampler_chi_square)
{
    ts_rng *rng = ts_rng_new_seeded(1007);
    ts_pim_context ctx;
    ts_pim_context_init(&ctx);
    ts_vec2 pts[12], hull[24];
    random_points(rng, REALS, pts, 12);
    size_t h = ts_convex_hull(pts, 12, hull);
    random_cell_k(rng, 7, &ctx);
    struct {
        const char *what;
        const ts_vec2 *v;
        size_t n;
    } polys[2] = {{"random hull", hull, h}, {"K_I of cells", ctx.k_iso, ctx.k_count}};
    for (int p = 0; p < 2; p++) {
        int dof;
        double chi2 = chi_square_statistic(polys[p].v, polys[p].n, ts_uniform_in_polygon,
                                           300000, rng, &dof);
        double limit = gsl_cdf_chisq_Qinv(0.001, dof);
        fprintf(stderr, "%s (%zu vertices): chi2 %.1f, dof %d, 0.999 quantile %.1f\n",
                polys[p].what, polys[p].n, chi2, dof, limit);
        ck_assert_int_ge(dof, 100);
        ck_assert_msg(chi2 < limit, "%s: chi2 %.1f >= %.1f", polys[p].what, chi2, limit);

        double bad1 = chi_square_statistic(polys[p].v, polys[p].n, triangle_chosen_uniformly,
                                           300000, rng, &dof);
        double bad2 = chi_square_statistic(polys[p].v, polys[p].n, naive_barycentric, 300000,
                                           rng, &dof);
        fprintf(stderr, "  broken samplers: chi2 %.1f and %.1f\n", bad1, bad2);
        ck_assert_msg(bad1 > limit, "uniform triangle choice passed (%.1f)", bad1);
        ck_assert_msg(bad2 > limit, "naive barycentric passed (%.1f)", bad2);
    }
    ts_pim_context_free(&ctx);
    ts_rng_free(rng);
}
END_TEST

/* -------------------------------------------------------------- gauge */

/* Independent gauge: bisection on t with a point-in-polygon test of p / t. */
static double gauge_by_bisection(const ts_vec2 *v, size_t n, ts_vec2 p)
{
    double lo = 0.0, hi = 1.0;
    while (point_in_convex(v, n, (ts_vec2){p.x / hi, p.y / hi}))
        hi *= 0.5;
    while (!point_in_convex(v, n, (ts_vec2){p.x / hi, p.y / hi}))
        lo = hi, hi *= 2.0;
    for (int i = 0; i < 200 && hi - lo > 1e-15 * hi; i++) {
        double mid = 0.5 * (lo + hi);
        if (point_in_convex(v, n, (ts_vec2){p.x / mid, p.y / mid}))
            hi = mid;
        else
            lo = mid;
    }
    return hi;
}

TS_TEST(test_gauge_properties)
{
    ts_rng *rng = ts_rng_new_seeded(1008);
    ts_pim_context ctx;
    ts_pim_context_init(&ctx);
    ts_vec2 forms[4 * MAX_POINTS];
    double worst_vertex = 0.0, worst_scale = 0.0, worst_bisect = 0.0, worst_sym = 0.0;
    int inside_bad = 0, outside_bad = 0;
    for (int trial = 0; trial < 100; trial++) {
        size_t m = random_cell_k(rng, 1 + (size_t)(ts_rng_u64(rng) % 10), &ctx);
        const ts_vec2 *polys[2] = {ctx.k, ctx.k_iso};
        for (int which = 0; which < 2; which++) {
            const ts_vec2 *k = polys[which];
            ck_assert_int_eq(ts_gauge_prepare(k, m, forms), 0);
            for (size_t i = 0; i < m; i++) {
                worst_vertex = fmax(worst_vertex, fabs(ts_gauge_eval(forms, m, k[i]) - 1.0));
                /* Just outside a vertex: > 1. */
                outside_bad += !(ts_gauge_eval(forms, m, (ts_vec2){1.001 * k[i].x,
                                                                     1.001 * k[i].y}) > 1.0);
            }
            for (int j = 0; j < 50; j++) {
                /* Random convex combination of the vertices, shrunk: strictly inside. */
                double w_sum = 0.0;
                ts_vec2 p = {0, 0};
                for (size_t i = 0; i < m; i++) {
                    double w = ts_rng_uniform_open(rng);
                    w_sum += w;
                    p.x += w * k[i].x, p.y += w * k[i].y;
                }
                double shrink = 0.999 / w_sum;
                p.x *= shrink, p.y *= shrink;
                inside_bad += !(ts_gauge_eval(forms, m, p) < 1.0);

                /* Positive homogeneity, symmetry, and agreement with bisection. */
                ts_vec2 q = {uniform(rng, -3, 3) * k[0].x + uniform(rng, -3, 3) * k[1].x,
                              uniform(rng, -3, 3) * k[0].y + uniform(rng, -3, 3) * k[1].y};
                double g = ts_gauge_eval(forms, m, q);
                double t = exp(uniform(rng, -7, 7));
                worst_scale = fmax(worst_scale,
                                   fabs(ts_gauge_eval(forms, m, (ts_vec2){t * q.x, t * q.y}) /
                                            (t * g) - 1.0));
                worst_sym = fmax(worst_sym,
                                 fabs(ts_gauge_eval(forms, m, (ts_vec2){-q.x, -q.y}) / g - 1.0));
                worst_bisect = fmax(worst_bisect, fabs(gauge_by_bisection(k, m, q) / g - 1.0));
            }
        }
        /* K-norm through the context (evaluated in K_I space) equals the
         * gauge of K itself: ||T v||_{TK} = ||v||_K. */
        ck_assert_int_eq(ts_gauge_prepare(ctx.k, m, forms), 0);
        ts_vec2 d = {uniform(rng, -2e3, 2e3), uniform(rng, -2e3, 2e3)};
        worst_scale = fmax(worst_scale,
                           fabs(ts_pim_k_norm(&ctx, d) / ts_gauge_eval(forms, m, d) - 1.0));
    }
    fprintf(stderr,
            "gauge: vertex |g-1| %.1e, homogeneity %.1e, symmetry %.1e, vs bisection %.1e\n",
            worst_vertex, worst_scale, worst_sym, worst_bisect);
    ck_assert_double_lt(worst_vertex, 1e-12);
    ck_assert_double_lt(worst_scale, 1e-12);
    ck_assert_double_lt(worst_sym, 1e-12);
    ck_assert_double_lt(worst_bisect, 1e-9);
    ck_assert_int_eq(inside_bad, 0);
    ck_assert_int_eq(outside_bad, 0);
    ck_assert_double_eq(ts_gauge_eval(forms, ctx.k_count, (ts_vec2){0, 0}), 0.0);
    ck_assert(isnan(ts_gauge_eval(forms, ctx.k_count, (ts_vec2){NAN, 0})));

    /* Origin on the boundary or outside: no gauge. */
    ts_vec2 corner[4] = {{0, 0}, {1, 0}, {1, 1}, {0, 1}};
    ck_assert_int_eq(ts_gauge_prepare(corner, 4, forms), -1);
    ts_vec2 away[3] = {{1, 1}, {2, 1}, {1, 2}};
    ck_assert_int_eq(ts_gauge_prepare(away, 3, forms), -1);
    /* A non-symmetric polygon around the origin still gets its gauge. */
    ts_vec2 skew[3] = {{-1, -1}, {4, 0}, {0, 2}};
    ck_assert_int_eq(ts_gauge_prepare(skew, 3, forms), 0);
    for (int i = 0; i < 3; i++)
        ck_assert_double_eq_tol(ts_gauge_eval(forms, 3, skew[i]), 1.0, 1e-14);
    ck_assert_double_eq_tol(ts_gauge_eval(forms, 3, (ts_vec2){2, 1}), 1.0, 1e-14);

    ts_pim_context_free(&ctx);
    ts_rng_free(rng);
}
END_TEST

int main(void)
{
    return ts_check_main("pim_geometry", 120, NULL, NULL);
}

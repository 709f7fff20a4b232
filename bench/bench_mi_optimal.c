/* Time and iterations of the MI-optimal channel optimizer on synthetic
 * joints: k users, each a cloud of visits around a home cell on a square
 * grid of 100 m cells. Prints one CSV line per size; asserts nothing.
 *
 * usage: bench_mi_optimal [--tol BITS] [--L M] [--fw] [--geoind EPS]
 *                         [--sides A,B,..] [--users A,B,..]
 *                         [--max-iterations N]
 *   --fw          Frank-Wolfe alone (plain case), for comparison with
 *                 the default mirror descent
 *   --geoind EPS  geo-ind at EPS per metre (Frank-Wolfe over GLPK's LP:
 *                 at most 144 cells, so sides of at most 12)
 * Defaults: --tol 1e-3 --L 200 --sides 10,20,32 --users 4,20,50. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "inference/mi_optimal.h"
#include "mechanisms/rng.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static size_t parse_list(const char *s, size_t *out, size_t max)
{
    size_t n = 0;
    while (*s != '\0' && n < max) {
        char *end;
        unsigned long v = strtoul(s, &end, 10);
        if (end == s || v == 0)
            return 0;
        out[n++] = v;
        s = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end != '\0')
            return 0;
    }
    return n;
}

static int usage(void)
{
    fprintf(stderr, "usage: bench_mi_optimal [--tol BITS] [--L M] [--fw] "
            "[--geoind EPS] [--sides A,B,..] [--users A,B,..] "
            "[--max-iterations N]\n");
    return 2;
}

int main(int argc, char **argv)
{
    double tol = 1e-3, L = 200.0, eps = 0.0;
    int fw = 0;
    unsigned max_it = 100000;
    size_t sides[8] = { 10, 20, 32 }, users[8] = { 4, 20, 50 };
    size_t n_sides = 3, n_users = 3;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--fw") == 0) {
            fw = 1;
        } else if (v == NULL) {
            return usage();
        } else if (strcmp(a, "--tol") == 0) {
            tol = atof(v), i++;
        } else if (strcmp(a, "--L") == 0) {
            L = atof(v), i++;
        } else if (strcmp(a, "--geoind") == 0) {
            eps = atof(v), i++;
        } else if (strcmp(a, "--max-iterations") == 0) {
            max_it = (unsigned)strtoul(v, NULL, 10), i++;
        } else if (strcmp(a, "--sides") == 0) {
            if ((n_sides = parse_list(v, sides, 8)) == 0)
                return usage();
            i++;
        } else if (strcmp(a, "--users") == 0) {
            if ((n_users = parse_list(v, users, 8)) == 0)
                return usage();
            i++;
        } else {
            return usage();
        }
    }
    if (!(tol > 0.0) || !(L > 0.0) || !(eps >= 0.0))
        return usage();
    printf("cells,users,visited_cells,nnz,L_m,eps,solver,tolerance_bits,"
           "seconds,iterations,converged,gap_bits,mi_bits,distortion_m,"
           "least_distortion_m,repair_weight\n");
    for (size_t a = 0; a < n_sides; a++)
        for (size_t b = 0; b < n_users; b++) {
            size_t side = sides[a], n = side * side, k = users[b];
            ts_vec2 *c = malloc(n * sizeof *c);
            double *joint = calloc(n * k, sizeof *joint);
            double *C = malloc(n * n * sizeof *C);
            if (!c || !joint || !C)
                return 1;
            for (size_t i = 0; i < n; i++)
                c[i] = (ts_vec2){ 100.0 * (double)(i % side) + 50.0,
                                  100.0 * (double)(i / side) + 50.0 };
            ts_rng *rng = ts_rng_new_seeded(2000 + n + k);
            /* 200 visits per user, Gaussian around home (sd 300 m). */
            double total = 0.0;
            for (size_t u = 0; u < k; u++) {
                double hx = ts_rng_uniform_open(rng) * 100.0 * side;
                double hy = ts_rng_uniform_open(rng) * 100.0 * side;
                for (int v = 0; v < 200; v++) {
                    double r = 300.0 * sqrt(-2.0 * log(
                                   ts_rng_uniform_open(rng)));
                    double t = 2.0 * M_PI * ts_rng_uniform_open(rng);
                    long cx = lround(floor((hx + r * cos(t)) / 100.0));
                    long cy = lround(floor((hy + r * sin(t)) / 100.0));
                    if (cx < 0 || cy < 0 || cx >= (long)side ||
                        cy >= (long)side)
                        continue;
                    joint[u * n + (size_t)cy * side + (size_t)cx] += 1.0;
                    total += 1.0;
                }
            }
            size_t nnz = 0, visited = 0;
            for (size_t i = 0; i < n * k; i++) {
                joint[i] /= total;
                nnz += joint[i] > 0.0;
            }
            for (size_t x = 0; x < n; x++) {
                int any = 0;
                for (size_t u = 0; u < k; u++)
                    any |= joint[u * n + x] > 0.0;
                visited += any;
            }
            ts_mi_problem pb = { .cells = n, .centres = c, .users = k,
                                 .joint = joint, .distortion_m = L,
                                 .geoind_epsilon = eps };
            ts_mi_params params = { .gap_tolerance_bits = tol,
                                    .max_iterations = max_it,
                                    .frank_wolfe_only = fw };
            ts_mi_result r;
            char err[512];
            const char *solver = eps > 0.0 ? "geoind-lp"
                                 : (fw ? "frank-wolfe" : "mirror-descent");
            double t0 = now();
            int rc = ts_mi_optimize(&pb, &params, C, &r, err, sizeof err);
            double dt = now() - t0;
            if (rc != 0)
                printf("%zu,%zu: error: %s\n", n, k, err);
            else
                printf("%zu,%zu,%zu,%zu,%g,%g,%s,%g,%.3f,%u,%d,%.3g,%.5f,"
                       "%.2f,%.2f,%.3g\n",
                       n, k, visited, nnz, L, eps, solver, tol, dt,
                       r.iterations, r.converged, r.gap_bits, r.mi_bits,
                       r.distortion_m, r.least_distortion_m,
                       r.repair_weight);
            fflush(stdout);
            ts_rng_free(rng);
            free(c);
            free(joint);
            free(C);
        }
    return 0;
}

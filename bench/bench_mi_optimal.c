/* Time and iterations of the MI-optimal channel optimizer on synthetic
 * joints: k users, each a cloud of visits around a home cell on a square
 * grid of 100 m cells. Prints; asserts nothing. Usage:
 * bench_mi_optimal [tolerance_bits] [L_m] [fw] (fw: Frank-Wolfe alone,
 * for comparison with the default mirror descent) */
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

int main(int argc, char **argv)
{
    double tol = argc > 1 ? atof(argv[1]) : 1e-3;
    double L = argc > 2 ? atof(argv[2]) : 200.0;
    int fw = argc > 3 && strcmp(argv[3], "fw") == 0;
    const size_t sides[] = { 10, 20, 32 };
    const size_t users[] = { 4, 20, 50 };
    printf("cells,users,visited_cells,nnz,L_m,eps,tolerance_bits,seconds,"
           "iterations,converged,gap_bits,mi_bits,distortion_m\n");
    for (size_t a = 0; a < 3; a++)
        for (size_t b = 0; b < 3; b++) {
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
                                 .joint = joint, .distortion_m = L };
            ts_mi_params params = { .gap_tolerance_bits = tol,
                                    .max_iterations = 100000,
                                    .frank_wolfe_only = fw };
            ts_mi_result r;
            char err[256];
            double t0 = now();
            int rc = ts_mi_optimize(&pb, &params, C, &r, err, sizeof err);
            double dt = now() - t0;
            if (rc != 0)
                printf("%zu,%zu: error: %s\n", n, k, err);
            else
                printf("%zu,%zu,%zu,%zu,%g,0,%g,%.3f,%u,%d,%.3g,%.5f,%.2f\n",
                       n, k, visited, nnz, L, tol, dt, r.iterations,
                       r.converged, r.gap_bits, r.mi_bits, r.distortion_m);
            fflush(stdout);
            ts_rng_free(rng);
            free(c);
            free(joint);
            free(C);
        }
    return 0;
}

/* The held-out MAP identity adversary (identity.h). One sort of every row
 * by (cell, user) gives, cell by cell, the training counts the MAP table
 * needs, the evaluation counts it is judged on and the pooled counts of
 * the plug-in mutual information, all in a single pass. */
#include "inference/identity.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "inference/error.h"

/* Column and row indices stay below this so both fit in one 64-bit key. */
#define CELL_INDEX_LIMIT 2147483648.0

enum { SET_TRAIN = 0, SET_EVAL = 1 };

typedef struct keyed_row {
    uint64_t cell;              /* column << 32 | row */
    uint32_t user;
    uint32_t set;
} keyed_row;

static int compare_keyed(const void *a, const void *b)
{
    const keyed_row *x = a, *y = b;
    if (x->cell != y->cell)
        return x->cell < y->cell ? -1 : 1;
    if (x->user != y->user)
        return x->user < y->user ? -1 : 1;
    return (x->set > y->set) - (x->set < y->set);
}

static int check_set(const ts_identity_obs *obs, size_t n, size_t users,
                     const char *name, double *x_min, double *y_min,
                     double *x_max, double *y_max, char *err, size_t errlen)
{
    if (obs == NULL)
        return ts_fail(err, errlen, "%s rows: NULL", name);
    if (n == 0)
        return ts_fail(err, errlen, "%s rows: none", name);
    for (size_t i = 0; i < n; i++) {
        if ((size_t)obs[i].user >= users)
            return ts_fail(err, errlen, "%s row %zu: user %u out of range "
                           "(%zu users)", name, i, (unsigned)obs[i].user,
                           users);
        if (!isfinite(obs[i].z.x) || !isfinite(obs[i].z.y))
            return ts_fail(err, errlen, "%s row %zu: point not finite",
                           name, i);
        *x_min = fmin(*x_min, obs[i].z.x);
        *y_min = fmin(*y_min, obs[i].z.y);
        *x_max = fmax(*x_max, obs[i].z.x);
        *y_max = fmax(*y_max, obs[i].z.y);
    }
    return 0;
}

static uint64_t cell_key(ts_vec2 z, double x0, double y0, double cell_m)
{
    uint64_t col = (uint64_t)floor((z.x - x0) / cell_m);
    uint64_t row = (uint64_t)floor((z.y - y0) / cell_m);
    return col << 32 | row;
}

int ts_identity_estimate(const ts_identity_obs *train, size_t n_train,
                         const ts_identity_obs *eval, size_t n_eval,
                         size_t users, double cell_m,
                         ts_identity_result *result, char *err,
                         size_t errlen)
{
    if (result == NULL)
        return ts_fail(err, errlen, "result: NULL");
    if (!(cell_m > 0.0) || !isfinite(cell_m))
        return ts_fail(err, errlen, "cell side %g m: must be positive and "
                       "finite", cell_m);
    if (users == 0 || users > (size_t)UINT32_MAX + 1)
        return ts_fail(err, errlen, "users %zu: must be 1 .. 2^32", users);
    double x_min = INFINITY, y_min = INFINITY;
    double x_max = -INFINITY, y_max = -INFINITY;
    if (check_set(train, n_train, users, "training", &x_min, &y_min, &x_max,
                  &y_max, err, errlen) != 0 ||
        check_set(eval, n_eval, users, "evaluation", &x_min, &y_min, &x_max,
                  &y_max, err, errlen) != 0)
        return -1;
    if (n_train > SIZE_MAX / sizeof(keyed_row) - n_eval)
        return ts_fail(err, errlen, "too many rows");
    if (!((x_max - x_min) / cell_m < CELL_INDEX_LIMIT - 1.0) ||
        !((y_max - y_min) / cell_m < CELL_INDEX_LIMIT - 1.0))
        return ts_fail(err, errlen, "the reports span more than 2^31 cells "
                       "of %g m", cell_m);

    size_t n = n_train + n_eval;
    keyed_row *rows = malloc(n * sizeof *rows);
    size_t *train_count = calloc(users, sizeof *train_count);
    size_t *pooled_count = calloc(users, sizeof *pooled_count);
    if (rows == NULL || train_count == NULL || pooled_count == NULL) {
        free(rows);
        free(train_count);
        free(pooled_count);
        return ts_fail(err, errlen, "out of memory");
    }
    for (size_t i = 0; i < n_train; i++) {
        rows[i] = (keyed_row){ cell_key(train[i].z, x_min, y_min, cell_m),
                               train[i].user, SET_TRAIN };
        train_count[train[i].user]++;
        pooled_count[train[i].user]++;
    }
    for (size_t i = 0; i < n_eval; i++) {
        rows[n_train + i] =
            (keyed_row){ cell_key(eval[i].z, x_min, y_min, cell_m),
                         eval[i].user, SET_EVAL };
        pooled_count[eval[i].user]++;
    }
    /* The prior's argmax: strict > over ascending users keeps the smallest
     * index among ties, like the per-cell rule below. */
    uint32_t prior_guess = 0;
    size_t present = 0;
    for (size_t u = 0; u < users; u++) {
        if (train_count[u] > train_count[prior_guess])
            prior_guess = (uint32_t)u;
        present += pooled_count[u] != 0;
    }
    qsort(rows, n, sizeof *rows, compare_keyed);

    const double log2_n = log2((double)n);
    double mi = 0.0;
    size_t errors = 0, resub_correct = 0, unseen = 0;
    size_t train_cells = 0, pooled_cells = 0;
    for (size_t first = 0; first < n;) {
        size_t end = first;
        while (end < n && rows[end].cell == rows[first].cell)
            end++;
        pooled_cells++;
        /* Per user in the cell: training, evaluation and pooled counts. The
         * guess needs every training count before any evaluation row can
         * be scored, so the cell is walked twice; it is short. */
        size_t best_train = 0, best_pooled = 0, cell_n = end - first;
        uint32_t guess = prior_guess;
        for (size_t i = first; i < end;) {
            size_t j = i, t = 0;
            while (j < end && rows[j].user == rows[i].user) {
                t += rows[j].set == SET_TRAIN;
                j++;
            }
            if (t > best_train) {
                best_train = t;
                guess = rows[i].user;
            }
            if (j - i > best_pooled)
                best_pooled = j - i;
            double n_ju = (double)(j - i);
            mi += n_ju * (log2(n_ju) + log2_n - log2((double)cell_n) -
                          log2((double)pooled_count[rows[i].user]));
            i = j;
        }
        resub_correct += best_pooled;
        if (best_train > 0)
            train_cells++;
        for (size_t i = first; i < end; i++) {
            if (rows[i].set != SET_EVAL)
                continue;
            errors += rows[i].user != guess;
            unseen += best_train == 0;
        }
        first = end;
    }
    free(rows);
    free(train_count);
    free(pooled_count);

    memset(result, 0, sizeof *result);
    result->bayes_error = (double)errors / (double)n_eval;
    result->resubstitution_error = 1.0 - (double)resub_correct / (double)n;
    /* Mathematically >= 0; rounding of the log sums can dip just below. */
    result->mi_bits = fmax(0.0, mi / (double)n);
    result->mi_bias_bits =
        present > 1 && pooled_cells > 1
            ? (double)(present - 1) * (double)(pooled_cells - 1) /
                  (2.0 * (double)n * log(2.0))
            : 0.0;
    result->users = present;
    result->train_rows = n_train;
    result->eval_rows = n_eval;
    result->train_cells = train_cells;
    result->pooled_cells = pooled_cells;
    result->eval_unseen = unseen;
    result->prior_guess = prior_guess;
    return 0;
}

/* FNV-1a spreads every input byte over the state; the splitmix64 finaliser
 * then mixes the high bit, which FNV alone leaves weakly dependent on the
 * last bytes. */
static uint64_t fnv1a(uint64_t h, const unsigned char *p, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

int ts_identity_split(const char *user, size_t user_len, int64_t ts_ms)
{
    /* Bytes written out explicitly so the split is the same on every
     * byte order. */
    unsigned char ts_bytes[8];
    uint64_t ts = (uint64_t)ts_ms;
    for (int i = 0; i < 8; i++)
        ts_bytes[i] = (unsigned char)(ts >> (8 * i));
    uint64_t h = fnv1a(0xcbf29ce484222325ULL,
                       (const unsigned char *)(user != NULL ? user : ""),
                       user != NULL ? user_len : 0);
    h = fnv1a(h, ts_bytes, sizeof ts_bytes);
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebULL;
    h ^= h >> 31;
    return (int)(h >> 63);
}

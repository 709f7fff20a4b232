/* libFuzzer target: the model file loader (ts_model_open_buffer).
 *
 * A model file is input from disk that every pim/lm-delta user's release
 * indexes without further checks, so the loader's promise is the thing to
 * attack: whatever it accepts must be safe to walk.
 *
 * Input layout: one mode byte, then the file. With mode bit 0 set the
 * harness first makes the header's file size and both CRC-32s agree with
 * the bytes (when there is a whole header), so that mutations reach the
 * structural validation instead of dying at the checksum; with it clear
 * the bytes are loaded as they are, checksums included. An accepted model
 * is walked: every row of every model (popular and personal) must have
 * in-range, ascending columns and finite probabilities in [0, 1] summing
 * to 1, and every personal model must be found again by its user id. A
 * violation aborts; a refusal must come with a message.
 *
 * Seeds (corpus/fuzz_model): two files written by `tracesan learn` from a
 * synthetic 3-user random walk over a 15-cell grid, one popular-only and
 * one --per-user, each with mode 1 and mode 0. */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inference/binary_file.h"
#include "inference/markov.h"
#include "inference/model_file.h"

#define TS_FUZZ_TARGET "fuzz_model"
#include "tests/fuzz/fuzz_support.h"

#define HEADER_BYTES TS_MODEL_HEADER_BYTES
#define PAYLOAD_CRC_AT 120
#define HEADER_CRC_AT 124

static void fix_checksums(unsigned char *file, size_t len)
{
    if (len < HEADER_BYTES)
        return;
    ts_bin_put_u64(file + TS_BIN_FILE_BYTES, len);
    ts_bin_put_u32(file + PAYLOAD_CRC_AT,
                   ts_bin_crc(file + HEADER_BYTES, len - HEADER_BYTES));
    ts_bin_put_u32(file + HEADER_CRC_AT, ts_bin_crc(file, HEADER_CRC_AT));
}

static void walk(const ts_markov *m, uint32_t cells)
{
    if (m->cell_count != cells || m->row_start[0] != 0 ||
        m->row_start[cells] != m->nnz)
        ts_fuzz_die("accepted model with inconsistent dimensions");
    double initial = 0.0;
    for (uint32_t r = 0; r < cells; r++) {
        if (!(m->initial[r] >= 0.0 && m->initial[r] <= 1.0))
            ts_fuzz_die("accepted initial probability outside [0, 1]");
        initial += m->initial[r];
        uint64_t lo = m->row_start[r], hi = m->row_start[r + 1];
        if (hi < lo || hi > m->nnz)
            ts_fuzz_die("accepted row_start out of order");
        if (lo == hi && m->fallback == NULL)
            ts_fuzz_die("accepted an empty row without a fallback");
        double sum = 0.0;
        for (uint64_t k = lo; k < hi; k++) {
            if (m->col[k] >= cells || (k > lo && m->col[k] <= m->col[k - 1]))
                ts_fuzz_die("accepted a column out of range or out of order");
            if (!(m->prob[k] >= 0.0 && m->prob[k] <= 1.0))
                ts_fuzz_die("accepted a probability outside [0, 1]");
            sum += m->prob[k];
        }
        if (lo < hi && fabs(sum - 1.0) > 2 * TS_MARKOV_SUM_TOLERANCE)
            ts_fuzz_die("accepted a row that does not sum to 1");
    }
    if (fabs(initial - 1.0) > 2 * TS_MARKOV_SUM_TOLERANCE)
        ts_fuzz_die("accepted an initial distribution that does not sum to 1");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int fix = data[0] & 1;
    size_t len = size - 1;
    /* malloc's alignment covers the loader's 8-byte requirement; +1 so
     * that an empty file is still a valid pointer. */
    unsigned char *file = malloc(len + 1);
    if (file == NULL)
        return 0;
    memcpy(file, data + 1, len);
    if (fix)
        fix_checksums(file, len);

    ts_model *model = NULL;
    char err[512] = "";
    if (ts_model_open_buffer(file, len, &model, err, sizeof err) != 0) {
        if (err[0] == '\0')
            ts_fuzz_die("refused without a message");
        free(file);
        return 0;
    }
    uint32_t cells = model->grid.cell_count;
    walk(&model->popular, cells);
    if (model->popular.fallback != NULL)
        ts_fuzz_die("accepted a popular model with a fallback");
    for (uint32_t i = 0; i < model->user_count; i++) {
        size_t id_len = 0;
        const char *id = ts_model_user_id(model, i, &id_len);
        if (id == NULL || id_len == 0)
            ts_fuzz_die("accepted a personal model without a user id");
        const ts_markov *personal = ts_model_personal(model, id, id_len);
        if (personal == NULL)
            ts_fuzz_die("a personal model is not found by its own user id");
        walk(personal, cells);
        if (ts_model_for_user(model, id, id_len) != personal)
            ts_fuzz_die("for_user disagrees with personal");
    }
    if (ts_model_for_user(model, "", 0) != &model->popular)
        ts_fuzz_die("an empty user id did not fall back to the popular model");
    ts_model_close(model);
    free(file);
    return 0;
}

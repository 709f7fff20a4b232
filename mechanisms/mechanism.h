/* The mechanism interface: one ops table per mechanism, found by name.
 *
 * A mechanism is pure math on structs. It never sees a socket, a file or a
 * config library: the caller hands it parameters through ts_params, its
 * per-user state as an opaque zero-initialised block, the true point, the
 * user's budget view and a generator, and gets back a report and its spend.
 * Adding a mechanism is one source file plus one line in the registry
 * (mechanisms/mechanism.c); nothing in the daemon changes.
 */
#ifndef TRACESAN_MECHANISMS_MECHANISM_H
#define TRACESAN_MECHANISMS_MECHANISM_H

#include <stddef.h>
#include <stdint.h>

#include "mechanisms/rng.h"

/* Parameter source, implemented by the caller (libconfig in the daemon, a
 * plain table in tests). Each getter returns 1 when found, 0 when absent and
 * -1 when present with the wrong type. Integers are accepted where doubles
 * are asked for. */
typedef struct ts_params {
    void *ctx;
    int (*get_double)(void *ctx, const char *key, double *out);
    int (*get_int)(void *ctx, const char *key, long long *out);
    int (*get_string)(void *ctx, const char *key, const char **out);
    /* Optional (NULL when the caller has no model files): the model named
     * by the string parameter `key` (a path), opened by the caller and
     * valid at least until profile_new returns; a `const ts_model *`
     * (inference/model_file.h). NULL with a message in err when the key is
     * absent or the model cannot be opened. */
    const void *(*get_model)(void *ctx, const char *key, char *err,
                             size_t errlen);
    /* Optional, the same for a channel file: a `const ts_channel_file *`
     * (inference/channel_file.h), opened by the caller and valid at least
     * until profile_new returns (the mechanism copies what it keeps). */
    const void *(*get_channel)(void *ctx, const char *key, char *err,
                               size_t errlen);
    /* Optional (NULL when the source has no booleans): 1 found, 0 absent,
     * -1 present but not a boolean; *out is 0 or 1. */
    int (*get_bool)(void *ctx, const char *key, int *out);
    /* Optional: the i-th key the source holds (NULL past the last), so
     * that keys no parameter row names are refused by name. */
    const char *(*key_at)(void *ctx, size_t index);
} ts_params;

/* A mechanism's parameters as data, like Fluent Bit's config_map: one row
 * per key, read by one parser (ts_mechanism_parse_params) into the
 * mechanism's profile struct at `offset`. Docs, `--help` and the
 * documentation check read the same rows. */
typedef enum ts_param_type {
    TS_PARAM_NUMBER,     /* double, finite; an integer is accepted */
    TS_PARAM_INT,        /* long long */
    TS_PARAM_CHOICE,     /* int: index into choices */
    TS_PARAM_SWITCH,     /* int 0 or 1: a boolean, or the integer 0 or 1 */
    /* const void * (a const ts_model *, inference/model_file.h): the
     * string is a path the caller opens (ts_params.get_model). Resolved
     * after every other row, so a profile whose model is missing has had
     * all its other keys checked. */
    TS_PARAM_MODEL,
    /* const void * (a const ts_channel_file *, inference/channel_file.h):
     * a path the caller opens (ts_params.get_channel), resolved with the
     * models after every other row. Valid only until profile_new returns:
     * mechanisms never open files, the composer does. */
    TS_PARAM_CHANNEL,
    /* double[4]: a region "LAT_MIN,LON_MIN,LAT_MAX,LON_MAX" in WGS84
     * degrees (the form `tracesan learn --region` takes), min < max on
     * both axes, no antimeridian wrap. */
    TS_PARAM_BOX,
} ts_param_type;

enum {
    TS_PARAM_MIN_EXCLUSIVE = 1u << 0,
    TS_PARAM_MAX_EXCLUSIVE = 1u << 1,
};

typedef struct ts_param_spec {
    const char *key;
    ts_param_type type;
    size_t offset;               /* into the mechanism's profile struct */
    double min, max;             /* NUMBER, INT; max may be INFINITY */
    unsigned bounds;             /* TS_PARAM_*_EXCLUSIVE */
    /* As a configuration file spells it ("100.0", "30", "parrot",
     * "true"); NULL = required. */
    const char *default_value;
    const char *const *choices;  /* CHOICE: NULL-terminated */
    const char *doc;
} ts_param_spec;

/* The true location. Never copied into a report, a log or an error. */
typedef struct ts_point {
    double lat;          /* WGS84 degrees, validated by the caller */
    double lon;
    int64_t ts_ms;       /* event time, non-decreasing per user */
    double accuracy_m;   /* NaN when the device did not say */
    /* The user's pseudonym as it arrived (public, not terminated; NULL/0
     * when the caller has none). Lets a mechanism pick per-user public
     * parameters such as a personal mobility model; never mixed into
     * anything as if it were secret. */
    const char *user;
    size_t user_len;
} ts_point;

/* The user's ledger for the current window, owned by the caller. */
typedef struct ts_budget_view {
    double total;        /* budget per window, in the mechanism's unit */
    double spent;        /* spent so far in this window */
} ts_budget_view;

/* What may be published about one point. */
typedef struct ts_report {
    double lat;          /* sanitized, valid WGS84 */
    double lon;
    double eps_point;    /* budget this report spends (0 allowed) */
    /* Public extras, each a row of ts_report_extras below. */
    int has_predicted;   /* the mechanism defines the public easy/hard bit */
    int predicted;
    int has_delta_set_size; /* delta-location-set mechanisms: |Delta X| */
    unsigned delta_set_size;
    /* Channel mechanisms whose channel changes over time (privic): the
     * version of the channel the report was drawn through. */
    int has_channel_version;
    unsigned channel_version;
    /* mi-channel without a geo-ind epsilon: the report's guarantee is
     * information-theoretic (I(U;Z), Bayes error), not differential
     * privacy, and readers are told so on every report. */
    int has_information_theoretic;
    int information_theoretic;
    /* cip-gp: the Gaussian noise's standard deviation per axis, in metres.
     * A function of the public timestamps and the profile only, and what a
     * reader needs to weigh the report (docs/cip.md). */
    int has_sigma_z_m;
    double sigma_z_m;
    /* Grid mechanisms (privic; mi-channel with a geo-ind epsilon): the
     * constant, in nats, that the report's bound adds to eps_point * d.
     * Their channels are metric-private between cell centres, so two true
     * points d metres apart are told apart by at most
     * e^{eps_point * d + eps_floor}, eps_floor = eps_point * the cell
     * diagonal: public, a function of the profile (docs/privic.md). */
    int has_eps_floor;
    double eps_floor;
} ts_report;

/* The per-report values beyond the point and its spend that a paper proves
 * public (invariant 5), as one table. The codec, `tracesan tail` and the
 * CSV writer carry every row by its name, which is also the field's name
 * in tracesan.v1.SanitizedLocation and the CSV column's: a new public
 * field costs its two members in ts_report, one row here and one proto
 * field. */
typedef enum ts_report_extra_type {
    TS_EXTRA_BOOL,       /* int 0/1; proto bool */
    TS_EXTRA_UINT32,     /* unsigned; proto uint32 */
    TS_EXTRA_DOUBLE,     /* double, finite; proto double */
} ts_report_extra_type;

typedef struct ts_report_extra_def {
    const char *name;
    ts_report_extra_type type;
    size_t has_offset;   /* int in ts_report: 1 when the value is set */
    size_t value_offset; /* int (BOOL), unsigned (UINT32) or double (DOUBLE) */
} ts_report_extra_def;

extern const ts_report_extra_def ts_report_extras[];
extern const size_t ts_report_n_extras;

/* 1 with *value set when the report carries the extra, else 0. Every
 * extra's value is exact as a double (bool 0/1, uint32, double). */
int ts_report_extra_get(const ts_report *report,
                        const ts_report_extra_def *extra, double *value);
void ts_report_extra_set(ts_report *report, const ts_report_extra_def *extra,
                         double value);

typedef enum ts_release_status {
    TS_RELEASE_OK = 0,
    TS_RELEASE_EXHAUSTED = 1,   /* not enough budget left; nothing released */
    /* The true point lies outside the region the profile's model covers
     * and the profile is configured to refuse such points
     * (delta-location-set mechanisms, outside_region = "reject"): refused
     * before any state changes, rejected as outside_region. */
    TS_RELEASE_OUTSIDE_REGION = 2,
    /* Delta-location-set mechanisms: the belief's certified mass (what
     * pruning left of the exact prior, inference/belief.h) is below
     * 1 - delta, so no delta-location set can be guaranteed. A function of
     * public data only; nothing released, no state changed. */
    TS_RELEASE_UNCERTIFIED = 3,
    /* The point follows the user's previous one by less than the profile's
     * smallest interval, or so closely that the mechanism's guarantee,
     * computed from the public timestamps, cannot cover it (cip-gp). A
     * function of the timestamps only; nothing released, no state
     * changed. */
    TS_RELEASE_TOO_FAST = 4,
    TS_RELEASE_ERROR = -1       /* internal failure; caller drops the point */
} ts_release_status;

/* Spending more than `total` by floating-point rounding alone is tolerated up
 * to this relative slack; anything more is refused. */
#define TS_BUDGET_RELATIVE_SLACK 1e-9

typedef struct ts_mechanism_ops {
    const char *name;
    const char *summary;         /* one line for --help and docs */

    /* The parameter rows (ts_mechanism_parse_params fills them). */
    const ts_param_spec *params;
    size_t n_params;

    /* Parse and validate parameters into an immutable profile context. On
     * failure returns -1 and writes "KEY: message", KEY being the row the
     * error is about (ts_mechanism_error_key finds it). */
    int (*profile_new)(const ts_params *params, void **profile, char *err,
                       size_t errlen);
    void (*profile_free)(void *profile);

    /* Total budget per window for this profile, in the mechanism's unit. */
    double (*window_budget)(const void *profile);

    /* Size of the per-user state block; the caller zero-fills it on a new
     * user, and on a new window unless window_opens is set. May be 0. */
    size_t (*user_state_size)(const void *profile);

    /* Optional: a user's next budget window opens under the same profile,
     * and `user_state` holds what the previous window left. The mechanism
     * keeps what it may and clears the rest; a block it zero-fills is a
     * new user's. Only a state that is a function of published data may
     * be kept: the window caps spending, and what the outputs already
     * told nobody can take back. NULL: the caller zero-fills. */
    void (*window_opens)(const void *profile, void *user_state);

    /* Release one point. Must not write anything derived from `truth` into
     * `user_state` except what is also published (the state is persisted). */
    ts_release_status (*release)(const void *profile, void *user_state,
                                 const ts_point *truth,
                                 const ts_budget_view *budget, ts_rng *rng,
                                 ts_report *out);

    /* Optional, for evaluation (tracesan eval, never the daemon): for a
     * mechanism whose state follows public data only, replay one
     * PUBLISHED release on an observer's zero-filled copy of the user's
     * state, exactly as the release updated its own. With truth, *drifted
     * says whether the release had to use a surrogate. drifted and
     * public_set_size may be NULL. 0, or -1 on invalid input (state
     * unchanged). NULL when the mechanism has nothing to replay. */
    int (*replay)(const void *profile, void *user_state,
                  const ts_point *published, const ts_point *truth,
                  int *drifted, unsigned *public_set_size);

    /* Optional, for memory figures: the leading bytes of user_state that
     * carry information (the rest is zero). NULL = all of it. */
    size_t (*state_live_bytes)(const void *profile, const void *user_state);

    /* Optional (mechanisms/population.h): the mechanism's reports are the
     * cells of a grid drawn through a public channel, so the caller can
     * estimate the population's distribution from them and, for an
     * adaptive mechanism, rebuild the channel from that estimate. */
    const struct ts_population_ops *population;
} ts_mechanism_ops;

/* Fills `profile` (the mechanism's own struct) from src by the ops'
 * rows: defaults first, then each key present, models last. Every error is
 * worded the same way, "KEY: must be ...". With src->key_at, a key no row
 * names is refused: "KEY: not a parameter of mechanism NAME". */
int ts_mechanism_parse_params(const ts_mechanism_ops *ops,
                              const ts_params *src, void *profile, char *err,
                              size_t errlen);
const ts_param_spec *ts_mechanism_param_find(const ts_mechanism_ops *ops,
                                             const char *key);
/* The row an error from profile_new is about, or NULL for one about the
 * whole profile. */
const ts_param_spec *ts_mechanism_error_key(const ts_mechanism_ops *ops,
                                            const char *err);
/* The parameters as text, one row per line ("  radius_m  number > 0,
 * default 100.0: protection radius ..."), for --help. */
void ts_mechanism_param_help(const ts_mechanism_ops *ops, char *buf,
                             size_t len);

/* A NULL-terminated list of choices as an error or help text puts it:
 * "\"a\"", "\"a\" or \"b\"", "\"a\", \"b\" or \"c\"". */
void ts_choices_text(const char *const *choices, char *buf, size_t len);

/* Parses "LAT_MIN,LON_MIN,LAT_MAX,LON_MAX" (TS_PARAM_BOX's form) into
 * box; 0, or -1 when it is not four finite numbers of a valid region. */
int ts_parse_box(const char *text, double box[4]);

/* `.params` and `.n_params` of an ops table from a static array of rows. */
#define TS_PARAM_ROWS(rows) \
    .params = (rows), .n_params = sizeof(rows) / sizeof((rows)[0])

/* The registry (mechanisms/mechanism_registry.c). NULL when no mechanism
 * has that name. */
const ts_mechanism_ops *ts_mechanism_find(const char *name);

/* NULL-terminated list of all registered mechanisms. */
const ts_mechanism_ops *const *ts_mechanism_all(void);

/* 1 when spending `amount` keeps the window within budget. */
int ts_budget_allows(const ts_budget_view *budget, double amount);

#endif

#include "ops/reload.h"

#include "ops/population_loop.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/config.h"
#include "engine/log.h"
#include "engine/pipeline_reload.h"
#include "ops/catalog.h"

#define ERR_MAX 512

static void warn_restart_only(const char *key, void *arg)
{
    (void)arg;
    ts_log(TS_LOG_WARN, "reload: %s changed; it takes effect only after a "
           "restart", key);
}

static const char *on_exhausted_name(ts_on_exhausted policy)
{
    return policy == TS_ON_EXHAUSTED_REPEAT ? "repeat" : "drop";
}

/* Called before the swap; the names and order already match or the swap
 * will refuse them. */
/* What the reload log compares: a profile's ledger settings, copied
 * before the pipeline's profiles are replaced (and freed). */
typedef struct profile_summary {
    char name[128];
    double window_budget;
    int64_t window_ms;
    ts_on_exhausted on_exhausted;
} profile_summary;

static profile_summary *summarize_profiles(const ts_pipeline *pipeline,
                                           size_t *n)
{
    *n = ts_pipeline_profile_count(pipeline);
    profile_summary *summary = calloc(*n != 0 ? *n : 1, sizeof *summary);
    if (summary == NULL)
        return NULL;
    for (size_t i = 0; i < *n; i++) {
        const ts_profile *p = ts_pipeline_profile_at(pipeline, i);
        snprintf(summary[i].name, sizeof summary[i].name, "%s", p->name);
        summary[i].window_budget = p->window_budget;
        summary[i].window_ms = p->window_ms;
        summary[i].on_exhausted = p->on_exhausted;
    }
    return summary;
}

/* Called only once the new profiles are in place, and matched by name:
 * a refused reload logs nothing as changed (issue 10, item 16). */
static void log_profile_changes(const profile_summary *before, size_t n_before,
                                const ts_pipeline *pipeline)
{
    for (size_t i = 0; i < ts_pipeline_profile_count(pipeline); i++) {
        const ts_profile *new = ts_pipeline_profile_at(pipeline, i);
        const profile_summary *old = NULL;
        for (size_t j = 0; j < n_before && old == NULL; j++)
            if (strcmp(before[j].name, new->name) == 0)
                old = &before[j];
        if (old != NULL && old->window_budget != new->window_budget)
            ts_log(TS_LOG_INFO, "reload: profile '%s' window budget %.9g -> "
                   "%.9g", new->name, old->window_budget,
                   new->window_budget);
        if (old != NULL && old->window_ms != new->window_ms)
            ts_log(TS_LOG_INFO, "reload: profile '%s' budget_window_s %lld -> "
                   "%lld (from each user's next window)", new->name,
                   (long long)(old->window_ms / 1000),
                   (long long)(new->window_ms / 1000));
        if (old != NULL && old->on_exhausted != new->on_exhausted)
            ts_log(TS_LOG_INFO, "reload: profile '%s' on_exhausted %s -> %s",
                   new->name, on_exhausted_name(old->on_exhausted),
                   on_exhausted_name(new->on_exhausted));
        /* Mechanism parameters are opaque here, so every profile is
         * reported as reloaded with its resulting ledger settings. */
        ts_log(TS_LOG_INFO, "reload: profile '%s' parameters reloaded "
               "(mechanism %s, window budget %.9g, budget_window_s %lld, "
               "on_exhausted %s)", new->name, new->ops->name,
               new->window_budget, (long long)(new->window_ms / 1000),
               on_exhausted_name(new->on_exhausted));
    }
}

static int refuse(const ts_reload_target *t, const char *err)
{
    ts_log(TS_LOG_ERROR, "reload refused, keeping the running "
           "configuration: %s", err);
    if (t->metrics != NULL)
        ts_metrics_count_reload(t->metrics, 0);
    return -1;
}

int ts_reload(const ts_reload_target *t)
{
    char err[ERR_MAX];
    ts_log(TS_LOG_INFO, "received SIGHUP, reloading %s",
           t->config_path != NULL ? t->config_path : "(built-in defaults)");
    ts_config *fresh = ts_config_load(t->config_path, t->overrides,
                                      t->n_overrides, err, sizeof err);
    if (fresh == NULL)
        return refuse(t, err);
    ts_profile *profiles = NULL;
    size_t n_profiles = 0;
    size_t default_index = 0;
    if (ts_config_share_profiles(fresh, &profiles, &n_profiles,
                                 &default_index, err, sizeof err) != 0) {
        ts_config_free(fresh);
        return refuse(t, err);
    }
    /* NULL only when out of memory: the reload then goes on unlogged. */
    size_t n_before = 0;
    profile_summary *before = summarize_profiles(t->pipeline, &n_before);
    ts_population_set_detach(t->population);
    int replaced = ts_pipeline_replace_profiles(t->pipeline, profiles,
                                                n_profiles, default_index,
                                                err, sizeof err);
    char population_err[ERR_MAX];
    if (ts_population_set_attach(t->population, population_err,
                                 sizeof population_err) != 0)
        ts_log(TS_LOG_ERROR, "reload: %s", population_err);
    if (replaced != 0) {
        free(before);
        ts_config_free(fresh);
        return refuse(t, err);
    }
    if (before != NULL)
        log_profile_changes(before, n_before, t->pipeline);
    free(before);
    /* The pipeline shares fresh's mechanisms now: the daemon keeps it for
     * as long, and lets go of the one it replaced. */
    ts_config_free(*t->profiles_config);
    *t->profiles_config = fresh;
    ts_config_restart_changes(t->running, fresh, warn_restart_only, NULL);
    int level = ts_config_settings(fresh)->log_level;
    if (t->driver_ops->adopt_config(t->driver, fresh, err, sizeof err) !=
        0) {
        ts_log(TS_LOG_ERROR, "reload: %s", err);
        if (t->metrics != NULL)
            ts_metrics_count_reload(t->metrics, 0);
        return -1;
    }
    if (level != (int)ts_log_get_level()) {
        ts_log(TS_LOG_INFO, "reload: log level changed");
        ts_log_init(t->program_name, (ts_log_level)level,
                    ts_config_settings(t->running)->log_syslog);
    }
    if (t->metrics != NULL)
        ts_metrics_count_reload(t->metrics, 1);
    ts_log_always("reload complete");
    return 0;
}

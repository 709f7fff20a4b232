#include "datapath/driver.h"

void ts_driver_stats_add_pipeline(ts_driver_stats *stats,
                                  const ts_pipeline *pipeline)
{
    const ts_pipeline_stats *s = ts_pipeline_get_stats(pipeline);
    ts_pipeline_stats *total = &stats->pipeline;
    total->updates += s->updates;
    total->sanitized += s->sanitized;
    total->repeated += s->repeated;
    for (int r = 0; r < TS_REASON_COUNT; r++)
        total->rejected[r] += s->rejected[r];
    total->users_created += s->users_created;
    total->users_expired += s->users_expired;
    total->budget_exhaustions += s->budget_exhaustions;
    stats->users += ts_pipeline_user_count(pipeline);
}

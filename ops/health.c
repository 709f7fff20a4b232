#include "ops/health.h"

#include <stdio.h>

#define HEALTH_REASON_MAX 256

static struct {
    int unhealthy;
    char reason[HEALTH_REASON_MAX];
} health;

void ts_metrics_set_unhealthy(const char *reason)
{
    if (health.unhealthy)
        return;
    health.unhealthy = 1;
    snprintf(health.reason, sizeof health.reason, "%s",
             reason != NULL && reason[0] != '\0' ? reason : "unhealthy");
}

void ts_metrics_set_healthy(void)
{
    health.unhealthy = 0;
    health.reason[0] = '\0';
}

int ts_metrics_healthy(char *reason, size_t size)
{
    if (!health.unhealthy) {
        if (reason != NULL && size > 0)
            reason[0] = '\0';
        return 1;
    }
    if (reason != NULL && size > 0)
        snprintf(reason, size, "%s", health.reason);
    return 0;
}


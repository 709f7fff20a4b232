#include "drivers/jetstream/sub_graveyard.h"

#include <stdlib.h>
#include <time.h>

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void ts_sub_graveyard_init(ts_sub_graveyard *g)
{
    pthread_mutex_init(&g->lock, NULL);
    g->graves = NULL;
    g->n = g->cap = 0;
}

void ts_sub_graveyard_bury(ts_sub_graveyard *g, natsSubscription *sub)
{
    if (sub == NULL)
        return;
    natsSubscription_Unsubscribe(sub);
    if (g != NULL) {
        pthread_mutex_lock(&g->lock);
        if (g->n == g->cap) {
            size_t cap = g->cap > 0 ? g->cap * 2 : 16;
            ts_sub_grave *bigger = realloc(g->graves, cap * sizeof *bigger);
            if (bigger != NULL) {
                g->graves = bigger;
                g->cap = cap;
            }
        }
        int kept = g->n < g->cap;
        if (kept)
            g->graves[g->n++] = (ts_sub_grave){ sub, mono_ms() };
        pthread_mutex_unlock(&g->lock);
        if (kept)
            return;
    }
    natsSubscription_Destroy(sub);
}

void ts_sub_graveyard_sweep(ts_sub_graveyard *g, int64_t age_ms)
{
    int64_t now_ms = mono_ms();
    pthread_mutex_lock(&g->lock);
    size_t kept = 0;
    for (size_t i = 0; i < g->n; i++) {
        if (now_ms - g->graves[i].buried_ms >= age_ms)
            natsSubscription_Destroy(g->graves[i].sub);
        else
            g->graves[kept++] = g->graves[i];
    }
    g->n = kept;
    pthread_mutex_unlock(&g->lock);
}

void ts_sub_graveyard_free(ts_sub_graveyard *g)
{
    for (size_t i = 0; i < g->n; i++)
        natsSubscription_Destroy(g->graves[i].sub);
    free(g->graves);
    g->graves = NULL;
    g->n = g->cap = 0;
    pthread_mutex_destroy(&g->lock);
}

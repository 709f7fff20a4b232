#include "drivers/jetstream/partition_lease.h"

#include <string.h>

void ts_lease_observe(ts_lease_view *view, uint64_t revision,
                      const char *owner, size_t owner_len, int64_t now_ms)
{
    if (revision != view->revision || view->seen_ms == 0) {
        view->revision = revision;
        view->seen_ms = now_ms;
    }
    if (owner_len >= sizeof view->owner)
        owner_len = sizeof view->owner - 1;
    memcpy(view->owner, owner != NULL ? owner : "", owner != NULL ? owner_len : 0);
    view->owner[owner != NULL ? owner_len : 0] = '\0';
}

int ts_lease_is_free(const ts_lease_view *view)
{
    return view->revision == 0 || view->owner[0] == '\0' ||
           strcmp(view->owner, TS_LEASE_FREE) == 0;
}

int ts_lease_is_expired(const ts_lease_view *view, int64_t now_ms,
                        int64_t ttl_ms)
{
    return !ts_lease_is_free(view) && now_ms - view->seen_ms >= ttl_ms;
}

int ts_lease_takeable(const ts_lease_view *view, const char *self,
                      int64_t now_ms, int64_t ttl_ms)
{
    if (ts_lease_is_free(view))
        return 1;
    /* Our own lease from before a restart: the process that wrote it may
     * still be running under the same id, so it ages like any other. */
    (void)self;
    return ts_lease_is_expired(view, now_ms, ttl_ms);
}

int64_t ts_lease_deadline(int64_t sent_ms, int64_t ttl_ms)
{
    return sent_ms + ttl_ms - ttl_ms / 8;
}

int64_t ts_lease_renew_interval(int64_t ttl_ms)
{
    int64_t every = ttl_ms / 8;
    return every > 0 ? every : 1;
}

size_t ts_lease_fair_share(size_t partitions, size_t live)
{
    if (live == 0)
        live = 1;
    return (partitions + live - 1) / live;
}

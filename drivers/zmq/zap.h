/* ZAP (ZeroMQ authentication protocol, RFC 27) handler for CURVE.
 *
 * libzmq asks the REP socket bound at inproc://zeromq.zap.01 in the same
 * context about every CURVE handshake. The handler is served from the
 * daemon's libevent loop like the input socket, so it needs no thread and
 * no locking. Sockets name their side with ZMQ_ZAP_DOMAIN (TS_ZAP_DOMAIN_*);
 * input clients must be on the input allow-list, output clients on the
 * output allow-list when there is one. Anything else (unknown domain,
 * mechanism other than CURVE, malformed request) is denied.
 */
#ifndef TRACESAN_DRIVERS_ZMQ_ZAP_H
#define TRACESAN_DRIVERS_ZMQ_ZAP_H

#include <stddef.h>
#include <stdint.h>

#include "drivers/zmq/curve_keys.h"

struct event_base;

#define TS_ZAP_DOMAIN_INPUT "tracesan.input"
#define TS_ZAP_DOMAIN_OUTPUT "tracesan.output"

typedef struct ts_zap ts_zap;

typedef struct ts_zap_counters {
    uint64_t accepted;
    uint64_t denied;
} ts_zap_counters;

/* Binds the handler in `context`; must run before any CURVE server socket
 * binds, or early handshakes would find no handler. output_allow NULL lets
 * every CURVE client subscribe. The lists are copied. NULL with err filled
 * on failure. */
ts_zap *ts_zap_start(void *context, struct event_base *base,
                     const ts_curve_allow_list *input_allow,
                     const ts_curve_allow_list *output_allow, char *err,
                     size_t errlen);
ts_zap_counters ts_zap_get_counters(const ts_zap *zap);
/* Swaps in new allow-lists (copied; same meaning as for ts_zap_start) for
 * the handshakes that follow: established connections are not re-vetted.
 * 0, or -1 with err filled and the old lists kept. */
int ts_zap_replace_allow_lists(ts_zap *zap,
                               const ts_curve_allow_list *input_allow,
                               const ts_curve_allow_list *output_allow,
                               char *err, size_t errlen);
/* Closes the socket (before zmq_ctx_term) and frees the handler. */
void ts_zap_stop(ts_zap *zap);

#endif

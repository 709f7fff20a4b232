/* TLS for the MQTT client (drivers/mqtt/mqtt_client.h), through OpenSSL:
 * the context (TLS 1.2 or later, the broker's certificate checked against
 * mqtt.tls_ca_file or the system's CAs, a client certificate when given),
 * a session that checks the URL's host name or IP address, and the words
 * for a failed handshake that say what to fix. */
#ifndef TRACESAN_DRIVERS_MQTT_MQTT_TLS_H
#define TRACESAN_DRIVERS_MQTT_MQTT_TLS_H

#include <stddef.h>

#include <openssl/ssl.h>

struct bufferevent;

/* ca_file NULL: the system's CAs; cert_file and key_file go together
 * (NULL: no client certificate). NULL with err naming the file. */
SSL_CTX *ts_mqtt_tls_context(const char *ca_file, const char *cert_file,
                             const char *key_file, char *err, size_t errlen);
/* A session whose peer must carry `host` (a name, also sent as SNI, or an
 * address). NULL when memory ran out. */
SSL *ts_mqtt_tls_session(SSL_CTX *context, const char *host);
/* Why the TLS connection of `bev` (NULL: none) failed. */
void ts_mqtt_tls_failure(struct bufferevent *bev, char *buf, size_t len);

#endif

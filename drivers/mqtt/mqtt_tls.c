#include "drivers/mqtt/mqtt_tls.h"

#include <arpa/inet.h>
#include <stdio.h>

#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>

#define ERR_MAX 512

static void openssl_errors(char *buf, size_t len)
{
    unsigned long e;
    size_t used = 0;
    buf[0] = '\0';
    while ((e = ERR_get_error()) != 0 && used + 2 < len) {
        char one[256];
        ERR_error_string_n(e, one, sizeof one);
        used += (size_t)snprintf(buf + used, len - used, "%s%s",
                                 used > 0 ? "; " : "", one);
    }
}

SSL_CTX *ts_mqtt_tls_context(const char *ca_file, const char *cert_file,
                             const char *key_file, char *err, size_t errlen)
{
    SSL_CTX *tls = SSL_CTX_new(TLS_client_method());
    if (tls == NULL) {
        snprintf(err, errlen, "cannot create a TLS context");
        return NULL;
    }
    SSL_CTX_set_min_proto_version(tls, TLS1_2_VERSION);
    SSL_CTX_set_verify(tls, SSL_VERIFY_PEER, NULL);
    char why[ERR_MAX];
    if (ca_file != NULL) {
        if (SSL_CTX_load_verify_locations(tls, ca_file, NULL) != 1) {
            openssl_errors(why, sizeof why);
            snprintf(err, errlen, "mqtt.tls_ca_file %s: %s", ca_file, why);
            SSL_CTX_free(tls);
            return NULL;
        }
    } else if (SSL_CTX_set_default_verify_paths(tls) != 1) {
        snprintf(err, errlen, "cannot load the system's CA certificates");
        SSL_CTX_free(tls);
        return NULL;
    }
    if (cert_file != NULL) {
        if (SSL_CTX_use_certificate_chain_file(tls, cert_file) != 1) {
            openssl_errors(why, sizeof why);
            snprintf(err, errlen, "mqtt.tls_cert_file %s: %s", cert_file,
                     why);
            SSL_CTX_free(tls);
            return NULL;
        }
        if (SSL_CTX_use_PrivateKey_file(tls, key_file, SSL_FILETYPE_PEM) !=
                1 ||
            SSL_CTX_check_private_key(tls) != 1) {
            openssl_errors(why, sizeof why);
            snprintf(err, errlen, "mqtt.tls_key_file %s: %s", key_file,
                     why);
            SSL_CTX_free(tls);
            return NULL;
        }
    }
    return tls;
}

SSL *ts_mqtt_tls_session(SSL_CTX *context, const char *host)
{
    SSL *ssl = SSL_new(context);
    if (ssl == NULL)
        return NULL;
    /* The name (or address) the certificate must carry, and SNI for a
     * name. */
    unsigned char address[16];
    int is_ip = inet_pton(AF_INET, host, address) == 1 ||
                inet_pton(AF_INET6, host, address) == 1;
    if (is_ip) {
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host);
    } else {
        SSL_set_tlsext_host_name(ssl, host);
        SSL_set1_host(ssl, host);
    }
    return ssl;
}

void ts_mqtt_tls_failure(struct bufferevent *bev, char *buf, size_t len)
{
    SSL *ssl = bev != NULL ? bufferevent_openssl_get_ssl(bev) : NULL;
    long verify = ssl != NULL ? SSL_get_verify_result(ssl) : X509_V_OK;
    char errors[ERR_MAX] = "";
    unsigned long e;
    size_t used = 0;
    while (bev != NULL && (e = bufferevent_get_openssl_error(bev)) != 0 &&
           used + 2 < sizeof errors) {
        char one[256];
        ERR_error_string_n(e, one, sizeof one);
        used += (size_t)snprintf(errors + used, sizeof errors - used, "%s%s",
                                 used > 0 ? "; " : "", one);
    }
    if (verify != X509_V_OK)
        snprintf(buf, len, "TLS: the server's certificate is not trusted: "
                 "%s (check mqtt.tls_ca_file)",
                 X509_verify_cert_error_string(verify));
    else if (errors[0] != '\0')
        snprintf(buf, len, "TLS handshake failed: %s", errors);
    else
        snprintf(buf, len, "TLS handshake failed: the server closed the "
                 "connection (does it require a client certificate? "
                 "mqtt.tls_cert_file)");
}

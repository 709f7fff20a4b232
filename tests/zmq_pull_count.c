/* Test helper: a PULL consumer for tracesand's `output.type = "push"`, or
 * with --sub a SUB subscribed to everything on the default PUB output.
 *   zmq_pull_count --connect ENDPOINT --count N [--timeout S] [--delay-us U]
 *                  [--sub] [--rcvhwm M] [--start-delay-ms D]
 * Receives messages until N have arrived or S seconds (default 10) pass
 * without one, prints how many arrived, and exits 0 when that is N.
 * --delay-us U sleeps U microseconds after each message: a slow consumer
 * taking at most 1e6 / U messages per second (load tests). --rcvhwm M and
 * a small kernel receive buffer, with --start-delay-ms D before the first
 * read, make a subscriber that falls behind at once (hostile tests). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

int main(int argc, char **argv)
{
    const char *endpoint = NULL;
    long want = -1;
    double timeout_s = 10.0;
    long delay_us = 0;
    int use_sub = 0;
    int rcvhwm = -1;
    long start_delay_ms = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--sub") == 0) {
            use_sub = 1;
            continue;
        }
        if (i + 1 >= argc)
            break;
        if (strcmp(argv[i], "--rcvhwm") == 0)
            rcvhwm = (int)strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--start-delay-ms") == 0)
            start_delay_ms = strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--connect") == 0)
            endpoint = argv[++i];
        else if (strcmp(argv[i], "--count") == 0)
            want = strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--timeout") == 0)
            timeout_s = strtod(argv[++i], NULL);
        else if (strcmp(argv[i], "--delay-us") == 0)
            delay_us = strtol(argv[++i], NULL, 10);
        else
            i++;
    }
    if (endpoint == NULL || want < 0) {
        fprintf(stderr, "usage: zmq_pull_count --connect ENDPOINT --count N "
                "[--timeout S]\n");
        return 2;
    }
    void *context = zmq_ctx_new();
    void *socket = zmq_socket(context, use_sub ? ZMQ_SUB : ZMQ_PULL);
    if (use_sub)
        zmq_setsockopt(socket, ZMQ_SUBSCRIBE, "", 0);
    if (rcvhwm >= 0) {
        int rcvbuf = 4096;
        zmq_setsockopt(socket, ZMQ_RCVHWM, &rcvhwm, sizeof rcvhwm);
        zmq_setsockopt(socket, ZMQ_RCVBUF, &rcvbuf, sizeof rcvbuf);
    }
    int timeout_ms = (int)(timeout_s * 1000.0);
    int linger = 0;
    zmq_setsockopt(socket, ZMQ_RCVTIMEO, &timeout_ms, sizeof timeout_ms);
    zmq_setsockopt(socket, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_connect(socket, endpoint) != 0) {
        fprintf(stderr, "zmq_pull_count: cannot connect %s: %s\n", endpoint,
                zmq_strerror(zmq_errno()));
        return 2;
    }
    if (start_delay_ms > 0)
        usleep((useconds_t)start_delay_ms * 1000);
    long received = 0;
    zmq_msg_t frame;
    zmq_msg_init(&frame);
    while (received < want) {
        if (zmq_msg_recv(&frame, socket, 0) < 0)
            break;
        while (zmq_msg_more(&frame) && zmq_msg_recv(&frame, socket, 0) >= 0) {
        }
        received++;
        if (delay_us > 0)
            usleep((useconds_t)delay_us);
    }
    zmq_msg_close(&frame);
    printf("%ld\n", received);
    zmq_close(socket);
    zmq_ctx_term(context);
    return received == want ? 0 : 1;
}

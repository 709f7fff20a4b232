/* Test helper: plays systemd's side of sd_notify. Binds a unix datagram
 * socket at PATH and prints every notification it receives, one datagram
 * per line group, flushing each, until a datagram contains STOPPING=1 or
 * SECONDS (default 60) pass without one.
 *
 * usage: notify_listen PATH [SECONDS]
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: notify_listen PATH [SECONDS]\n");
        return 2;
    }
    const char *path = argv[1];
    int seconds = argc == 3 ? atoi(argv[2]) : 60;
    struct sockaddr_un address = { .sun_family = AF_UNIX };
    if (strlen(path) >= sizeof address.sun_path) {
        fprintf(stderr, "notify_listen: path too long\n");
        return 2;
    }
    strcpy(address.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&address, sizeof address) != 0) {
        fprintf(stderr, "notify_listen: %s: %s\n", path, strerror(errno));
        return 1;
    }
    char buffer[4096];
    for (;;) {
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        int ready = poll(&pfd, 1, seconds * 1000);
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready <= 0) {
            fprintf(stderr, "notify_listen: no STOPPING=1 within %d s\n",
                    seconds);
            break;
        }
        ssize_t n = recv(fd, buffer, sizeof buffer - 1, 0);
        if (n < 0)
            continue;
        buffer[n] = '\0';
        printf("%s\n", buffer);
        fflush(stdout);
        if (strstr(buffer, "STOPPING=1") != NULL) {
            close(fd);
            unlink(path);
            return 0;
        }
    }
    close(fd);
    unlink(path);
    return 1;
}

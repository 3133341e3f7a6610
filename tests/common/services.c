#include "common/services.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

int la_test_free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t n = sizeof a;
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &n), 0);
    close(fd);
    return ntohs(a.sin_port);
}

char *la_test_redis_cli(int port, const char *args) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "redis-cli -h 127.0.0.1 -p %d %s 2>/dev/null", port, args);
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    char *out = calloc(1, 65536);
    size_t n = out ? fread(out, 1, 65535, p) : 0;
    (void)n;
    pclose(p);
    return out;
}

pid_t la_test_redis_start(int port, const char *extra, const char *logfile) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "exec redis-server --port %d --bind 127.0.0.1 --save '' --appendonly no %s",
             port, extra ? extra : "");
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        int fd = open(logfile ? logfile : "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 200; i++) {
        /* PING (answered PONG, or NOAUTH when a password is set: either way it is up) */
        char *out = la_test_redis_cli(port, "PING");
        bool up = out && (strstr(out, "PONG") || strstr(out, "NOAUTH"));
        free(out);
        if (up) return pid;
        int st;
        cr_assert_eq(waitpid(pid, &st, WNOHANG), 0, "redis-server exited at start (is it installed?)");
        usleep(50000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    cr_assert_fail("redis-server on port %d did not answer within 10 s", port);
    return -1;
}

void la_test_proc_stop(pid_t pid, int hard) {
    if (pid <= 0) return;
    kill(pid, hard ? SIGKILL : SIGTERM);
    waitpid(pid, NULL, 0);
}

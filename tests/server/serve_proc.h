/* Run `lazyattn serve` as a child process on a free loopback port (--port 0) for the CLI
 * and end-to-end tests: start it, learn its port from the "listening on" line, stop it
 * with a signal and collect its exit status. Header-only, no Criterion (returns -1 on
 * failure and leaves the child's stderr in p->log). */
#ifndef LA_TESTS_SERVER_SERVE_PROC_H
#define LA_TESTS_SERVER_SERVE_PROC_H

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef LA_BUILD_DIR
#define LA_BUILD_DIR "build"
#endif

typedef struct la_serve_proc {
    pid_t pid;
    int port;
    int err_fd;      /* read end of the child's stderr */
    char log[16384]; /* what the child wrote on stderr so far */
    size_t log_len;
} la_serve_proc;

static inline double la_serve_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Read what stderr has, waiting at most timeout_ms; 0 at EOF, 1 if something came, -1 on
 * timeout. */
static inline int la_serve_drain(la_serve_proc *p, int timeout_ms) {
    struct pollfd pfd = {.fd = p->err_fd, .events = POLLIN};
    if (poll(&pfd, 1, timeout_ms) <= 0) return -1;
    char tmp[4096];
    ssize_t k = read(p->err_fd, tmp, sizeof tmp);
    if (k <= 0) return 0;
    size_t room = sizeof p->log - 1 - p->log_len;
    size_t n = (size_t)k < room ? (size_t)k : room;
    memcpy(p->log + p->log_len, tmp, n);
    p->log_len += n;
    p->log[p->log_len] = '\0';
    return 1;
}

/* Start `bin serve --port 0 <args...>` (args NULL-terminated) and wait (up to 120 s) for it
 * to listen. 0 on success. */
static inline int la_serve_start_bin(la_serve_proc *p, const char *bin, const char *const *args) {
    memset(p, 0, sizeof *p);
    int fds[2];
    if (pipe(fds) != 0) return -1;
    const char *argv[64];
    int n = 0;
    argv[n++] = bin;
    argv[n++] = "serve";
    argv[n++] = "--port";
    argv[n++] = "0";
    for (int i = 0; args && args[i] && n < 63; i++) argv[n++] = args[i];
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    p->pid = pid;
    p->err_fd = fds[0];
    double deadline = la_serve_now_s() + 120;
    while (la_serve_now_s() < deadline) {
        const char *at = strstr(p->log, "listening on http://");
        size_t pre = strlen("listening on http://");
        if (!at && (at = strstr(p->log, "listening on https://"))) pre++;
        if (at && strchr(at, '\n')) {
            const char *colon = strchr(at + pre, ':');
            if (at[pre] == '[') colon = strstr(at, "]:") + 1;
            p->port = colon ? atoi(colon + 1) : 0;
            return p->port > 0 ? 0 : -1;
        }
        if (la_serve_drain(p, 200) == 0) break; /* exited */
    }
    return -1;
}

/* la_serve_start_bin with LA_BUILD_DIR/lazyattn. */
static inline int la_serve_start(la_serve_proc *p, const char *const *args) {
    return la_serve_start_bin(p, LA_BUILD_DIR "/lazyattn", args);
}

/* Send sig and wait (up to timeout_s) for the child; returns its exit status, 128+signal
 * when a signal ended it, or -1 if it did not exit (it is then killed). */
static inline int la_serve_stop(la_serve_proc *p, int sig, int timeout_s) {
    if (p->pid <= 0) return -1;
    if (sig) kill(p->pid, sig);
    double deadline = la_serve_now_s() + timeout_s;
    int status = 0;
    for (;;) {
        pid_t w = waitpid(p->pid, &status, WNOHANG);
        if (w == p->pid) break;
        if (la_serve_now_s() > deadline) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, &status, 0);
            p->pid = 0;
            return -1;
        }
        la_serve_drain(p, 20);
    }
    while (la_serve_drain(p, 100) == 1) {
    }
    close(p->err_fd);
    p->pid = 0;
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return -1;
}

/* Run `lazyattn serve <args>` expecting it to exit by itself (bad options); returns its
 * exit status and leaves stderr in p->log. */
static inline int la_serve_run_to_exit(la_serve_proc *p, const char *const *args) {
    int rc = la_serve_start(p, args);
    if (rc == 0) return la_serve_stop(p, SIGTERM, 30) == 0 ? -2 : -1; /* it listened: wrong */
    return la_serve_stop(p, 0, 60);
}

#endif

/* Per-connection state, parking of waiting requests and the watcher thread (conn.h). */
#include "server/conn.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/err.h"
#include "base/timer.h"
#include "server/server_internal.h"

/* How often the watcher looks at the connections. */
#define WATCH_TICK_MS 250

/* The probe of a non-streamed HTTP/1.1 request whose client sent EOF (conn.h). */
static const char k_continue[] = "HTTP/1.1 100 Continue\r\n\r\n";

/* Caller holds conn_mu. */
static void resume_locked(la_conn *cc) {
    if (cc->suspended) {
        cc->suspended = false;
        MHD_resume_connection(cc->mhd);
    } else {
        cc->woken = true;
    }
}

/* A parked request that asked for hang-ups (conn.h): has its client left? Caller holds
 * conn_mu. */
static void check_hangup(la_server *s, la_conn *cc) {
    struct pollfd p = {.fd = cc->fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return;
    bool reset = (p.revents & (POLLHUP | POLLERR | POLLNVAL)) != 0;
    if (!reset && (!(p.revents & POLLRDHUP) || cc->probed)) return;
    if (!reset) { /* read EOF: left, or half-closed? write and see */
        cc->probed = true;
        if (cc->stream) {
            cc->probe_wanted = true;
        } else if (!s->tls_cert && cc->http11) {
            ssize_t n = send(cc->fd, k_continue, sizeof k_continue - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
            reset = n != (ssize_t)(sizeof k_continue - 1);
        } else {
            reset = true; /* nothing may be written before the answer */
        }
    }
    if (reset) {
        cc->gone = true;
        if (s->opts.log_requests)
            fprintf(stderr, "lazyattn serve: client of request [%s] left: cancelling it\n", cc->chosen);
    }
    resume_locked(cc);
}

static void *watch_main(void *arg) {
    la_server *s = arg;
    pthread_mutex_lock(&s->conn_mu);
    while (!s->watch_stop) {
        struct timespec ts = la_deadline_after_ms(WATCH_TICK_MS);
        pthread_cond_timedwait(&s->watch_cv, &s->conn_mu, &ts);
        double now = la_now_ms(), limit_ms = 1000.0 * s->opts.idle_timeout_s;
        for (la_conn *cc = s->conns; cc && !s->watch_stop; cc = cc->next) {
            if (cc->fd < 0) continue;
            if (limit_ms > 0 && cc->phase != LA_CONN_ANSWER && !cc->reaped && now - cc->since_ms > limit_ms) {
                /* libmicrohttpd then reads EOF and closes it; the fd stays its own */
                shutdown(cc->fd, SHUT_RDWR);
                cc->reaped = true;
                if (s->opts.log_requests && cc->phase == LA_CONN_BODY)
                    fprintf(stderr, "lazyattn serve: closing a connection whose request body did not arrive "
                                    "within %u s\n", s->opts.idle_timeout_s);
                continue;
            }
            if (cc->suspended && cc->watch && !cc->gone) check_hangup(s, cc);
        }
    }
    pthread_mutex_unlock(&s->conn_mu);
    return NULL;
}

la_status la_conns_start(la_server *s, la_err *err) {
    if (pthread_create(&s->watch_thread, NULL, watch_main, s) != 0)
        return la_err_set(err, LA_ERR_NO_MEMORY, "server: cannot start the connection watcher thread");
    s->watch_started = true;
    return LA_OK;
}

void la_conns_release(la_server *s) {
    pthread_mutex_lock(&s->conn_mu);
    s->closing = true;
    for (la_conn *cc = s->conns; cc; cc = cc->next)
        if (cc->suspended) {
            cc->gone = true;
            resume_locked(cc);
        }
    pthread_mutex_unlock(&s->conn_mu);
}

void la_conns_stop(la_server *s) {
    if (!s->watch_started) return;
    pthread_mutex_lock(&s->conn_mu);
    s->watch_stop = true;
    pthread_cond_broadcast(&s->watch_cv);
    pthread_mutex_unlock(&s->conn_mu);
    pthread_join(s->watch_thread, NULL);
    s->watch_started = false;
}

la_conn *la_conn_open(la_server *s, struct MHD_Connection *mhd) {
    la_conn *cc = calloc(1, sizeof *cc);
    if (!cc) return NULL;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mhd, MHD_CONNECTION_INFO_CONNECTION_FD);
    cc->srv = s;
    cc->mhd = mhd;
    cc->fd = ci ? ci->connect_fd : -1;
    cc->phase = LA_CONN_HEADERS;
    cc->since_ms = la_now_ms();
    pthread_mutex_lock(&s->conn_mu);
    cc->next = s->conns;
    if (s->conns) s->conns->prev = cc;
    s->conns = cc;
    pthread_mutex_unlock(&s->conn_mu);
    return cc;
}

void la_conn_close(la_conn *cc) {
    if (!cc) return;
    la_server *s = cc->srv;
    /* libmicrohttpd closes the socket after this returns: the watcher, which holds conn_mu
     * while it touches a socket, never sees a closed (or reused) one */
    pthread_mutex_lock(&s->conn_mu);
    if (cc->prev) cc->prev->next = cc->next;
    else s->conns = cc->next;
    if (cc->next) cc->next->prev = cc->prev;
    pthread_mutex_unlock(&s->conn_mu);
    free(cc);
}

la_conn *la_conn_of(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

void la_conn_set_phase(la_conn *cc, la_conn_phase phase, bool http11) {
    if (!cc) return;
    pthread_mutex_lock(&cc->srv->conn_mu);
    cc->phase = phase;
    cc->since_ms = la_now_ms();
    if (phase == LA_CONN_BODY) {
        cc->http11 = http11;
        cc->woken = cc->watch = cc->stream = cc->probed = cc->probe_wanted = cc->gone = false;
    }
    pthread_mutex_unlock(&cc->srv->conn_mu);
}

void la_conn_arm(la_conn *cc) {
    pthread_mutex_lock(&cc->srv->conn_mu);
    cc->woken = false;
    pthread_mutex_unlock(&cc->srv->conn_mu);
}

int la_conn_suspend(la_conn *cc) {
    la_server *s = cc->srv;
    pthread_mutex_lock(&s->conn_mu);
    int k;
    if (s->closing) {
        k = -1;
    } else if (cc->woken) {
        cc->woken = false;
        k = 0;
    } else {
        /* under conn_mu, so a wake either sees it suspended or sets woken before */
        cc->suspended = true;
        MHD_suspend_connection(cc->mhd);
        k = 1;
    }
    pthread_mutex_unlock(&s->conn_mu);
    return k;
}

void la_conn_wake(la_conn *cc) {
    pthread_mutex_lock(&cc->srv->conn_mu);
    resume_locked(cc);
    pthread_mutex_unlock(&cc->srv->conn_mu);
}

void la_conn_watch(la_conn *cc, bool stream) {
    pthread_mutex_lock(&cc->srv->conn_mu);
    cc->watch = true;
    cc->stream = stream;
    pthread_mutex_unlock(&cc->srv->conn_mu);
}

bool la_conn_gone(la_conn *cc) {
    pthread_mutex_lock(&cc->srv->conn_mu);
    bool g = cc->gone;
    pthread_mutex_unlock(&cc->srv->conn_mu);
    return g;
}

bool la_conn_take_probe(la_conn *cc) {
    pthread_mutex_lock(&cc->srv->conn_mu);
    bool p = cc->probe_wanted;
    cc->probe_wanted = false;
    pthread_mutex_unlock(&cc->srv->conn_mu);
    return p;
}

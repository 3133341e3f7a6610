/* Monotonic clock. */
#ifndef LA_BASE_TIMER_H
#define LA_BASE_TIMER_H
#include <time.h>
/* Milliseconds since an arbitrary fixed point (CLOCK_MONOTONIC). */
static inline double la_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}
/* The CLOCK_REALTIME instant timeout_ms (>= 0) from now: the absolute deadline
 * pthread_cond_timedwait takes. */
static inline struct timespec la_deadline_after_ms(int timeout_ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}
#endif

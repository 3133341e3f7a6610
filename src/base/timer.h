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
#endif

/* The thread pool's default size: one thread per physical core the process may run on, so a
 * process confined by taskset or a container's cpuset does not start more threads than it has
 * CPUs (base/threadpool.h). */
#include <criterion/criterion.h>
#include <sched.h>

#include "base/err.h"
#include "base/threadpool.h"

Test(threadpool, the_default_size_follows_the_affinity_mask) {
    cpu_set_t all, one;
    cr_assert_eq(sched_getaffinity(0, sizeof all, &all), 0);
    const int n_allowed = CPU_COUNT(&all);
    const int cores = la_physical_cores();
    cr_assert(cores >= 1 && cores <= n_allowed, "%d cores of %d CPUs", cores, n_allowed);
    int first = 0;
    while (!CPU_ISSET(first, &all)) first++;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    cr_assert_eq(sched_setaffinity(0, sizeof one, &one), 0);
    cr_assert_eq(la_physical_cores(), 1, "confined to CPU %d", first);
    la_threadpool *tp = NULL;
    la_err err = {0};
    cr_assert_eq(la_threadpool_create(0, &tp, &err), LA_OK, "%s", err.msg);
    cr_assert_eq(la_threadpool_size(tp), 1);
    la_threadpool_destroy(tp);
    cr_assert_eq(sched_setaffinity(0, sizeof all, &all), 0);
    cr_assert_eq(la_physical_cores(), cores);
}

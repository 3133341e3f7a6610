/* Real servers the tests start on loopback and stop by their PID (redis-server, nginx):
 * started by the test itself, never a system service. */
#ifndef LA_TEST_SERVICES_H
#define LA_TEST_SERVICES_H

#include <sys/types.h>

/* A free TCP port on 127.0.0.1 (bound and released: a race is possible but harmless in
 * a test that then fails to bind). */
int la_test_free_port(void);

/* redis-server on 127.0.0.1:port with no persistence, plus extra arguments (NULL: none;
 * e.g. "--requirepass pw --maxmemory 1mb"), its log at logfile (NULL: /dev/null).
 * Waits until it answers PING; the test fails if it does not within 10 s.
 * Returns its PID. */
pid_t la_test_redis_start(int port, const char *extra, const char *logfile);
/* SIGKILL (hard: true) or SIGTERM, then reap. */
void la_test_proc_stop(pid_t pid, int hard);
/* Run a redis-cli command against 127.0.0.1:port ("FLUSHALL", "CONFIG SET ..."); returns
 * its stdout (heap string) or NULL. */
char *la_test_redis_cli(int port, const char *args);

#endif

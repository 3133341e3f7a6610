/* Where the bundled demo model lives. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"

#ifndef LA_DEFAULT_MODEL_NAME
#define LA_DEFAULT_MODEL_NAME "rag-tiny"
#endif

/* $LAZYATTN_MODEL, else <dir of the executable>/../models/<name> (the build tree sits in
 * the checkout), else ./models/<name>. */
const char *la_cli_default_model_dir(void) {
    static char path[PATH_MAX + 64];
    const char *env = getenv("LAZYATTN_MODEL");
    if (env && *env) return env;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            snprintf(path, sizeof path, "%s/../models/%s", exe, LA_DEFAULT_MODEL_NAME);
            if (access(path, R_OK) == 0) return path;
        }
    }
    snprintf(path, sizeof path, "models/%s", LA_DEFAULT_MODEL_NAME);
    return path;
}

/* The library's version (include/lazyattn/abi.h). */
#include <stddef.h>

#include "lazyattn/abi.h"

const char *la_version(int *major, int *minor, int *patch) {
    if (major) *major = LA_VERSION_MAJOR;
    if (minor) *minor = LA_VERSION_MINOR;
    if (patch) *patch = LA_VERSION_PATCH;
    return LA_VERSION_STRING;
}

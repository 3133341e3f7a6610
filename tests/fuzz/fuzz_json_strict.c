/* la_json_strict_check against cJSON: no crash on any bytes, and a text it passes that cJSON
 * parses holds no object with a name twice and no string cut by a NUL. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"

static void check_tree(const cJSON *n) {
    for (const cJSON *c = n ? n->child : NULL; c; c = c->next) {
        if (cJSON_IsObject(n))
            for (const cJSON *d = c->next; d; d = d->next)
                if (!strcmp(c->string, d->string)) abort(); /* a name twice got through */
        check_tree(c);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[128];
    const char *why = NULL;
    if (!la_json_strict_check((const char *)data, size, path, sizeof path, &why)) {
        if (!why || strlen(path) >= sizeof path) abort();
        return 0;
    }
    cJSON *root = cJSON_ParseWithLength((const char *)data, size);
    check_tree(root);
    cJSON_Delete(root);
    return 0;
}

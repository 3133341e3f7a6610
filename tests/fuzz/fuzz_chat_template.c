/* A chat template compiled and rendered by our Jinja subset (model/chat_template.h) over a
 * conversation with a system message, two turns and documents: any template either renders
 * or is refused with a message, within the interpreter's limits. */
#include <stdint.h>
#include <stdlib.h>

#include "model/chat_template.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    la_chat_template *t = NULL;
    la_err err = {0};
    if (la_chat_template_create((const char *)data, size, "fuzz", "<s>", "</s>", &t, &err) != LA_OK) {
        if (!err.msg[0]) abort();
        return 0;
    }
    const la_chat_message msgs[4] = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "Where?"}};
    char *out = NULL, *pre = NULL, *tail = NULL;
    if (la_chat_template_render(t, msgs, 4, &out, &err) == LA_OK) free(out);
    if (la_chat_template_render_around(t, msgs, 4, &pre, &tail, &err) == LA_OK) {
        free(pre);
        free(tail);
    }
    la_chat_template_destroy(t);
    return 0;
}

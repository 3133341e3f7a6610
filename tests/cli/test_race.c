/* `lazyattn race` (src/cli/cmd_race.c over src/bench/race.c and frames.c) as the built binary
 * on the bundled model: both methods answer the same question, and --record hands
 * ImageMagick's convert one call per frame plus one for the GIF (a stand-in convert here,
 * LAZYATTN_CONVERT, that writes its last argument), and fails when no GIF comes out. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/test_util.h"

#define RACE "race -m '" LA_SOURCE_DIR "/models/rag-tiny' --question 5 --threads-each 1 --max-tokens 8 "

/* A convert that writes one byte to its last argument (a frame's PNG or the GIF). */
static char *fake_convert(const char *dir) {
    la_test_write_text(dir, "convert", "#!/bin/sh\nfor a; do last=$a; done\nprintf x > \"$last\"\n");
    char *path = malloc(strlen(dir) + 16);
    sprintf(path, "%s/convert", dir);
    chmod(path, 0755);
    return path;
}

Test(race, record_writes_the_gif_through_convert) {
    char *dir = la_test_tmpdir();
    char *convert = fake_convert(dir);
    char env[512], args[1024], gif[512];
    snprintf(env, sizeof env, "LAZYATTN_CONVERT='%s'", convert);
    snprintf(gif, sizeof gif, "%s/race.gif", dir);
    snprintf(args, sizeof args, RACE "--record '%s'", gif);
    la_test_cli_result r = la_test_cli(env, args, NULL);
    cr_assert_eq(r.status, 0, "exit %d: %s", r.status, r.err);
    cr_assert(strstr(r.out, "answers identical: yes"), "%s", r.out);
    cr_assert(strstr(r.err, "recorded "), "%s", r.err);
    struct stat st;
    cr_assert(stat(gif, &st) == 0 && st.st_size > 0, "no GIF at %s", gif);
    la_test_cli_free(&r);
    free(convert);
    la_test_rm_tree(dir);
}

Test(race, record_fails_when_convert_writes_no_gif) {
    char *dir = la_test_tmpdir();
    char args[1024];
    snprintf(args, sizeof args, RACE "--record '%s/race.gif'", dir);
    la_test_cli_result r = la_test_cli("LAZYATTN_CONVERT=/bin/true", args, NULL);
    cr_assert_eq(r.status, 1, "exit %d: %s", r.status, r.err);
    cr_assert(strstr(r.err, "convert failed"), "%s", r.err);
    cr_assert_null(strstr(r.err, "recorded "), "%s", r.err);
    la_test_cli_free(&r);
    la_test_rm_tree(dir);
}

/* The verdict names the side that reached its first token sooner, whichever of --left /
 * --right it is, with a ratio >= 1 (it printed "recompute: first token 0.09x sooner than
 * block" when the left side was the slower one). */
Test(race, verdict_names_the_faster_side_first) {
    la_test_cli_result r = la_test_cli("", RACE "--left recompute --right lazy", NULL);
    cr_assert_eq(r.status, 0, "exit %d: %s", r.status, r.err);
    double t[2] = {-1, -1};
    const char *names[2] = {"recompute", "lazy"};
    for (int k = 0; k < 2; k++) { /* "\n<method>   TTFT  x ms  answer: ..." */
        char head[32];
        snprintf(head, sizeof head, "\n%s ", names[k]);
        const char *line = strstr(r.out, head);
        cr_assert(line && sscanf(line + strlen(head), " TTFT %lf ms", &t[k]) == 1, "no TTFT line for %s: %s",
                  names[k], r.out);
    }
    const int fast = t[0] <= t[1] ? 0 : 1;
    char want[64];
    snprintf(want, sizeof want, "%s: first token ", names[fast]);
    const char *v = strstr(r.out, want);
    cr_assert(v, "verdict does not start with the faster side (%s %.1f ms, %s %.1f ms): %s", names[0], t[0],
              names[1], t[1], r.out);
    double ratio = 0;
    cr_assert(sscanf(v + strlen(want), "%lfx sooner than", &ratio) == 1 && ratio >= 1.0, "ratio %.2f: %s", ratio, v);
    cr_assert(strstr(v, names[1 - fast]), "verdict does not name the slower side: %s", v);
    la_test_cli_free(&r);
}

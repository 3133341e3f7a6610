/* Text frames recorded with the time each was drawn, then rendered to an animated GIF by
 * ImageMagick's convert ($LAZYATTN_CONVERT names another binary; Debian's imagemagick with
 * fonts-dejavu-core): each frame shows for the time it was on screen, the last for 4 s.
 */
#ifndef LA_BENCH_FRAMES_H
#define LA_BENCH_FRAMES_H

#include <stdio.h>

typedef struct la_frames {
    FILE *f;        /* the frames file while recording, else NULL */
    int n;          /* frames recorded */
    double t0;      /* la_now_ms() of time 0 (the caller sets it; 0 after la_frames_open) */
    char path[32];  /* the temporary frames file ("" when there is none) */
} la_frames;

/* Start recording into a new temporary file. 0, or -1 when none could be created. */
int la_frames_open(la_frames *fr);

/* Record text (a whole frame) at la_now_ms() - t0. */
void la_frames_add(la_frames *fr, const char *text);

/* Stop recording (the file stays for la_frames_write_gif). */
void la_frames_close(la_frames *fr);

/* Render the closed frames file to gif: one PNG per frame, then one GIF. 0, or -1 when there
 * was no frame or convert failed or wrote nothing. */
int la_frames_write_gif(const la_frames *fr, const char *gif);

/* Close if still recording and delete the frames file. */
void la_frames_remove(la_frames *fr);

#endif

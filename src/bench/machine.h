/* Describing the machine and the run for benchmark results (JSON). */
#ifndef LA_BENCH_MACHINE_H
#define LA_BENCH_MACHINE_H

#include <cjson/cJSON.h>
#include <stddef.h>

/* {"uname", "cpu", "n_cpus", "mem_gib", "commit", "date_utc"}; commit from `git rev-parse`
 * in the source tree when available. Caller owns it (cJSON_Delete). */
cJSON *la_machine_json(void);

/* The first three fields of /proc/loadavg, "1.02 0.87 0.55" ("" where there is none). */
void la_machine_loadavg(char *buf, size_t cap);

/* argv joined with spaces (shell-quoted where needed). Heap string. */
char *la_command_line(int argc, char **argv);

/* Write root pretty-printed to path, creating parent directories. 0 on success; -1 with
 * errno set. */
int la_json_write_file(const char *path, const cJSON *root);

/* Create the parent directories of path (mode 0755; existing ones are fine). */
void la_make_parent_dirs(const char *path);

/* Before a long run: will writing path work afterwards? Creates its parent directories;
 * an existing path must not be a directory and must open for writing (not truncated); a
 * new one must be creatable (created, then removed again). 0 if so; -1 with errno set
 * (ENOENT for an empty path, EISDIR, ENOTDIR, EACCES, EROFS, ...) if not. */
int la_output_path_check(const char *path);

#endif

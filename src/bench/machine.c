/* Describing the machine and the run for benchmark results (machine.h). */
#include "bench/machine.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>
#include <stdbool.h>

#ifndef LA_SOURCE_DIR
#define LA_SOURCE_DIR "."
#endif

static void read_line_of(const char *cmd, char *buf, size_t n) {
    buf[0] = '\0';
    FILE *f = popen(cmd, "r");
    if (!f) return;
    if (fgets(buf, (int)n, f)) buf[strcspn(buf, "\n")] = '\0';
    pclose(f);
}

cJSON *la_machine_json(void) {
    cJSON *m = cJSON_CreateObject();
    struct utsname u;
    if (uname(&u) == 0) {
        char s[512];
        snprintf(s, sizeof s, "%s %s %s", u.sysname, u.release, u.machine);
        cJSON_AddStringToObject(m, "uname", s);
    }
    char cpu[256] = "";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "model name", 10)) {
                char *c = strchr(line, ':');
                if (c) snprintf(cpu, sizeof cpu, "%s", c + 2);
                cpu[strcspn(cpu, "\n")] = '\0';
                break;
            }
        fclose(f);
    }
    cJSON_AddStringToObject(m, "cpu", cpu);
    cJSON_AddNumberToObject(m, "n_cpus", (double)sysconf(_SC_NPROCESSORS_ONLN));
    cJSON_AddNumberToObject(m, "mem_gib",
                            (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGE_SIZE) / (1 << 30));
    /* LA_COMMIT names the commit where the tree has no git history (a copied checkout on
     * a GPU machine, whose stale .git would name the wrong commit) */
    char commit[128] = "";
    const char *env_commit = getenv("LA_COMMIT");
    if (env_commit && *env_commit) snprintf(commit, sizeof commit, "%s", env_commit);
    else read_line_of("git -C '" LA_SOURCE_DIR "' rev-parse --short HEAD 2>/dev/null", commit, sizeof commit);
    cJSON_AddStringToObject(m, "commit", commit);
    char gpu[256];
    read_line_of("nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null", gpu, sizeof gpu);
    if (gpu[0]) cJSON_AddStringToObject(m, "gpu", gpu);
    time_t t = time(NULL);
    char date[64];
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
    cJSON_AddStringToObject(m, "date_utc", date);
    return m;
}

void la_machine_loadavg(char *buf, size_t cap) {
    buf[0] = '\0';
    FILE *f = fopen("/proc/loadavg", "r");
    double a, b, c;
    if (f && fscanf(f, "%lf %lf %lf", &a, &b, &c) == 3) snprintf(buf, cap, "%.2f %.2f %.2f", a, b, c);
    if (f) fclose(f);
}

char *la_command_line(int argc, char **argv) {
    size_t n = 1;
    for (int i = 0; i < argc; i++) n += strlen(argv[i]) * 2 + 3;
    char *s = malloc(n);
    if (!s) return NULL;
    s[0] = '\0';
    for (int i = 0; i < argc; i++) {
        if (i) strcat(s, " ");
        bool quote = argv[i][0] == '\0' || strpbrk(argv[i], " \t'\"$;&|<>()*?") != NULL;
        if (quote) strcat(s, "'");
        strcat(s, argv[i]);
        if (quote) strcat(s, "'");
    }
    return s;
}

void la_make_parent_dirs(const char *path) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    for (char *p = dir + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(dir, 0755);
            *p = '/';
        }
}

int la_output_path_check(const char *path) {
    if (!path || !*path) return errno = ENOENT, -1;
    la_make_parent_dirs(path);
    struct stat st;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return errno = EISDIR, -1;
        int fd = open(path, O_WRONLY | O_APPEND | O_NONBLOCK); /* not truncated; a FIFO never blocks */
        if (fd < 0) return -1;
        close(fd);
        return 0;
    }
    /* a new file: create it and take it away again (access() trusts root everywhere, even
     * on /proc, where creating fails) */
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) return -1;
    close(fd);
    unlink(path);
    return 0;
}

int la_json_write_file(const char *path, const cJSON *root) {
    la_make_parent_dirs(path);
    char *text = cJSON_Print(root);
    if (!text) return errno = ENOMEM, -1;
    FILE *f = fopen(path, "w");
    int rc = -1, saved = errno;
    if (f) {
        rc = fputs(text, f) < 0 || fputc('\n', f) == EOF ? -1 : 0;
        if (rc) saved = errno;
        if (fclose(f) != 0 && rc == 0) rc = -1, saved = errno;
    }
    free(text);
    errno = saved;
    return rc;
}

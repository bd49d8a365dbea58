/* What the embedding tests share: a folder of the run's files, error checks, states, chunks. */
#ifndef TLUA_TEST_EMBED_SUPPORT_H
#define TLUA_TEST_EMBED_SUPPORT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tlua/embed.h"
#include "tlua/tlua.h"

#include "check.h"

#ifndef TLUA_TEST_BUILD_DIR
#define TLUA_TEST_BUILD_DIR "."
#endif

static char dir[256]; /* a folder of this run's files */

/* A file of this run's folder: name joined to dir (a static buffer per slot). */
static inline const char *file_path(int slot, const char *name) {
    static char paths[4][512];
    snprintf(paths[slot], sizeof paths[slot], "%s/%s", dir, name);
    return paths[slot];
}

static inline void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static inline bool contains(const char *text, const char *part) {
    return strstr(text, part) != NULL;
}

/* status is `want` and tl_last_error() holds each of the parts (NULL-ended). */
static inline void check_error(const char *what, tl_status status, tl_status want, ...) {
    CHECK(status == want, "%s: status %d, expected %d (%s)", what, (int)status, (int)want,
          tl_last_error());
    va_list parts;
    va_start(parts, want);
    for (const char *part = va_arg(parts, const char *); part; part = va_arg(parts, const char *))
        CHECK(contains(tl_last_error(), part), "%s: the message lacks \"%s\": %s", what, part,
              tl_last_error());
    va_end(parts);
}
#define ERROR(what, call, want, ...) check_error(what, call, want, __VA_ARGS__, (const char *)NULL)

static inline tl_lua *open_with(const tl_lua_options *options) {
    tl_lua *L = NULL;
    OK(tl_lua_open(options, &L));
    return L;
}

static inline tl_lua *open_state(bool sandbox, size_t memory_limit, uint64_t instruction_limit) {
    tl_lua_options options = {
        .sandbox = sandbox, .memory_limit = memory_limit, .instruction_limit = instruction_limit};
    return open_with(&options);
}

/* The state still runs code and reads values (after an error). */
static inline void check_usable(tl_lua *L, const char *after) {
    double value = 0;
    CHECK(tl_lua_dostring(L, "usable = (usable or 0) + 1", "=usable") == TL_OK,
          "after %s: the state runs no more code: %s", after, tl_last_error());
    CHECK(tl_lua_get_number(L, "usable", &value) == TL_OK && value >= 1,
          "after %s: no value read: %s", after, tl_last_error());
}

/* Runs chunk and expects it to succeed (its asserts hold). */
static inline void run_ok(tl_lua *L, const char *what, const char *chunk) {
    CHECK(tl_lua_dostring(L, chunk, what) == TL_OK, "%s: %s", what, tl_last_error());
}

/* Makes this run's folder (under the build folder) for the test named name. */
static inline bool make_run_dir(const char *name) {
    snprintf(dir, sizeof dir, "%s/%s.%ld", TLUA_TEST_BUILD_DIR, name, (long)getpid());
    char command[512];
    snprintf(command, sizeof command, "mkdir -p '%s'", dir);
    return system(command) == 0;
}

/* Removes the folder and prints the verdict; the test's exit status. */
static inline int finish(const char *name) {
    char command[512];
    snprintf(command, sizeof command, "rm -rf '%s'", dir);
    if (system(command) != 0) printf("(could not remove %s)\n", dir);
    if (failures) {
        printf("%d of %d check(s) failed\n", failures, checks);
        return 1;
    }
    printf("%s: all %d checks passed\n", name, checks);
    return 0;
}

#endif

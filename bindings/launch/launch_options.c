/* The launcher's options (tlua --nproc ...), its job's secret, and its escaped messages. */
#define _GNU_SOURCE /* explicit_bzero */
#include "launch_options.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { MAX_COUNT = 4096, SAY_SIZE = 2048 }; /* a message: the store's text is at most 1 KiB */

static const char usage_text[] =
    "usage: tlua --nproc N [--nnodes M --node-rank R --master-addr A --master-port P] "
    "[--bind B] [--secret-file F] script.lua [args]\n"
    "  --nproc N          ranks on this node (each runs `tlua script.lua args`)\n"
    "  --nnodes M         nodes of the job (default 1)\n"
    "  --node-rank R      this node's index, 0 to M-1 (default 0); node 0 owns the store\n"
    "  --master-addr A    node 0's address as every node reaches it (default 127.0.0.1)\n"
    "  --master-port P    the store's port (default: a free port for one node, 29500 for several)\n"
    "  --bind B           the address node 0's store listens on (default: A with several nodes,\n"
    "                     127.0.0.1 for one; 0.0.0.0 is every interface)\n"
    "  --secret-file F    the job's secret (16 to 256 bytes; a final newline is dropped), which\n"
    "                     every client of the store must prove; default: TLUA_STORE_SECRET, else\n"
    "                     (one node) a new random one. Several nodes need the same on each node.\n"
    "Each rank gets TLUA_RANK, TLUA_WORLD_SIZE, TLUA_LOCAL_RANK, TLUA_LOCAL_WORLD_SIZE,\n"
    "TLUA_NODE_RANK, TLUA_NNODES, TLUA_MASTER_ADDR, TLUA_MASTER_PORT and TLUA_STORE_SECRET;\n"
    "unless set, OMP_NUM_THREADS is the node's cores divided by N. The store's traffic is\n"
    "authenticated by the secret, not encrypted.\n";

/* ---- messages ------------------------------------------------------------------------------- */
void tlb_launch_escape(char *out, size_t size, const void *bytes, size_t n) {
    enum { SUFFIX = 40 }; /* room for "... (N more bytes)" */
    const unsigned char *b = bytes;
    size_t used = 0, i = 0;
    for (; i < n; i++) {
        bool plain = b[i] >= 0x20 && b[i] < 0x7f;
        size_t width = plain ? 1 : 4;
        if (used + width + SUFFIX >= size && !(i + 1 == n && used + width < size)) break;
        if (plain)
            out[used] = (char)b[i];
        else
            snprintf(out + used, 5, "\\x%02x", b[i]);
        used += width;
    }
    out[used] = '\0';
    if (i < n) snprintf(out + used, size - used, "... (%zu more bytes)", n - i);
}

static void vsay(const char *fmt, va_list args, const char *after) {
    char raw[SAY_SIZE], text[SAY_SIZE];
    int n = vsnprintf(raw, sizeof raw, fmt, args);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof raw ? (size_t)n : sizeof raw - 1;
    tlb_launch_escape(text, sizeof text, raw, len);
    fprintf(stderr, "tlua --nproc: %s\n%s", text, after);
    fflush(stderr);
}

void tlb_launch_say(const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vsay(fmt, args, "");
    va_end(args);
}

static bool usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static bool usage_error(const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vsay(fmt, args, usage_text);
    va_end(args);
    return false;
}

/* ---- options -------------------------------------------------------------------------------- */
enum {
    OPT_NPROC,
    OPT_NNODES,
    OPT_NODE_RANK,
    OPT_MASTER_ADDR,
    OPT_MASTER_PORT,
    OPT_BIND,
    OPT_SECRET_FILE,
    OPT_COUNT
};
static const char *const option_names[OPT_COUNT] = {"--nproc",       "--nnodes",      "--node-rank",
                                                    "--master-addr", "--master-port", "--bind",
                                                    "--secret-file"};

/* Which option arg is ("--name" or "--name=value"), or -1; *inline_value gets the value after
   '=' (NULL when none). */
static int match_option(const char *arg, const char **inline_value) {
    for (int i = 0; i < OPT_COUNT; i++) {
        size_t len = strlen(option_names[i]);
        if (strncmp(arg, option_names[i], len) != 0) continue;
        if (arg[len] == '\0') {
            *inline_value = NULL;
            return i;
        }
        if (arg[len] == '=') {
            *inline_value = arg + len + 1;
            return i;
        }
    }
    return -1;
}

bool tlb_launch_is_option(const char *arg) {
    const char *value;
    return arg && match_option(arg, &value) >= 0;
}

/* A whole number from lo to hi; false with a usage error otherwise. */
static bool parse_number(const char *option, const char *text, int lo, int hi, int *out) {
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (!*text || *end || errno || v < lo || v > hi)
        return usage_error("%s expects a whole number from %d to %d, got '%s'", option, lo, hi,
                           text);
    *out = (int)v;
    return true;
}

static bool set_option(launch_options *o, int which, const char *value) {
    const char *name = option_names[which];
    switch (which) {
    case OPT_NPROC:
        return parse_number(name, value, 1, MAX_COUNT, &o->nproc);
    case OPT_NNODES:
        return parse_number(name, value, 1, MAX_COUNT, &o->nnodes);
    case OPT_NODE_RANK:
        return parse_number(name, value, 0, MAX_COUNT - 1, &o->node_rank);
    case OPT_MASTER_PORT:
        return parse_number(name, value, 0, 65535, &o->master_port);
    case OPT_SECRET_FILE:
        if (!*value) return usage_error("--secret-file expects a file's path, got ''");
        o->secret_file = value;
        return true;
    default:
        if (!*value) return usage_error("%s expects a host name or address, got ''", name);
        if (which == OPT_BIND)
            o->bind_addr = value;
        else
            o->master_addr = value;
        return true;
    }
}

static bool check_options(const launch_options *o, int argc) {
    if (o->nproc == 0)
        return usage_error("--nproc N is missing (the number of ranks to start on this node)");
    if (o->node_rank >= o->nnodes)
        return usage_error("--node-rank %d is out of range for --nnodes %d (expected 0 to %d)",
                           o->node_rank, o->nnodes, o->nnodes - 1);
    if (o->nnodes > 1 && o->master_port == 0)
        return usage_error("--master-port 0 (a free port) needs --nnodes 1: the other nodes "
                           "must know the port");
    if (o->first_arg >= argc) return usage_error("no script to run");
    return true;
}

/* A script that no rank could open is refused before any rank starts ("-e ..." and other
   options of tlua go to the ranks as they are). */
static bool check_script(const char *script) {
    if (script[0] == '-' || access(script, R_OK) == 0) return true;
    tlb_launch_say("cannot read the script '%s': %s", script, strerror(errno));
    return false;
}

bool tlb_launch_parse(int argc, char **argv, launch_options *o) {
    *o = (launch_options){.nnodes = 1, .master_port = -1};
    int i = 1;
    while (i < argc) {
        const char *value = NULL;
        int which = match_option(argv[i], &value);
        if (which < 0) break;
        if (!value) {
            if (i + 1 >= argc) return usage_error("%s needs a value", option_names[which]);
            value = argv[++i];
        }
        i++;
        if (!set_option(o, which, value)) return false;
    }
    o->first_arg = i;
    return check_options(o, argc) && check_script(argv[i]);
}

/* ---- the secret ----------------------------------------------------------------------------- */
/* Whether the secret's length is one the store takes; a message naming where it came from if
   not. */
static bool check_length(const char *where, size_t len) {
    if (len >= TL_STORE_MIN_SECRET && len <= TL_STORE_MAX_SECRET) return true;
    tlb_launch_say("%s: the secret has %zu bytes, expected %d to %d (a shorter one is too easy to "
                   "guess; e.g. `head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'` makes one)",
                   where, len, TL_STORE_MIN_SECRET, TL_STORE_MAX_SECRET);
    return false;
}

/* Reads --secret-file into secret: its bytes up to the end, less a final line break. */
static bool read_secret_file(const char *path, char *secret) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        tlb_launch_say("--secret-file: cannot read '%s': %s", path, strerror(errno));
        return false;
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && (st.st_mode & (S_IRWXG | S_IRWXO)))
        tlb_launch_say("warning: --secret-file '%s' may be read by other users (chmod 600 it)",
                       path);
    char bytes[TL_STORE_MAX_SECRET + 3]; /* a longer file is refused: no need to read it all */
    size_t len = fread(bytes, 1, sizeof bytes, f);
    bool failed = ferror(f);
    fclose(f);
    if (failed) {
        tlb_launch_say("--secret-file: cannot read '%s'", path);
        return false;
    }
    if (len > 0 && bytes[len - 1] == '\n') len--;
    if (len > 0 && bytes[len - 1] == '\r') len--;
    char where[300];
    snprintf(where, sizeof where, "--secret-file '%s'", path);
    bool ok = check_length(where, len);
    if (ok && memchr(bytes, '\0', len)) {
        tlb_launch_say("%s: the secret holds a NUL byte (expected text)", where);
        ok = false;
    }
    if (ok) {
        memcpy(secret, bytes, len);
        secret[len] = '\0';
    }
    explicit_bzero(bytes, sizeof bytes);
    return ok;
}

bool tlb_launch_secret(const launch_options *o, char secret[TL_STORE_MAX_SECRET + 1]) {
    if (o->secret_file) return read_secret_file(o->secret_file, secret);
    const char *env = getenv("TLUA_STORE_SECRET");
    if (env && *env) {
        if (!check_length("TLUA_STORE_SECRET", strlen(env))) return false;
        snprintf(secret, TL_STORE_MAX_SECRET + 1, "%s", env);
        return true;
    }
    if (o->nnodes > 1) {
        tlb_launch_say(
            "--nnodes %d: the nodes' store needs a secret that every node knows, and none was "
            "given; set TLUA_STORE_SECRET to the same value on every node (e.g. `export "
            "TLUA_STORE_SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n')`), or pass "
            "--secret-file F with the same file on every node",
            o->nnodes);
        return false;
    }
    char made[TL_STORE_SECRET_SIZE];
    if (tl_store_make_secret(made) != TL_OK) {
        tlb_launch_say("%s", tl_last_error());
        return false;
    }
    snprintf(secret, TL_STORE_MAX_SECRET + 1, "%s", made);
    explicit_bzero(made, sizeof made);
    return true;
}

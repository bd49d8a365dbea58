/* The launcher's options, its job's secret and its messages (private to launch.c). */
#ifndef TLUA_LAUNCH_OPTIONS_H
#define TLUA_LAUNCH_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>

#include "tlua/distributed.h"

#define LAUNCH_DEFAULT_ADDR "127.0.0.1"

typedef struct launch_options {
    int nproc, nnodes, node_rank;
    int master_port;         /* -1: not given */
    const char *master_addr; /* NULL: not given */
    const char *bind_addr;   /* --bind; NULL: not given */
    const char *secret_file; /* --secret-file; NULL: not given */
    int first_arg;           /* argv index of the script: it and what follows go to every rank */
} launch_options;

/* Whether arg is one of the launcher's options ("--name" or "--name=value"). */
bool tlb_launch_is_option(const char *arg);
/* Reads the launcher's options from argv; false (after a message with the usage) when they are
   wrong. */
bool tlb_launch_parse(int argc, char **argv, launch_options *o);
/* The job's secret, into secret (TL_STORE_MAX_SECRET + 1 bytes): --secret-file's, else
   TLUA_STORE_SECRET's, else (one node) a new random one. False, after a message, when none
   fits: a file that cannot be read, a secret of a wrong length, or several nodes without one
   (the other nodes' launchers cannot learn a secret this one would make). */
bool tlb_launch_secret(const launch_options *o, char secret[TL_STORE_MAX_SECRET + 1]);

/* Writes the n bytes as text into out (size bytes, at least 64, NUL-terminated): printable ASCII
   as it is, every other byte (control characters, ESC, bytes >= 0x7f, NUL) as \xNN; what does not
   fit is left out and counted ("... (N more bytes)"). Text it made goes through unchanged. */
void tlb_launch_escape(char *out, size_t size, const void *bytes, size_t n);
/* Prints "tlua --nproc: <message>\n" to stderr, the message escaped and at most ~2 KiB. */
void tlb_launch_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif

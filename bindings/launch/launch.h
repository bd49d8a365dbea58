/* The launcher of `tlua --nproc N`: starts the ranks of a job, owns its rendezvous store. */
#ifndef TLUA_LAUNCH_H
#define TLUA_LAUNCH_H

#include <stdbool.h>

/* True when argv asks for a launch (an option of the launcher before the script). */
bool tlb_launch_requested(int argc, char **argv);
/* Runs the launcher: returns the process exit status. */
int tlb_launch_main(int argc, char **argv);

#endif

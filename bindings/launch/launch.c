/* The launcher of `tlua --nproc N`: starts the ranks of a job, owns its store, stops them together.
 */
#define _GNU_SOURCE /* explicit_bzero */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "launch.h"
#include "launch_options.h"
#include "tlua/distributed.h"

extern char **environ;

#define GRACE_S         5.0   /* SIGTERM, then SIGKILL this much later */
#define KILL_WAIT_S     2.0   /* then this long for the killed processes to go */
#define TICK_S          0.05  /* the monitor's period (child exits wake it at once) */
#define WATCH_PERIOD_S  0.2   /* how often a watcher looks for another node's failure */
#define CONNECT_S       300.0 /* how long a launcher waits for node 0's store */
#define LAUNCHER_WAIT_S 30.0  /* the timeout of a launcher's own store calls */
#define DEFAULT_PORT    29500 /* node 0's store when there are several nodes */
#define FAILED_KEY      "tlua/launch/failed"
#define FINISHED_KEY    "tlua/launch/finished"

enum { MESSAGE_SIZE = 1024 };

typedef struct rank_process {
    pid_t pid; /* also its process group */
    int rank;
    bool running;     /* not reaped yet */
    bool group_alive; /* its process group may still hold processes the launcher must stop */
} rank_process;

/* Looks for another node's failure (several nodes) on a client of its own. */
typedef struct watcher {
    pthread_t thread;
    bool started;
    tl_store *store;
    atomic_bool stop, fired;
    char message[MESSAGE_SIZE]; /* written before fired is set */
} watcher;

typedef struct launch_job {
    launch_options opt;
    char secret[TL_STORE_MAX_SECRET + 1]; /* every client of the store proves it */
    const char *store_addr;               /* where the ranks reach the store */
    int store_port;
    tl_store_server *server; /* node 0 */
    tl_store *store;         /* the launcher's client (several nodes) */
    watcher watcher;
    rank_process *ranks;
    int running;
    bool stopping, killed, failure_published;
    int exit_code;
    double kill_at;
    sigset_t saved_mask, handled;
} launch_job;

/* ---- small helpers ------------------------------------------------------------------------- */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static struct timespec timespec_of(double seconds) {
    return (struct timespec){(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
}

bool tlb_launch_requested(int argc, char **argv) {
    return argc > 1 && tlb_launch_is_option(argv[1]);
}

/* ---- the store: node 0 serves it, every launcher of several nodes is a client too ---------- */
static void *watch_other_nodes(void *arg) {
    watcher *w = arg;
    while (!atomic_load(&w->stop)) {
        bool exists = false;
        char why[MESSAGE_SIZE / 2]; /* the store's text, escaped: another node wrote it */
        if (tl_store_check(w->store, FAILED_KEY, &exists) != TL_OK) {
            tlb_launch_escape(why, sizeof why, tl_last_error(), strlen(tl_last_error()));
            snprintf(w->message, sizeof w->message, "node 0's store is gone (%s)", why);
            atomic_store(&w->fired, true);
            return NULL;
        }
        if (exists) {
            void *value = NULL;
            size_t size = 0;
            if (tl_store_get(w->store, FAILED_KEY, &value, &size) == TL_OK) {
                tlb_launch_escape(w->message, sizeof w->message, value, size);
            } else {
                tlb_launch_escape(why, sizeof why, tl_last_error(), strlen(tl_last_error()));
                snprintf(w->message, sizeof w->message, "another node failed (%s)", why);
            }
            free(value);
            atomic_store(&w->fired, true);
            return NULL;
        }
        for (double slept = 0; slept < WATCH_PERIOD_S && !atomic_load(&w->stop); slept += TICK_S) {
            struct timespec tick = timespec_of(TICK_S);
            nanosleep(&tick, NULL);
        }
    }
    return NULL;
}

static bool connect_launcher_client(const launch_job *job, tl_store **out) {
    if (tl_store_connect(job->store_addr, job->store_port, job->secret, CONNECT_S, out) != TL_OK ||
        tl_store_set_timeout(*out, LAUNCHER_WAIT_S) != TL_OK) {
        tlb_launch_say("%s", tl_last_error());
        return false;
    }
    return true;
}

/* Whether addr stands for every interface of the host. */
static bool is_wildcard(const char *addr) {
    return strcmp(addr, "0.0.0.0") == 0 || strcmp(addr, "::") == 0 || strcmp(addr, "[::]") == 0;
}

/* Node 0 starts the store, listening on --bind, else (several nodes) --master-addr, else on this
   host only; with several nodes every launcher connects to it. Called before the signals are
   blocked, so that Ctrl-C stops a launcher still waiting for node 0. */
static bool start_store(launch_job *job) {
    const launch_options *o = &job->opt;
    bool several = o->nnodes > 1;
    int port = o->master_port >= 0 ? o->master_port : several ? DEFAULT_PORT : 0;
    const char *listen_addr = o->bind_addr                ? o->bind_addr
                              : several && o->master_addr ? o->master_addr
                                                          : LAUNCH_DEFAULT_ADDR;
    if (several)
        job->store_addr = o->master_addr ? o->master_addr : LAUNCH_DEFAULT_ADDR;
    else /* one node: its ranks reach the store where it listens */
        job->store_addr = is_wildcard(listen_addr) ? LAUNCH_DEFAULT_ADDR : listen_addr;
    job->store_port = port;
    if (o->node_rank == 0 && tl_store_server_start(listen_addr, port, job->secret, &job->server,
                                                   &job->store_port) != TL_OK) {
        tlb_launch_say("%s", tl_last_error());
        return false;
    }
    if (!several) return true;
    return connect_launcher_client(job, &job->store) &&
           connect_launcher_client(job, &job->watcher.store);
}

static bool start_watcher(launch_job *job) {
    if (!job->watcher.store) return true;
    int rc = pthread_create(&job->watcher.thread, NULL, watch_other_nodes, &job->watcher);
    if (rc != 0) tlb_launch_say("cannot start the watcher thread: %s", strerror(rc));
    job->watcher.started = rc == 0;
    return rc == 0;
}

/* Tells the other nodes (through the store) that this one stops, once. */
static void publish_failure(launch_job *job, const char *what) {
    if (!job->store || job->failure_published) return;
    job->failure_published = true;
    char message[MESSAGE_SIZE];
    snprintf(message, sizeof message, "node %d: %s", job->opt.node_rank, what);
    if (tl_store_set(job->store, FAILED_KEY, message, strlen(message)) != TL_OK)
        tlb_launch_say("cannot tell the other nodes: %s", tl_last_error());
}

/* ---- the ranks ----------------------------------------------------------------------------- */
static const char *const rank_variables[] = {
    "TLUA_RANK",        "TLUA_WORLD_SIZE", "TLUA_LOCAL_RANK",  "TLUA_LOCAL_WORLD_SIZE",
    "TLUA_NODE_RANK",   "TLUA_NNODES",     "TLUA_MASTER_ADDR", "TLUA_MASTER_PORT",
    "TLUA_STORE_SECRET"};
enum { RANK_VARIABLES = sizeof rank_variables / sizeof rank_variables[0] };

static bool is_rank_variable(const char *entry) {
    for (int i = 0; i < RANK_VARIABLES; i++) {
        size_t len = strlen(rank_variables[i]);
        if (strncmp(entry, rank_variables[i], len) == 0 && entry[len] == '=') return true;
    }
    return false;
}

/* The values of rank_variables for the rank local_rank of this node, as text. */
static void rank_values(const launch_job *job, int local_rank, char text[][24],
                        const char *values[]) {
    const launch_options *o = &job->opt;
    long long numbers[] = {(long long)o->node_rank * o->nproc + local_rank,
                           (long long)o->nnodes * o->nproc,
                           local_rank,
                           o->nproc,
                           o->node_rank,
                           o->nnodes,
                           0,
                           job->store_port,
                           0};
    for (int v = 0; v < RANK_VARIABLES; v++) {
        snprintf(text[v], 24, "%lld", numbers[v]);
        values[v] = text[v];
    }
    values[6] = job->store_addr;
    values[8] = job->secret;
}

/* The environment of a rank: this one without the TLUA_ rank variables, then them. One block
   (pointers, then the new entries' text): free() it. NULL when out of memory. */
static char **rank_environment(const launch_job *job, int local_rank) {
    char text[RANK_VARIABLES][24];
    const char *values[RANK_VARIABLES];
    rank_values(job, local_rank, text, values);
    size_t count = 0;
    while (environ && environ[count]) count++;
    size_t longest = strlen(job->store_addr) > strlen(job->secret) ? strlen(job->store_addr)
                                                                   : strlen(job->secret);
    size_t entry_size = 64 + longest, pointers = count + RANK_VARIABLES + 1;
    char **env = malloc(pointers * sizeof *env + RANK_VARIABLES * entry_size);
    if (!env) return NULL;
    size_t n = 0;
    for (size_t i = 0; i < count; i++)
        if (!is_rank_variable(environ[i])) env[n++] = environ[i];
    char *entry = (char *)(env + pointers);
    for (int v = 0; v < RANK_VARIABLES; v++, entry += entry_size) {
        snprintf(entry, entry_size, "%s=%s", rank_variables[v], values[v]);
        env[n++] = entry;
    }
    env[n] = NULL;
    return env;
}

/* Writes text to stderr, async-signal-safe (between fork and exec). */
static void write_stderr(const char *text) {
    size_t len = strlen(text);
    while (len > 0) {
        ssize_t n = write(STDERR_FILENO, text, len);
        if (n <= 0) return;
        text += n;
        len -= (size_t)n;
    }
}

/* In the child between fork and exec: only async-signal-safe calls. */
static void exec_rank(const launch_job *job, const char *exe, char **args, char **env) {
    setpgid(0, 0);
    sigprocmask(SIG_SETMASK, &job->saved_mask, NULL);
    if (strchr(exe, '/')) {
        execve(exe, args, env);
    } else {
        environ = env;
        execvp(exe, args);
    }
    write_stderr("tlua --nproc: cannot execute the tlua executable: ");
    write_stderr(exe);
    write_stderr("\n");
    _exit(127);
}

/* Starts the node's ranks; a failure to start one stops the job (exit status 1). */
static void spawn_ranks(launch_job *job, int argc, char **argv) {
    const launch_options *o = &job->opt;
    static char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0)
        exe[len] = '\0';
    else
        snprintf(exe, sizeof exe, "%s", argv[0]);
    int nargs = argc - o->first_arg;
    char **args = malloc((size_t)(nargs + 2) * sizeof *args);
    if (!args) {
        tlb_launch_say("out of memory");
        job->exit_code = 1;
        return;
    }
    args[0] = argv[0];
    memcpy(args + 1, argv + o->first_arg, (size_t)nargs * sizeof *args);
    args[nargs + 1] = NULL;
    for (int local = 0; local < o->nproc; local++) {
        char **env = rank_environment(job, local);
        pid_t pid = env ? fork() : -1;
        if (pid == 0) exec_rank(job, exe, args, env);
        int err = errno;
        bool made_env = env != NULL;
        free(env);
        if (pid < 0) {
            tlb_launch_say("cannot start rank %d: %s", o->node_rank * o->nproc + local,
                           made_env ? strerror(err) : "out of memory");
            job->exit_code = 1;
            break;
        }
        setpgid(pid, pid); /* the child does it too: whichever runs first */
        job->ranks[local] = (rank_process){pid, o->node_rank * o->nproc + local, true, true};
        job->running++;
    }
    free(args);
}

/* Sends sig to every rank's process group that may still hold processes. */
static void signal_ranks(launch_job *job, int sig) {
    for (int i = 0; i < job->opt.nproc; i++) {
        rank_process *r = &job->ranks[i];
        if (r->pid > 0 && r->group_alive && kill(-r->pid, sig) != 0 && errno == ESRCH &&
            !r->running)
            r->group_alive = false;
    }
}

/* Starts stopping the job: SIGTERM now, SIGKILL after the grace period. */
static void stop_job(launch_job *job, int exit_code, int sig) {
    job->stopping = true;
    job->exit_code = exit_code;
    job->kill_at = now_s() + GRACE_S;
    signal_ranks(job, sig);
}

static void describe_exit(char *text, size_t size, const rank_process *r, int status) {
    if (WIFSIGNALED(status))
        snprintf(text, size, "rank %d (pid %d) was killed by signal %d (%s)", r->rank, (int)r->pid,
                 WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(text, size, "rank %d (pid %d) failed with exit status %d", r->rank, (int)r->pid,
                 WEXITSTATUS(status));
}

static void on_rank_failure(launch_job *job, const rank_process *r, int status) {
    char what[256];
    describe_exit(what, sizeof what, r, status);
    tlb_launch_say("%s%s", what, job->running > 0 ? "; stopping the other ranks" : "");
    stop_job(job, WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status), SIGTERM);
    publish_failure(job, what);
}

static void reap_ranks(launch_job *job) {
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (int i = 0; i < job->opt.nproc; i++) {
            rank_process *r = &job->ranks[i];
            if (r->pid != pid || !r->running) continue;
            bool failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
            r->running = false;
            r->group_alive = job->stopping || failed; /* its leftovers are stopped too */
            job->running--;
            if (failed && !job->stopping) on_rank_failure(job, r, status);
        }
    }
}

static void on_launcher_signal(launch_job *job, int sig) {
    tlb_launch_say("got signal %d (%s); passing it to the ranks", sig, strsignal(sig));
    if (job->stopping) {
        signal_ranks(job, sig);
        return;
    }
    stop_job(job, 128 + sig, sig);
    char what[128];
    snprintf(what, sizeof what, "the launcher got signal %d (%s)", sig, strsignal(sig));
    publish_failure(job, what);
}

static void on_other_node_failure(launch_job *job) {
    tlb_launch_say("stopping: %s", job->watcher.message);
    stop_job(job, 1, SIGTERM);
}

static bool any_group_alive(launch_job *job) {
    for (int i = 0; i < job->opt.nproc; i++) {
        rank_process *r = &job->ranks[i];
        if (r->group_alive && !r->running && kill(-r->pid, 0) != 0 && errno == ESRCH)
            r->group_alive = false;
        if (r->group_alive) return true;
    }
    return false;
}

/* Whether to wait on: ranks run, or a stopped job's process groups still hold processes (for
   KILL_WAIT_S at most after SIGKILL). */
static bool job_has_processes(launch_job *job) {
    if (job->running > 0) return true;
    if (!job->stopping || (job->killed && now_s() > job->kill_at + KILL_WAIT_S)) return false;
    return any_group_alive(job);
}

static void kill_remaining(launch_job *job) {
    for (int i = 0; i < job->opt.nproc; i++) {
        const rank_process *r = &job->ranks[i];
        if (r->running)
            tlb_launch_say("rank %d (pid %d) did not stop within %g s; killing it", r->rank,
                           (int)r->pid, GRACE_S);
    }
    signal_ranks(job, SIGKILL);
    job->killed = true;
}

/* Waits for every rank; stops them all at the first failure, signal or other node's failure. */
static void monitor_ranks(launch_job *job) {
    if (job->exit_code != 0) { /* a rank did not start */
        stop_job(job, job->exit_code, SIGTERM);
        publish_failure(job, "a rank could not be started");
    }
    while (job_has_processes(job)) {
        struct timespec tick = timespec_of(TICK_S);
        int sig = sigtimedwait(&job->handled, NULL, &tick);
        if (sig > 0 && sig != SIGCHLD) on_launcher_signal(job, sig);
        reap_ranks(job);
        if (!job->stopping && atomic_load(&job->watcher.fired)) on_other_node_failure(job);
        if (job->stopping && !job->killed && now_s() >= job->kill_at) kill_remaining(job);
    }
}

/* ---- the end of a job of several nodes ----------------------------------------------------- */
/* Node 0 keeps the store up until every node has finished (without a time limit while the job
   succeeds; for the grace period and a little more once a node has failed). */
static void wait_for_other_nodes(launch_job *job) {
    double limit = job->exit_code != 0 ? now_s() + GRACE_S + 2 : -1;
    for (;;) {
        int64_t finished = 0;
        if (tl_store_add(job->store, FINISHED_KEY, 0, &finished) != TL_OK) break;
        if (finished >= job->opt.nnodes || (limit > 0 && now_s() >= limit)) return;
        if (job->exit_code == 0 && atomic_load(&job->watcher.fired)) {
            tlb_launch_say("stopping: %s", job->watcher.message);
            job->exit_code = 1;
            limit = now_s() + GRACE_S + 2;
        }
        struct timespec tick = timespec_of(TICK_S * 2);
        int sig = sigtimedwait(&job->handled, NULL, &tick);
        if (sig > 0 && sig != SIGCHLD) {
            tlb_launch_say("got signal %d (%s) while waiting for the other nodes", sig,
                           strsignal(sig));
            if (job->exit_code == 0) job->exit_code = 128 + sig;
            publish_failure(job, "node 0's launcher was stopped by a signal");
            return;
        }
    }
}

static void finish_nodes(launch_job *job) {
    if (!job->store) return;
    if (job->exit_code == 0 && atomic_load(&job->watcher.fired)) {
        tlb_launch_say("stopping: %s",
                       job->watcher.message); /* another node failed after ours finished */
        job->exit_code = 1;
    }
    int64_t finished = 0;
    if (tl_store_add(job->store, FINISHED_KEY, 1, &finished) != TL_OK && job->exit_code == 0) {
        tlb_launch_say("cannot report this node finished: %s", tl_last_error());
        job->exit_code = 1;
    }
    if (job->opt.node_rank == 0) wait_for_other_nodes(job);
}

static void release_job(launch_job *job) {
    atomic_store(&job->watcher.stop, true);
    if (job->watcher.started) pthread_join(job->watcher.thread, NULL);
    tl_store_close(job->watcher.store);
    tl_store_close(job->store);
    tl_store_server_stop(job->server);
    free(job->ranks);
    explicit_bzero(job->secret, sizeof job->secret);
}

/* The ranks of a node share its cores: unless the user chose, each gets its share of OpenMP
   threads (OpenMP's spinning threads, more of them than cores, slow every rank down many-fold). */
static void share_cores(int nproc) {
    if (getenv("OMP_NUM_THREADS")) return;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    char text[24];
    snprintf(text, sizeof text, "%ld", cores / nproc > 1 ? cores / nproc : 1);
    setenv("OMP_NUM_THREADS", text, 0);
}

int tlb_launch_main(int argc, char **argv) {
    launch_job job = {0};
    atomic_init(&job.watcher.stop, false);
    atomic_init(&job.watcher.fired, false);
    if (!tlb_launch_parse(argc, argv, &job.opt) || !tlb_launch_secret(&job.opt, job.secret))
        return 1;
    share_cores(job.opt.nproc);
    job.ranks = calloc((size_t)job.opt.nproc, sizeof *job.ranks);
    if (!job.ranks || !start_store(&job)) {
        if (!job.ranks) tlb_launch_say("out of memory");
        release_job(&job);
        return 1;
    }
    sigemptyset(&job.handled);
    int handled[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT};
    for (size_t i = 0; i < sizeof handled / sizeof handled[0]; i++)
        sigaddset(&job.handled, handled[i]);
    pthread_sigmask(SIG_BLOCK, &job.handled, &job.saved_mask);
    /* the ranks' orphans (a script's os.execute) become our children: reaped, never zombies */
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    if (start_watcher(&job))
        spawn_ranks(&job, argc, argv);
    else
        job.exit_code = 1;
    monitor_ranks(&job);
    finish_nodes(&job);
    release_job(&job);
    pthread_sigmask(SIG_SETMASK, &job.saved_mask, NULL);
    return job.exit_code;
}

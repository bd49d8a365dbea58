/* tl.distributed's C half: the process group (with its store client) and its works as Lua
   objects, and the collectives. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "binding.h"
#include "tlua/distributed.h"

#define GROUP_NAME "tlua.ProcessGroup"
#define WORK_NAME  "tlua.Work"

typedef struct group_box {
    tl_store_server *server; /* rank 0's, when no launcher serves the store */
    tl_store *store;
    tl_process_group *group;
    bool self_served; /* a job whose rank 0 serves the store (torchrun, mpirun, srun) */
    int world;
} group_box;

/* How long rank 0 keeps serving for ranks still finishing their last collective. */
#define LEAVE_WAIT_MS 30000

/* In a job whose rank 0 serves the store, every rank counts itself out as its group goes, and
   rank 0 stops serving only once all have (or after LEAVE_WAIT_MS): a rank still in its last
   barrier is not cut off by rank 0's exit. */
static void leave_group(group_box *box) {
    if (!box->self_served || !box->store) return;
    int64_t left = 0;
    if (tl_store_add(box->store, "pg/left", 1, &left) != TL_OK || !box->server) return;
    const struct timespec pause = {.tv_sec = 0, .tv_nsec = 10 * 1000 * 1000};
    for (int waited = 0; left < box->world && waited < LEAVE_WAIT_MS; waited += 10) {
        nanosleep(&pause, NULL);
        if (tl_store_add(box->store, "pg/left", 0, &left) != TL_OK) return;
    }
}

typedef struct work_box {
    tl_work *work;
} work_box;

static int group_gc(lua_State *L) {
    group_box *box = luaL_checkudata(L, 1, GROUP_NAME);
    leave_group(box);
    tl_process_group_free(box->group);
    tl_store_close(box->store);
    tl_store_server_stop(box->server);
    box->group = NULL;
    box->store = NULL;
    box->server = NULL;
    return 0;
}

static int work_gc(lua_State *L) {
    work_box *box = luaL_checkudata(L, 1, WORK_NAME);
    tl_work_free(box->work);
    box->work = NULL;
    return 0;
}

/* Makes the metatables of groups and works (once per state). */
static void ensure_metatables(lua_State *L) {
    if (luaL_newmetatable(L, GROUP_NAME)) {
        lua_pushcfunction(L, group_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    if (luaL_newmetatable(L, WORK_NAME)) {
        lua_pushcfunction(L, work_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
}

static group_box *check_group(lua_State *L, int idx, const char *op) {
    group_box *box = luaL_testudata(L, idx, GROUP_NAME);
    if (!box || !box->group)
        tlb_errorf(L, "%s: expected a process group (tl.distributed.init()), got %s", op,
                   tlb_typename(L, idx));
    return box;
}

static int int_arg(lua_State *L, int idx, const char *op, const char *what) {
    int64_t v = tlb_check_int(L, idx, op, what);
    if (v < -2147483647 || v > 2147483647) tlb_errorf(L, "%s: %s out of range", op, what);
    return (int)v;
}

/* _dist_new_group(rank, world_size, cuda_device, host, port, timeout_s, secret?, serve?): a world
   of more than one rank connects to the store at host:port with secret (default: the launcher's
   TLUA_STORE_SECRET); with serve (an address to listen on: rank 0 of a job no launcher serves),
   this rank serves that store first */
static int dist_new_group(lua_State *L) {
    tlb_check_network(L, "distributed");
    int rank = int_arg(L, 1, "init", "rank");
    int world = int_arg(L, 2, "init", "world_size");
    int cuda_device = int_arg(L, 3, "init", "cuda_device");
    const char *host = luaL_optstring(L, 4, NULL);
    int port = lua_isnoneornil(L, 5) ? 0 : int_arg(L, 5, "init", "port");
    double timeout = luaL_optnumber(L, 6, 300);
    const char *secret = luaL_optstring(L, 7, NULL);
    const char *serve = luaL_optstring(L, 8, NULL);
    ensure_metatables(L);
    group_box *box = lua_newuserdatauv(L, sizeof *box, 0);
    box->server = NULL;
    box->store = NULL;
    box->group = NULL;
    box->self_served = secret != NULL; /* the launcher's jobs pass none */
    box->world = world;
    luaL_setmetatable(L, GROUP_NAME);
    if (world > 1) {
        if (!host) return tlb_errorf(L, "init: a world of %d ranks needs the store's host", world);
        if (!secret) secret = getenv("TLUA_STORE_SECRET");
        if (!secret || !*secret)
            return tlb_errorf(L,
                              "init: TLUA_STORE_SECRET is %s (a world of %d ranks meets in the "
                              "launcher's store, which needs the job's secret: start the script "
                              "with tlua --nproc N)",
                              secret ? "empty" : "not set", world);
        if (serve && tl_store_server_start(serve, port, secret, &box->server, NULL) != TL_OK)
            return tlb_fail(L);
        if (tl_store_connect(host, port, secret, timeout, &box->store) != TL_OK) return tlb_fail(L);
        if (tl_store_set_timeout(box->store, timeout) != TL_OK) return tlb_fail(L);
    }
    if (tl_process_group_new(box->store, rank, world, cuda_device, &box->group) != TL_OK)
        return tlb_fail(L);
    return 1;
}

/* The reduce op at idx ("sum" for nil) of the collective name: a bad one is the engine's error,
   which names all_reduce, renamed after name. */
static tl_reduce_op check_op(lua_State *L, int idx, const char *name) {
    tl_reduce_op op = TL_REDUCE_SUM;
    if (lua_isnoneornil(L, idx) || tl_reduce_op_parse(lua_tostring(L, idx), &op) == TL_OK)
        return op;
    const char *message = tl_last_error(), *prefix = "all_reduce: ";
    if (strncmp(message, prefix, strlen(prefix)) == 0)
        tlb_errorf(L, "%s: %s", name, message + strlen(prefix));
    tlb_fail(L);
    return op;
}

/* A new work object (pushed), for the start call to fill. */
static work_box *push_work(lua_State *L) {
    ensure_metatables(L);
    work_box *w = lua_newuserdatauv(L, sizeof *w, 0);
    w->work = NULL;
    luaL_setmetatable(L, WORK_NAME);
    return w;
}

/* _dist_all_reduce(group, t, op) */
static int dist_all_reduce(lua_State *L) {
    group_box *box = check_group(L, 1, "all_reduce");
    tl_tensor *t = tlb_check(L, 2, "all_reduce");
    if (tl_all_reduce(box->group, t, check_op(L, 3, "all_reduce")) != TL_OK) return tlb_fail(L);
    lua_settop(L, 2);
    return 1;
}

/* _dist_all_reduce_start(group, t, op) -> work */
static int dist_all_reduce_start(lua_State *L) {
    group_box *box = check_group(L, 1, "all_reduce");
    tl_tensor *t = tlb_check(L, 2, "all_reduce");
    tl_reduce_op op = check_op(L, 3, "all_reduce");
    work_box *w = push_work(L);
    if (tl_all_reduce_start(box->group, t, op, &w->work) != TL_OK) return tlb_fail(L);
    return 1;
}

/* _dist_reduce_scatter(group, out, t, op) -> out */
static int dist_reduce_scatter(lua_State *L) {
    group_box *box = check_group(L, 1, "reduce_scatter");
    tl_tensor *out = tlb_check(L, 2, "reduce_scatter");
    tl_tensor *t = tlb_check(L, 3, "reduce_scatter");
    if (tl_reduce_scatter(box->group, t, out, check_op(L, 4, "reduce_scatter")) != TL_OK)
        return tlb_fail(L);
    lua_settop(L, 2);
    return 1;
}

/* _dist_reduce_scatter_start(group, out, t, op) -> work */
static int dist_reduce_scatter_start(lua_State *L) {
    group_box *box = check_group(L, 1, "reduce_scatter");
    tl_tensor *out = tlb_check(L, 2, "reduce_scatter");
    tl_tensor *t = tlb_check(L, 3, "reduce_scatter");
    tl_reduce_op op = check_op(L, 4, "reduce_scatter");
    work_box *w = push_work(L);
    if (tl_reduce_scatter_start(box->group, t, out, op, &w->work) != TL_OK) return tlb_fail(L);
    return 1;
}

/* _dist_all_gather(group, out, t) -> out */
static int dist_all_gather(lua_State *L) {
    group_box *box = check_group(L, 1, "all_gather");
    tl_tensor *out = tlb_check(L, 2, "all_gather");
    tl_tensor *t = tlb_check(L, 3, "all_gather");
    if (tl_all_gather(box->group, t, out) != TL_OK) return tlb_fail(L);
    lua_settop(L, 2);
    return 1;
}

/* _dist_all_gather_start(group, out, t) -> work */
static int dist_all_gather_start(lua_State *L) {
    group_box *box = check_group(L, 1, "all_gather");
    tl_tensor *out = tlb_check(L, 2, "all_gather");
    tl_tensor *t = tlb_check(L, 3, "all_gather");
    work_box *w = push_work(L);
    if (tl_all_gather_start(box->group, t, out, &w->work) != TL_OK) return tlb_fail(L);
    return 1;
}

static work_box *check_work(lua_State *L, int idx, const char *op) {
    work_box *w = luaL_testudata(L, idx, WORK_NAME);
    if (!w || !w->work)
        tlb_errorf(L, "%s: expected a pending work, got %s", op, tlb_typename(L, idx));
    return w;
}

static int dist_work_wait(lua_State *L) {
    if (tl_work_wait(check_work(L, 1, "wait")->work) != TL_OK) return tlb_fail(L);
    return 0;
}

/* _dist_work_timing(work) -> queued_ms, comm_ms */
static int dist_work_timing(lua_State *L) {
    double queued = 0, comm = 0;
    if (tl_work_timing(check_work(L, 1, "timing")->work, &queued, &comm) != TL_OK)
        return tlb_fail(L);
    lua_pushnumber(L, queued);
    lua_pushnumber(L, comm);
    return 2;
}

/* _dist_broadcast(group, t, root) */
static int dist_broadcast(lua_State *L) {
    group_box *box = check_group(L, 1, "broadcast");
    tl_tensor *t = tlb_check(L, 2, "broadcast");
    int root = lua_isnoneornil(L, 3) ? 0 : int_arg(L, 3, "broadcast", "root");
    if (tl_broadcast(box->group, t, root) != TL_OK) return tlb_fail(L);
    lua_settop(L, 2);
    return 1;
}

static int dist_barrier(lua_State *L) {
    if (tl_barrier(check_group(L, 1, "barrier")->group) != TL_OK) return tlb_fail(L);
    return 0;
}

static tl_store *check_store(lua_State *L, int idx, const char *op) {
    group_box *box = check_group(L, idx, op);
    if (!box->store)
        tlb_errorf(L, "%s: a world of one has no store (start the script with tlua --nproc N)", op);
    return box->store;
}

/* _dist_store_set(group, key, value) */
static int dist_store_set(lua_State *L) {
    tl_store *store = check_store(L, 1, "store_set");
    const char *key = luaL_checkstring(L, 2);
    size_t n = 0;
    const char *value = luaL_checklstring(L, 3, &n);
    if (tl_store_set(store, key, value, n) != TL_OK) return tlb_fail(L);
    return 0;
}

/* _dist_store_get(group, key) -> value (waits for the key) */
static int dist_store_get(lua_State *L) {
    tl_store *store = check_store(L, 1, "store_get");
    const char *key = luaL_checkstring(L, 2);
    void *value = NULL;
    size_t n = 0;
    if (tl_store_get(store, key, &value, &n) != TL_OK) return tlb_fail(L);
    lua_pushlstring(L, value, n);
    free(value);
    return 1;
}

/* _dist_store_add(group, key, delta) -> new value */
static int dist_store_add(lua_State *L) {
    tl_store *store = check_store(L, 1, "store_add");
    const char *key = luaL_checkstring(L, 2);
    int64_t delta = tlb_check_int(L, 3, "store_add", "delta");
    int64_t out = 0;
    if (tl_store_add(store, key, delta, &out) != TL_OK) return tlb_fail(L);
    lua_pushinteger(L, out);
    return 1;
}

static int dist_nccl_available(lua_State *L) {
    lua_pushboolean(L, tl_distributed_nccl_available());
    return 1;
}

/* _dist_env(name) -> the value of a launcher variable (TLUA_...) or nil: how tl.distributed reads
   its rank and rendezvous where os.getenv is absent (an embedded sandbox granted the network);
   other names are refused */
static int dist_env(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    tlb_check_network(L, "distributed");
    if (strncmp(name, "TLUA_", 5) != 0)
        return tlb_errorf(
            L, "distributed: only the launcher's TLUA_ variables are readable, not '%s'", name);
    const char *value = getenv(name);
    if (value)
        lua_pushstring(L, value);
    else
        lua_pushnil(L);
    return 1;
}

const luaL_Reg tlb_distributed_functions[] = {
    {"_dist_env", dist_env},
    {"_dist_new_group", dist_new_group},
    {"_dist_all_reduce", dist_all_reduce},
    {"_dist_all_reduce_start", dist_all_reduce_start},
    {"_dist_reduce_scatter", dist_reduce_scatter},
    {"_dist_reduce_scatter_start", dist_reduce_scatter_start},
    {"_dist_all_gather", dist_all_gather},
    {"_dist_all_gather_start", dist_all_gather_start},
    {"_dist_work_wait", dist_work_wait},
    {"_dist_work_timing", dist_work_timing},
    {"_dist_broadcast", dist_broadcast},
    {"_dist_barrier", dist_barrier},
    {"_dist_store_set", dist_store_set},
    {"_dist_store_get", dist_store_get},
    {"_dist_store_add", dist_store_add},
    {"_dist_nccl_available", dist_nccl_available},
    {NULL, NULL},
};

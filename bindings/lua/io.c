/* File bindings: checkpoints (tl.save, tl.load: safetensors, atomic writes) and the IDX reader
   behind tl.data.read_idx (tl._read_idx). */
#include <stdlib.h>
#include <string.h>

#include "binding.h"
#include "tlua/io.h"

/* ---- save ------------------------------------------------------------------------------------ */
/* Converts a metadata value (string, number or boolean) to a string left on the stack. */
static const char *metadata_value(lua_State *L, int idx, const char *key) {
    switch (lua_type(L, idx)) {
    case LUA_TSTRING:
        lua_pushvalue(L, idx);
        break;
    case LUA_TNUMBER:
    case LUA_TBOOLEAN:
        luaL_tolstring(L, idx, NULL);
        break;
    default:
        tlb_errorf(L, "save: metadata '%s' expected a string, a number or a boolean, got %s", key,
                   tlb_typename(L, idx));
    }
    return lua_tostring(L, -1);
}

/* The path argument: a string (a number is not taken for a file name). */
static const char *check_path(lua_State *L, int idx, const char *op) {
    if (lua_type(L, idx) != LUA_TSTRING) tlb_type_error(L, idx, op, "a path (a string)");
    return lua_tostring(L, idx);
}

/* Counts the entries of the table at idx. */
static int count_entries(lua_State *L, int idx) {
    int n = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        if (n == 1 << 24) tlb_errorf(L, "save: too many entries");
        n++;
    }
    return n;
}

/* tl.save(path, {name = tensor, ...}, metadata?) with metadata {key = string, ...}. The file is
   written under a temporary name and renamed: on error the path is untouched. */
static int io_save(lua_State *L) {
    check_path(L, 1, "save");
    const char *path = tlb_check_file(L, 1, 'w', "save");
    if (!lua_istable(L, 2)) return tlb_type_error(L, 2, "save", "a table of named tensors");
    bool has_metadata = !lua_isnoneornil(L, 3);
    if (has_metadata && !lua_istable(L, 3))
        return tlb_type_error(L, 3, "save", "a metadata table {key = string} or nil");
    lua_settop(L, 3);

    int count = count_entries(L, 2);
    tl_named_tensor *tensors =
        lua_newuserdatauv(L, sizeof *tensors * (size_t)(count > 0 ? count : 1), 0); /* 4 */
    int i = 0;
    lua_pushnil(L);
    while (lua_next(L, 2)) {
        if (lua_type(L, -2) != LUA_TSTRING)
            return tlb_errorf(L, "save: tensor names must be strings, got a %s key",
                              luaL_typename(L, -2));
        const char *name = lua_tostring(L, -2); /* anchored by the table */
        tl_tensor *t = tlb_totensor(L, -1, "save");
        if (!t)
            return tlb_errorf(L, "save: entry '%s' expected a tensor, got %s", name,
                              tlb_typename(L, -1));
        tensors[i].name = name;
        tensors[i].tensor = t;
        i++;
        lua_pop(L, 1);
    }

    int metadata_count = has_metadata ? count_entries(L, 3) : 0;
    tl_metadata_entry *metadata = NULL;
    if (metadata_count > 0) {
        metadata = lua_newuserdatauv(L, sizeof *metadata * (size_t)metadata_count, 0); /* 5 */
        lua_createtable(L, metadata_count, 0); /* 6: anchors the converted strings */
        int m = 0;
        lua_pushnil(L);
        while (lua_next(L, 3)) {
            if (lua_type(L, -2) != LUA_TSTRING)
                return tlb_errorf(L, "save: metadata keys must be strings, got a %s key",
                                  luaL_typename(L, -2));
            const char *key = lua_tostring(L, -2);
            const char *value = metadata_value(L, -1, key);
            lua_rawseti(L, 6, m + 1); /* pops the string, which stays alive in the table */
            metadata[m].key = key;
            metadata[m].value = value;
            m++;
            lua_pop(L, 1);
        }
    }
    if (tl_save_safetensors(path, tensors, count, metadata, metadata_count) != TL_OK)
        return tlb_fail(L);
    return 0;
}

/* ---- load ------------------------------------------------------------------------------------ */
/* What tl_load_safetensors returned, freed when the call ends, whatever way it ends. */
typedef struct loaded {
    tl_named_tensor *tensors;
    int count;
    tl_metadata_entry *metadata;
    int metadata_count;
} loaded;

static int loaded_free(lua_State *L) {
    loaded *l = lua_touserdata(L, 1);
    if (l && (l->tensors || l->metadata)) {
        tl_safetensors_free(l->tensors, l->count, l->metadata, l->metadata_count);
        l->tensors = NULL, l->metadata = NULL;
        l->count = l->metadata_count = 0;
    }
    return 0;
}

static const char loaded_key = 'L';

/* tl.load(path) -> {name = tensor, ...} (CPU tensors), {key = string, ...} (the metadata). A
   truncated, corrupt or unreadable file raises and loads nothing. */
static int io_load(lua_State *L) {
    check_path(L, 1, "load");
    const char *path = tlb_check_file(L, 1, 'r', "load");
    loaded *l = lua_newuserdatauv(L, sizeof *l, 0);
    memset(l, 0, sizeof *l);
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &loaded_key) == LUA_TNIL) {
        lua_pop(L, 1);
        tlb_push_guard_metatable(L, loaded_free);
        lua_pushvalue(L, -1);
        lua_rawsetp(L, LUA_REGISTRYINDEX, &loaded_key);
    }
    lua_setmetatable(L, -2);
    lua_toclose(L, -1);
    if (tl_load_safetensors(path, &l->tensors, &l->count, &l->metadata, &l->metadata_count) !=
        TL_OK)
        return tlb_fail(L);
    lua_createtable(L, 0, l->count);
    for (int i = 0; i < l->count; i++) {
        tlb_box *box = tlb_newbox(L);
        box->tensor = tl_retain(l->tensors[i].tensor);
        tlb_account(L, box->tensor);
        lua_setfield(L, -2, l->tensors[i].name);
    }
    lua_createtable(L, 0, l->metadata_count);
    for (int i = 0; i < l->metadata_count; i++) {
        lua_pushstring(L, l->metadata[i].value);
        lua_setfield(L, -2, l->metadata[i].key);
    }
    return 2; /* closing the guard frees the loader's arrays and references */
}

/* ---- IDX ------------------------------------------------------------------------------------- */
/* tl._read_idx(path) -> the tensor (int32 for the integer types, as tl_read_idx gives it) */
static int io_read_idx(lua_State *L) {
    check_path(L, 1, "read_idx");
    const char *path = tlb_check_file(L, 1, 'r', "read_idx");
    tl_tensor *out = NULL;
    tlb_box *box = tlb_newbox(L);
    tl_status status = tl_read_idx(path, &out);
    return tlb_result(L, box, status, out);
}

/* tl._is_readable(path) -> whether a file at path can be opened for reading (false outside the
   folders a sandboxed state was granted, whatever lies there) */
static int io_is_readable(lua_State *L) {
    check_path(L, 1, "is_readable");
    lua_pushboolean(L, tlb_file_readable(L, lua_tostring(L, 1)));
    return 1;
}

const luaL_Reg tlb_io_functions[] = {
    {"_is_readable", io_is_readable}, {"save", io_save}, {"load", io_load},
    {"_read_idx", io_read_idx},       {NULL, NULL},
};

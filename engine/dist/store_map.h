/* The store server's data: reference-counted values (blobs) and the key -> value hash map. */
#ifndef TLUA_DIST_STORE_MAP_H
#define TLUA_DIST_STORE_MAP_H

#include <stdbool.h>
#include <stddef.h>

/* A value's bytes, shared by the map and by the replies that still send it. */
typedef struct store_blob {
    size_t refs;
    size_t size;
    unsigned char bytes[];
} store_blob;

/* A blob of size bytes with one reference (its bytes uninitialized), or NULL when out of memory. */
store_blob *store_blob_new(size_t size);
store_blob *store_blob_retain(store_blob *blob);
/* Drops a reference; the last one frees the blob. NULL is a no-op. */
void store_blob_release(store_blob *blob);

typedef struct store_entry store_entry;
typedef struct store_map {
    store_entry **buckets;
    size_t bucket_count, count;
} store_map;

/* The value under key (borrowed), or NULL when absent. */
store_blob *store_map_find(const store_map *map, const char *key, size_t key_len);
/* Puts value under key, taking the caller's reference; a previous value is released. Returns
   false (value not taken, map unchanged) when out of memory. */
bool store_map_put(store_map *map, const char *key, size_t key_len, store_blob *value);
/* Removes key (absent keys are no error). */
void store_map_remove(store_map *map, const char *key, size_t key_len);
/* Removes every key and frees the map's memory. */
void store_map_clear(store_map *map);

#endif

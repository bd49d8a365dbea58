/* The store server's data: reference-counted values and a chained hash map of keys to them. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store_map.h"

struct store_entry {
    store_entry *next;
    uint64_t hash;
    store_blob *value;
    size_t key_len;
    char key[];
};

enum { FIRST_BUCKET_COUNT = 64 };

store_blob *store_blob_new(size_t size) {
    if (size > SIZE_MAX - sizeof(store_blob)) return NULL;
    store_blob *blob = malloc(sizeof(store_blob) + size);
    if (!blob) return NULL;
    blob->refs = 1;
    blob->size = size;
    return blob;
}

store_blob *store_blob_retain(store_blob *blob) {
    blob->refs++;
    return blob;
}

void store_blob_release(store_blob *blob) {
    if (blob && --blob->refs == 0) free(blob);
}

/* FNV-1a over the key's bytes. */
static uint64_t key_hash(const char *key, size_t key_len) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < key_len; i++) {
        h ^= (unsigned char)key[i];
        h *= 1099511628211ull;
    }
    return h;
}

static store_entry **find_slot(const store_map *map, const char *key, size_t key_len,
                               uint64_t hash) {
    store_entry **slot = &map->buckets[hash & (map->bucket_count - 1)];
    for (; *slot; slot = &(*slot)->next) {
        const store_entry *e = *slot;
        if (e->hash == hash && e->key_len == key_len && memcmp(e->key, key, key_len) == 0)
            return slot;
    }
    return slot;
}

store_blob *store_map_find(const store_map *map, const char *key, size_t key_len) {
    if (!map->buckets) return NULL;
    store_entry *e = *find_slot(map, key, key_len, key_hash(key, key_len));
    return e ? e->value : NULL;
}

/* Doubles the bucket array (or makes the first one); false when out of memory. */
static bool grow_buckets(store_map *map) {
    size_t count = map->bucket_count ? map->bucket_count * 2 : FIRST_BUCKET_COUNT;
    store_entry **buckets = calloc(count, sizeof *buckets);
    if (!buckets) return false;
    for (size_t b = 0; b < map->bucket_count; b++) {
        store_entry *e = map->buckets[b];
        while (e) {
            store_entry *next = e->next;
            store_entry **head = &buckets[e->hash & (count - 1)];
            e->next = *head;
            *head = e;
            e = next;
        }
    }
    free(map->buckets);
    map->buckets = buckets;
    map->bucket_count = count;
    return true;
}

bool store_map_put(store_map *map, const char *key, size_t key_len, store_blob *value) {
    if (map->count >= map->bucket_count && !grow_buckets(map) && !map->buckets) return false;
    uint64_t hash = key_hash(key, key_len);
    store_entry **slot = find_slot(map, key, key_len, hash);
    if (*slot) {
        store_blob_release((*slot)->value);
        (*slot)->value = value;
        return true;
    }
    store_entry *e = malloc(sizeof *e + key_len);
    if (!e) return false;
    e->next = NULL;
    e->hash = hash;
    e->value = value;
    e->key_len = key_len;
    memcpy(e->key, key, key_len);
    *slot = e;
    map->count++;
    return true;
}

void store_map_remove(store_map *map, const char *key, size_t key_len) {
    if (!map->buckets) return;
    store_entry **slot = find_slot(map, key, key_len, key_hash(key, key_len));
    store_entry *e = *slot;
    if (!e) return;
    *slot = e->next;
    store_blob_release(e->value);
    free(e);
    map->count--;
}

void store_map_clear(store_map *map) {
    for (size_t b = 0; b < map->bucket_count; b++) {
        store_entry *e = map->buckets[b];
        while (e) {
            store_entry *next = e->next;
            store_blob_release(e->value);
            free(e);
            e = next;
        }
    }
    free(map->buckets);
    map->buckets = NULL;
    map->bucket_count = map->count = 0;
}

/* A C host of tlua: runs the model a Lua config describes on its own data, checked in C. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* access */
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tlua/embed.h>

/* Prints the engine's message for a failed call and says so. */
static bool ok(tl_status status, const char *what) {
    if (status == TL_OK) return true;
    fprintf(stderr, "host: %s failed: %s\n", what, tl_last_error());
    return false;
}

/* A whole number >= 1 of the configuration. */
static bool get_count(tl_lua *lua, const char *path, int *out) {
    double value;
    if (!ok(tl_lua_get_number(lua, path, &value), path)) return false;
    if (value < 1 || value > 1e6 || value != floor(value)) {
        fprintf(stderr, "host: %s must be a whole number >= 1, got %g\n", path, value);
        return false;
    }
    *out = (int)value;
    return true;
}

/* ---- the reference: the MLP of the checkpoint in plain C loops ----------------------------- */
static float activate(const char *name, float x) {
    if (strcmp(name, "Tanh") == 0) return tanhf(x);
    if (strcmp(name, "ReLU") == 0) return x > 0 ? x : 0;
    if (strcmp(name, "Sigmoid") == 0) return 1 / (1 + expf(-x));
    if (strcmp(name, "SiLU") == 0) return x / (1 + expf(-x));
    return NAN; /* an activation this reference does not know */
}

/* The tensor called name in the checkpoint, or NULL. */
static tl_tensor *find(const tl_named_tensor *tensors, int count, const char *name) {
    for (int i = 0; i < count; i++)
        if (strcmp(tensors[i].name, name) == 0) return tensors[i].tensor;
    return NULL;
}

/* y [batch, outputs] = the MLP whose Sequential layers 1, 3, 5, ... are the Linear ones (the
   activations between them), weights read from the checkpoint file by the engine's C API. */
static bool reference(const char *checkpoint, const char *activation, const float *x, int batch,
                      int inputs, int outputs, float *y) {
    tl_named_tensor *tensors;
    int count;
    if (!ok(tl_load_safetensors(checkpoint, &tensors, &count, NULL, NULL), "loading the weights"))
        return false;
    int width = inputs;
    float *h = malloc(sizeof *h * (size_t)batch * (size_t)width);
    bool good = h != NULL;
    if (good) memcpy(h, x, sizeof *h * (size_t)batch * (size_t)width);
    for (int layer = 1; good; layer += 2) {
        char wname[32], bname[32];
        snprintf(wname, sizeof wname, "%d.weight", layer);
        snprintf(bname, sizeof bname, "%d.bias", layer);
        tl_tensor *w = find(tensors, count, wname), *b = find(tensors, count, bname);
        if (!w) break;
        if (!b || w->dtype != TL_F32 || w->ndim != 2 || w->shape[1] != width) {
            fprintf(stderr, "host: the checkpoint's %s is not a float32 [n, %d] weight\n", wname,
                    width);
            good = false;
            break;
        }
        int n = (int)w->shape[0];
        const float *wd = tl_data(w), *bd = tl_data(b);
        float *next = malloc(sizeof *next * (size_t)batch * (size_t)n);
        if (!next) {
            good = false;
            break;
        }
        char next_name[32];
        snprintf(next_name, sizeof next_name, "%d.weight", layer + 2);
        bool last = !find(tensors, count, next_name); /* no activation after the last layer */
        for (int r = 0; r < batch; r++)
            for (int o = 0; o < n; o++) {
                double sum = bd[o];
                for (int i = 0; i < width; i++)
                    sum += (double)wd[(size_t)o * width + i] * h[(size_t)r * width + i];
                next[(size_t)r * n + o] = last ? (float)sum : activate(activation, (float)sum);
            }
        free(h);
        h = next;
        width = n;
    }
    if (good && width != outputs) {
        fprintf(stderr, "host: the checkpoint's model has %d outputs, expected %d\n", width,
                outputs);
        good = false;
    }
    if (good) memcpy(y, h, sizeof *y * (size_t)batch * (size_t)outputs);
    free(h);
    tl_safetensors_free(tensors, count, NULL, 0);
    return good;
}

/* ---- the host ------------------------------------------------------------------------------ */
static int run(tl_lua *lua, const char *config) {
    if (!ok(tl_lua_dofile(lua, config), "loading the configuration")) return 1;
    int batch, inputs, outputs;
    if (!get_count(lua, "batch_size", &batch) || !get_count(lua, "model.inputs", &inputs) ||
        !get_count(lua, "model.outputs", &outputs))
        return 1;
    const char *value;
    char checkpoint[4096], activation[64];
    if (!ok(tl_lua_get_string(lua, "checkpoint", &value), "checkpoint")) return 1;
    snprintf(checkpoint, sizeof checkpoint, "%s", value); /* valid until the next call: copied */
    if (!ok(tl_lua_get_string(lua, "model.activation", &value), "model.activation")) return 1;
    snprintf(activation, sizeof activation, "%s", value);

    /* a real host gets its checkpoint from training; this one writes the initial weights
       when there is none yet, so that the example runs anywhere */
    if (access(checkpoint, R_OK) != 0) {
        printf("no checkpoint at %s: writing the model's initial weights\n", checkpoint);
        if (!ok(tl_lua_call(lua, "save_checkpoint", NULL, 0, NULL, 0), "save_checkpoint")) return 1;
    }
    if (!ok(tl_lua_call(lua, "load_checkpoint", NULL, 0, NULL, 0), "load_checkpoint")) return 1;
    printf("model %d -> %s -> %d, checkpoint %s, batch %d\n", inputs, activation, outputs,
           checkpoint, batch);

    /* the host's data: a batch of inputs in its own buffer, copied into a tensor */
    size_t n_x = (size_t)batch * (size_t)inputs, n_y = (size_t)batch * (size_t)outputs;
    float *x = malloc(sizeof *x * n_x), *y = malloc(sizeof *y * n_y),
          *expected = malloc(sizeof *expected * n_y);
    int status = 1;
    tl_tensor *input = NULL, *output = NULL;
    if (!x || !y || !expected) goto done;
    for (size_t i = 0; i < n_x; i++) x[i] = sinf(0.7f * (float)i) * 2.0f;
    int64_t shape[2] = {batch, inputs};
    if (!ok(tl_from_host(x, shape, 2, TL_F32, TL_CPU, &input), "wrapping the input")) goto done;
    if (!ok(tl_lua_call(lua, "predict", &input, 1, &output, 1), "predict")) goto done;
    if (output->dtype != TL_F32 || output->ndim != 2 || output->shape[0] != batch ||
        output->shape[1] != outputs) {
        char got[64];
        fprintf(stderr, "host: predict returned %s, expected float32 [%d, %d]\n",
                tl_shape_str(output, got, sizeof got), batch, outputs);
        goto done;
    }
    if (!ok(tl_to_host(output, y), "reading the output")) goto done;
    for (int r = 0; r < batch; r++) {
        printf("y[%d] =", r + 1);
        for (int o = 0; o < outputs; o++) printf(" %9.6f", y[(size_t)r * outputs + o]);
        printf("\n");
    }

    if (!reference(checkpoint, activation, x, batch, inputs, outputs, expected)) goto done;
    double worst = 0;
    for (size_t i = 0; i < n_y; i++) {
        double diff = fabs((double)y[i] - expected[i]);
        if (!(diff <= worst)) worst = diff; /* NaN too */
    }
    bool same = worst <= 1e-5;
    printf("plain C reference: max |difference| %.3g: %s\n", worst, same ? "ok" : "MISMATCH");
    status = same ? 0 : 1;
done:
    tl_release(input);
    tl_release(output);
    free(x);
    free(y);
    free(expected);
    return status;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s CONFIG.lua (e.g. examples/embed/model.lua)\n", argv[0]);
        return 2;
    }
    /* the configuration is code: run it in the sandbox, with limits; its checkpoint lives in the
       working folder, the only folder it may read and write */
    static const char *const here[] = {".", NULL};
    tl_lua_options options = {.sandbox = true,
                              .memory_limit = 64u << 20,
                              .instruction_limit = 100000000,
                              .time_limit_ms = 60000,
                              .read_dirs = here,
                              .write_dirs = here};
    tl_lua *lua;
    if (!ok(tl_lua_open(&options, &lua), "opening Lua")) return 1;
    int status = run(lua, argv[1]);
    tl_lua_close(lua);
    return status;
}

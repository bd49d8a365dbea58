/* The tlua executable: the stock lua interpreter's ways, tlua.core built in, `tl` preloaded. */
#define _XOPEN_SOURCE 700 /* strdup */
#include <limits.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <readline/history.h>
#include <readline/readline.h>

#include "binding.h"
#include "launch.h"

#ifndef TLUA_VERSION
#define TLUA_VERSION "0.0.0"
#endif

#define PROMPT         "> "
#define PROMPT2        ">> "
#define HISTORY_FILE   ".tlua_history"
#define HISTORY_LINES  1000
#define MAX_INPUT_LINE 4096

static const char *progname = "tlua";
static lua_State *signal_state; /* the state a SIGINT interrupts */

/* ---- messages ------------------------------------------------------------- */
static void print_usage(const char *bad) {
    fprintf(stderr, "%s: ", progname);
    if (bad[1] == 'e' || bad[1] == 'l')
        fprintf(stderr, "'%s' needs argument\n", bad);
    else
        fprintf(stderr, "unrecognized option '%s'\n", bad);
    fprintf(stderr,
            "usage: %s [options] [script [args]]\n"
            "Available options are:\n"
            "  -e stat   execute string 'stat'\n"
            "  -i        enter interactive mode after executing 'script'\n"
            "  -l mod    require library 'mod' into global 'mod'\n"
            "  -l g=mod  require library 'mod' into global 'g'\n"
            "  -v        show version information\n"
            "  -E        ignore environment variables\n"
            "  -W        turn warnings on\n"
            "  --        stop handling options\n"
            "  -         stop handling options and execute stdin\n"
            "  --nproc N [launcher options] script [args]\n"
            "            run N ranks of script for data-parallel training\n"
            "            (`tlua --nproc` alone lists the launcher's options)\n"
            "The global 'tl' holds require(\"tlua\") from the start.\n",
            progname);
}

static void print_version(void) {
    printf("tlua %s (%s)\n", TLUA_VERSION, LUA_RELEASE);
    fflush(stdout);
}

static void message(const char *name, const char *msg) {
    if (name) fprintf(stderr, "%s: ", name);
    fprintf(stderr, "%s\n", msg);
    fflush(stderr);
}

/* Prints the error on top of the stack (if status is an error) and pops it. */
static int report(lua_State *L, int status) {
    if (status != LUA_OK) {
        const char *msg = lua_tostring(L, -1);
        message(progname, msg ? msg : "(error object is not a string)");
        lua_pop(L, 1);
    }
    return status;
}

/* ---- protected calls with a traceback, interruptible by Ctrl-C ------------- */
static void stop_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    lua_sethook(L, NULL, 0, 0);
    luaL_error(L, "interrupted!");
}

/* Installs a SIGINT handler by sigaction (glibc's signal() under _XOPEN_SOURCE has System V
   semantics: reset to the default at the first delivery, so a second Ctrl-C at one prompt
   would kill the REPL). `once` resets it to the default when it fires. */
static void set_sigint(void (*handler)(int), bool once) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = handler;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART | (once ? SA_RESETHAND : 0);
    sigaction(SIGINT, &action, NULL);
}

/* Ctrl-C while code runs: the code stops with "interrupted!" at its next call, return or
   instruction; a second Ctrl-C before that kills the process (SA_RESETHAND). */
static void on_sigint(int sig) {
    (void)sig;
    if (signal_state)
        lua_sethook(signal_state, stop_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

static int docall(lua_State *L, int nargs, int nresults) {
    int base = lua_gettop(L) - nargs;
    lua_pushcfunction(L, tlb_traceback);
    lua_insert(L, base);
    signal_state = L;
    set_sigint(on_sigint, true);
    int status = lua_pcall(L, nargs, nresults, base);
    set_sigint(SIG_DFL, false);
    lua_remove(L, base);
    return status;
}

static int dochunk(lua_State *L, int status) {
    if (status == LUA_OK) status = docall(L, 0, 0);
    return report(L, status);
}

static int dostring(lua_State *L, const char *s, const char *name) {
    return dochunk(L, luaL_loadbuffer(L, s, strlen(s), name));
}

/* -l mod or -l g=mod: g = require(mod) */
static int dolibrary(lua_State *L, const char *spec) {
    const char *eq = strchr(spec, '=');
    const char *module = eq ? eq + 1 : spec;
    lua_getglobal(L, "require");
    lua_pushstring(L, module);
    int status = docall(L, 1, 1);
    if (status == LUA_OK) {
        lua_pushglobaltable(L); /* result, _G */
        lua_insert(L, -2);      /* _G, result */
        if (eq)
            lua_pushlstring(L, spec, (size_t)(eq - spec));
        else
            lua_pushstring(L, spec);
        lua_insert(L, -2); /* _G, name, result */
        lua_settable(L, -3);
        lua_pop(L, 1);
    }
    return report(L, status);
}

/* ---- arguments -------------------------------------------------------------- */
enum { HAS_ERROR = 1, HAS_I = 2, HAS_V = 4, HAS_E = 8, HAS_UPPER_E = 16 };

/* Scans the options; *script gets the index of the script (argc when none,
   or the bad option on error). */
static int collect_args(char **argv, int *script) {
    int flags = 0, i;
    for (i = 1; argv[i]; i++) {
        *script = i;
        const char *a = argv[i];
        if (a[0] != '-') return flags;
        switch (a[1]) {
        case '-':
            if (a[2]) return HAS_ERROR;
            *script = i + 1;
            return flags;
        case '\0':
            return flags; /* "-": stdin is the script */
        case 'E':
            if (a[2]) return HAS_ERROR;
            flags |= HAS_UPPER_E;
            break;
        case 'W':
            if (a[2]) return HAS_ERROR;
            break;
        case 'i':
            if (a[2]) return HAS_ERROR;
            flags |= HAS_I | HAS_V;
            break;
        case 'v':
            if (a[2]) return HAS_ERROR;
            flags |= HAS_V;
            break;
        case 'e':
        case 'l':
            if (a[1] == 'e') flags |= HAS_E;
            if (!a[2]) {
                i++;
                if (!argv[i] || argv[i][0] == '-') {
                    *script = i - 1;
                    return HAS_ERROR;
                }
            }
            break;
        default:
            return HAS_ERROR;
        }
    }
    *script = i;
    return flags;
}

/* arg[0] = script, arg[1..] = its arguments, negative indices for the
   interpreter and the options before the script */
static void create_arg_table(lua_State *L, char **argv, int argc, int script) {
    if (script == argc) script = 0;
    lua_createtable(L, argc - (script + 1) > 0 ? argc - (script + 1) : 0, script + 1);
    for (int i = 0; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i - script);
    }
    lua_setglobal(L, "arg");
}

/* Runs -e and -l in order. */
static int run_args(lua_State *L, char **argv, int limit) {
    for (int i = 1; i < limit; i++) {
        char option = argv[i][1];
        if (option == 'W') {
            lua_warning(L, "@on", 0);
            continue;
        }
        if (option != 'e' && option != 'l') continue;
        const char *value = argv[i] + 2;
        if (!*value) value = argv[++i];
        int status = option == 'e' ? dostring(L, value, "=(command line)") : dolibrary(L, value);
        if (status != LUA_OK) return 0;
    }
    return 1;
}

static int run_init(lua_State *L) {
    const char *name = "=LUA_INIT_5_4";
    const char *init = getenv("LUA_INIT_5_4");
    if (!init) {
        name = "=LUA_INIT";
        init = getenv("LUA_INIT");
    }
    if (!init) return LUA_OK;
    if (init[0] == '@') return dochunk(L, luaL_loadfile(L, init + 1));
    return dostring(L, init, name);
}

static int run_script(lua_State *L, char **argv) {
    const char *name = argv[0];
    if (strcmp(name, "-") == 0 && strcmp(argv[-1], "--") != 0) name = NULL; /* stdin */
    int status = luaL_loadfile(L, name);
    if (status == LUA_OK) {
        if (lua_getglobal(L, "arg") != LUA_TTABLE) {
            lua_pop(L, 2);
            lua_pushliteral(L, "'arg' is not a table");
            return report(L, LUA_ERRRUN);
        }
        int n = (int)luaL_len(L, -1);
        luaL_checkstack(L, n + 3, "too many arguments to script");
        for (int i = 1; i <= n; i++) lua_rawgeti(L, -i, i);
        lua_remove(L, -n - 1);
        status = docall(L, n, LUA_MULTRET);
    }
    return report(L, status);
}

/* ---- the REPL ----------------------------------------------------------------- */
static bool use_readline;
static char history_path[PATH_MAX];

/* ---- tab completion: globals, fields of tables (tl.ze<TAB>), tensor methods (t:su<TAB>) */
static lua_State *completion_state;
static char **completion_list; /* the candidates of the current completion, NULL-ended */
static size_t completion_next;

static void free_completions(void) {
    if (!completion_list) return;
    for (size_t i = 0; completion_list[i]; i++) free(completion_list[i]);
    free(completion_list);
    completion_list = NULL;
}

static bool is_identifier(const char *s) {
    if (!(s[0] == '_' || (s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z')))
        return false;
    for (const char *p = s + 1; *p; p++)
        if (!(*p == '_' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
              (*p >= '0' && *p <= '9')))
            return false;
    return true;
}

/* Adds to the result table (index `out`) prefix..key for each identifier key
   of the table at `from` that starts with `partial`. */
static void add_keys(lua_State *L, int from, int out, const char *prefix, const char *partial) {
    size_t len = strlen(partial);
    lua_pushnil(L);
    while (lua_next(L, from)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) != LUA_TSTRING) continue;
        const char *key = lua_tostring(L, -1);
        if (strncmp(key, partial, len) != 0 || !is_identifier(key)) continue;
        lua_pushfstring(L, "%s%s", prefix, key);
        lua_rawseti(L, out, (lua_Integer)lua_rawlen(L, out) + 1);
    }
}

/* Pushes the table whose keys complete after a value: the value itself for a
   table, else its metatable's __index table, or (for a tensor, whose __index
   is a function) that function's methods table; nil when none. */
static void push_key_source(lua_State *L, int value) {
    if (lua_istable(L, value)) {
        lua_pushvalue(L, value);
        return;
    }
    if (luaL_getmetafield(L, value, "__index") == LUA_TNIL) {
        lua_pushnil(L);
        return;
    }
    if (lua_iscfunction(L, -1) && lua_getupvalue(L, -1, 2)) { /* tensors: the methods */
        lua_remove(L, -2);
        return;
    }
    if (!lua_istable(L, -1)) lua_pushnil(L), lua_remove(L, -2);
}

static void find_completions(lua_State *L, const char *text, int out) {
    const char *cut = NULL;
    for (const char *p = text; *p; p++)
        if (*p == '.' || *p == ':') cut = p;
    lua_pushglobaltable(L);
    if (!cut) {
        add_keys(L, lua_gettop(L), out, "", text);
        return;
    }
    /* walk the dotted path before the last separator, by raw lookups */
    const char *p = text;
    while (p < cut) {
        const char *dot = p;
        while (dot < cut && *dot != '.' && *dot != ':') dot++;
        lua_pushlstring(L, p, (size_t)(dot - p));
        push_key_source(L, -2);
        if (lua_isnil(L, -1)) return;
        lua_insert(L, -2);
        lua_gettable(L, -2); /* through __index: tl.nn loads on first use */
        p = dot + 1;
    }
    const int value = lua_gettop(L);
    push_key_source(L, value);
    if (lua_isnil(L, -1)) return;
    lua_pushlstring(L, text, (size_t)(cut - text + 1));
    const char *prefix = lua_tostring(L, -1);
    add_keys(L, lua_gettop(L) - 1, out, prefix, cut + 1);
    /* names a table loads on first use (tl's submodules), listed in its metatable; the loaded
       ones are keys already listed */
    if (lua_istable(L, value) && luaL_getmetafield(L, value, "__completions") == LUA_TTABLE) {
        const size_t len = strlen(cut + 1);
        for (lua_Integer i = 1; lua_rawgeti(L, -1, i) == LUA_TSTRING; i++) {
            lua_pushvalue(L, -1);
            const bool loaded = lua_rawget(L, value) != LUA_TNIL;
            lua_pop(L, 1);
            const char *name = lua_tostring(L, -1);
            if (!loaded && strncmp(name, cut + 1, len) == 0) {
                lua_pushfstring(L, "%s%s", prefix, name);
                lua_rawseti(L, out, (lua_Integer)lua_rawlen(L, out) + 1);
            }
            lua_pop(L, 1);
        }
    }
}

static int collect_completions(lua_State *L) {
    const char *text = lua_touserdata(L, 1);
    lua_newtable(L);
    int out = lua_gettop(L);
    find_completions(L, text, out);
    lua_settop(L, out);
    return 1;
}

static char *next_completion(const char *text, int state) {
    (void)text;
    if (state == 0) completion_next = 0;
    if (!completion_list || !completion_list[completion_next]) return NULL;
    return strdup(completion_list[completion_next++]);
}

static char **complete(const char *text, int start, int end) {
    (void)start, (void)end;
    rl_attempted_completion_over = 1; /* no file names */
    rl_completion_append_character = '\0';
    free_completions();
    lua_State *L = completion_state;
    int top = lua_gettop(L);
    if (!lua_checkstack(L, 8)) return NULL;
    lua_pushcfunction(L, collect_completions);
    lua_pushlightuserdata(L, (void *)text);
    if (lua_pcall(L, 1, 1, 0) == LUA_OK && lua_istable(L, -1)) {
        size_t n = (size_t)lua_rawlen(L, -1);
        completion_list = calloc(n + 1, sizeof *completion_list);
        for (size_t i = 0; completion_list && i < n; i++) {
            lua_rawgeti(L, -1, (lua_Integer)i + 1);
            completion_list[i] = strdup(lua_tostring(L, -1));
            lua_pop(L, 1);
        }
    }
    lua_settop(L, top);
    return rl_completion_matches(text, next_completion);
}

/* Ctrl-C at the prompt: the line typed so far is dropped and a fresh prompt drawn; the REPL
   stays (readline's own handler is off: rl_catch_signals). */
static void on_prompt_interrupt(int sig) {
    (void)sig;
    rl_replace_line("", 0);
    rl_crlf();
    rl_on_new_line();
    rl_redisplay();
}

static void repl_begin(lua_State *L) {
    use_readline = isatty(STDIN_FILENO);
    if (!use_readline) return;
    rl_readline_name = "tlua";
    rl_catch_signals = 0;
    completion_state = L;
    rl_attempted_completion_function = complete;
    rl_basic_word_break_characters = " \t\n\"\\'`@$><=;|&{}()[]+-*/%^~#,";
    using_history();
    const char *home = getenv("HOME");
    if (home && snprintf(history_path, sizeof history_path, "%s/%s", home, HISTORY_FILE) <
                    (int)sizeof history_path) {
        /* each line is appended as it is entered (kept whatever ends the session) */
        if (read_history(history_path) != 0 && write_history(history_path) != 0)
            history_path[0] = '\0';
    } else {
        history_path[0] = '\0';
    }
}

static void repl_end(void) {
    if (!use_readline) return;
    if (history_path[0]) history_truncate_file(history_path, HISTORY_LINES);
    clear_history();
    free_completions();
}

/* The first line as typed, when the REPL ran it rewritten ("=x", "?name"): history keeps it. */
static char typed_line[MAX_INPUT_LINE];
static bool line_rewritten;

static void remember(const char *line) {
    if (line_rewritten) line = typed_line;
    if (!use_readline || !line[0]) return;
    add_history(line);
    if (history_path[0]) append_history(1, history_path);
}

/* Pushes a first line as the REPL runs it: "=expr" returns expr, "?name" asks help for name. */
static void push_first_line(lua_State *L, const char *line, size_t len) {
    size_t skip = strspn(line, " \t");
    line_rewritten = line[skip] == '=' || line[skip] == '?';
    snprintf(typed_line, sizeof typed_line, "%s", line);
    if (line[skip] == '=') {
        lua_pushfstring(L, "return %s", line + skip + 1);
    } else if (line[skip] == '?') {
        /* the name as a long string: ?tl.cat -> help([==[tl.cat]==]) */
        lua_pushfstring(L, "help([==[%s]==])", line + skip + 1);
    } else {
        lua_pushlstring(L, line, len);
    }
}

/* Reads a line (without its newline) and pushes it; 0 at end of input. */
static int push_line(lua_State *L, bool first) {
    int top = lua_gettop(L);
    const char *prompt = first ? PROMPT : PROMPT2;
    if (lua_getglobal(L, first ? "_PROMPT" : "_PROMPT2") != LUA_TNIL)
        prompt = luaL_tolstring(L, -1, NULL); /* stays on the stack while used */
    if (use_readline) {
        set_sigint(on_prompt_interrupt, false);
        char *line = readline(prompt);
        set_sigint(SIG_DFL, false);
        lua_settop(L, top);
        if (!line) return 0;
        if (first)
            push_first_line(L, line, strlen(line));
        else
            lua_pushstring(L, line);
        free(line);
        return 1;
    }
    fputs(prompt, stdout);
    fflush(stdout);
    lua_settop(L, top);
    char buffer[MAX_INPUT_LINE];
    if (!fgets(buffer, sizeof buffer, stdin)) return 0;
    size_t len = strlen(buffer);
    if (len > 0 && buffer[len - 1] == '\n') buffer[--len] = '\0';
    if (first)
        push_first_line(L, buffer, len);
    else
        lua_pushlstring(L, buffer, len);
    return 1;
}

/* True (and the message popped) when a syntax error only says the chunk ended too early. */
static bool incomplete(lua_State *L, int status) {
    static const char mark[] = "<eof>";
    if (status != LUA_ERRSYNTAX) return false;
    size_t len;
    const char *msg = lua_tolstring(L, -1, &len);
    if (len < sizeof mark - 1 || strcmp(msg + len - (sizeof mark - 1), mark) != 0) return false;
    lua_pop(L, 1);
    return true;
}

/* Compiles the line at the top as "return <line>" (so expressions print). */
static int try_expression(lua_State *L) {
    const char *line = lua_tostring(L, -1);
    const char *code = lua_pushfstring(L, "return %s;", line);
    int status = luaL_loadbuffer(L, code, strlen(code), "=stdin");
    if (status == LUA_OK) {
        lua_remove(L, -2);
        remember(line);
    } else {
        lua_pop(L, 2);
    }
    return status;
}

/* Compiles the line at index 1 as a statement, reading more lines while incomplete. */
static int read_statement(lua_State *L) {
    for (;;) {
        size_t len;
        const char *code = lua_tolstring(L, 1, &len);
        int status = luaL_loadbuffer(L, code, len, "=stdin");
        if (!incomplete(L, status) || !push_line(L, false)) {
            remember(code);
            return status;
        }
        lua_pushliteral(L, "\n");
        lua_insert(L, -2);
        lua_concat(L, 3);
    }
}

/* Reads and compiles one chunk: its function is then alone on the stack. -1 at end of input. */
static int load_chunk(lua_State *L) {
    lua_settop(L, 0);
    if (!push_line(L, true)) return -1;
    int status = try_expression(L);
    if (status != LUA_OK) status = read_statement(L);
    lua_remove(L, 1);
    return status;
}

/* Shows the results by tlua.repl's print (tables readable, tensors on lines of their own), or
   the global print where that module cannot load. */
static void print_results(lua_State *L) {
    int n = lua_gettop(L);
    if (n == 0) return;
    luaL_checkstack(L, LUA_MINSTACK, "too many results to print");
    lua_getglobal(L, "require");
    lua_pushliteral(L, "tlua.repl");
    if (lua_pcall(L, 1, 1, 0) == LUA_OK && lua_istable(L, -1)) {
        lua_getfield(L, -1, "print");
        lua_remove(L, -2);
    } else {
        lua_pop(L, 1);
        lua_getglobal(L, "print");
    }
    lua_insert(L, 1);
    if (lua_pcall(L, n, 0, 0) != LUA_OK)
        message(progname, lua_pushfstring(L, "error calling 'print' (%s)", lua_tostring(L, -1)));
}

static void repl(lua_State *L) {
    const char *saved = progname;
    progname = NULL;
    repl_begin(L);
    int status;
    while ((status = load_chunk(L)) != -1) {
        if (status == LUA_OK) status = docall(L, 0, LUA_MULTRET);
        if (status == LUA_OK)
            print_results(L);
        else
            report(L, status);
    }
    lua_settop(L, 0);
    fputs("\n", stdout);
    fflush(stdout);
    repl_end();
    progname = saved;
}

/* ---- setup: tlua.core preloaded, the Lua modules on package.path, tl global (setup.c) ---- */
/* The global help (tlua.help, loaded on first use): help(tl.cat), help("nn.Conv2d"), help(). */
static const char HELP_GLOBAL[] = "help = function(...) return require('tlua.help').help(...) end";

static int setup_tlua(lua_State *L, bool ignore_env) {
    tlb_prepare_state(L, NULL, ignore_env);
    lua_pushcfunction(L, tlb_open_tl);
    int status = report(L, docall(L, 0, 0));
    if (status == LUA_OK) status = dochunk(L, luaL_loadstring(L, HELP_GLOBAL));
    return status;
}

/* ---- main ------------------------------------------------------------------------ */
static int protected_main(lua_State *L) {
    int argc = (int)lua_tointeger(L, 1);
    char **argv = lua_touserdata(L, 2);
    int script = argc;
    int flags = collect_args(argv, &script);
    int options_end = script > 0 ? script : argc;
    luaL_checkversion(L);
    if (flags == HAS_ERROR) {
        print_usage(argv[script]);
        return 0;
    }
    if (flags & HAS_V) print_version();
    if (flags & HAS_UPPER_E) {
        lua_pushboolean(L, 1);
        lua_setfield(L, LUA_REGISTRYINDEX, "LUA_NOENV");
    }
    luaL_openlibs(L);
    create_arg_table(L, argv, argc, script);
    /* The generational collector, as the stock lua5.4 runs it: tensor temporaries die
       young and a young collection frees them without traversing the Lua heap;
       tensor_object.c paces the collections by tensor memory and runs the full ones that
       free what aged. */
    lua_gc(L, LUA_GCGEN, 0, 0);
    if (setup_tlua(L, flags & HAS_UPPER_E) != LUA_OK) return 0;
    if (!(flags & HAS_UPPER_E) && run_init(L) != LUA_OK) return 0;
    if (!run_args(L, argv, options_end)) return 0;
    if (script < argc && run_script(L, argv + script) != LUA_OK) return 0;
    if (flags & HAS_I)
        repl(L);
    else if (script == argc && !(flags & (HAS_E | HAS_V))) {
        if (isatty(STDIN_FILENO)) {
            print_version();
            repl(L);
        } else if (dochunk(L, luaL_loadfile(L, NULL)) != LUA_OK) {
            return 0; /* stdin as a script: its errors fail the run */
        }
    }
    lua_pushboolean(L, 1);
    return 1;
}

/* glibc's malloc hands a block above its mmap threshold (at most 32 MiB) to mmap and unmaps it
   when freed: a large tensor then starts with a page fault per 4 KiB page, on every step of a
   loop that allocates the same tensors again (about 20 ms a 64 MB tensor). The executable keeps
   blocks in the heap and freed memory there for reuse, as a tensor library's caching allocator
   does (the library leaves malloc's settings to its host). TLUA_MALLOC=system keeps glibc's;
   any other value is an error (false). */
static bool keep_freed_memory(void) {
    const char *setting = getenv("TLUA_MALLOC");
    if (setting && *setting && strcmp(setting, "system") != 0) {
        fprintf(stderr,
                "%s: TLUA_MALLOC must be \"system\" (glibc's own settings) or unset, got \"%s\"\n",
                progname, setting);
        return false;
    }
#ifdef __GLIBC__
    if (setting && *setting) return true;
    mallopt(M_MMAP_MAX, 0);               /* no block of its own mapping */
    mallopt(M_TRIM_THRESHOLD, 256 << 20); /* freed memory kept up to 256 MiB above the heap */
#endif
    return true;
}

int main(int argc, char **argv) {
    if (tlb_launch_requested(argc, argv)) return tlb_launch_main(argc, argv);
    if (argv[0] && argv[0][0]) progname = argv[0];
    if (!keep_freed_memory()) return EXIT_FAILURE;
    lua_State *L = luaL_newstate();
    if (!L) {
        message(progname, "cannot create state: not enough memory");
        return EXIT_FAILURE;
    }
    lua_pushcfunction(L, protected_main);
    lua_pushinteger(L, argc);
    lua_pushlightuserdata(L, argv);
    int status = lua_pcall(L, 2, 1, 0);
    int ok = lua_toboolean(L, -1);
    report(L, status);
    lua_close(L);
    return ok && status == LUA_OK ? EXIT_SUCCESS : EXIT_FAILURE;
}

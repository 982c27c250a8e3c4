/* main.c — the fp8lab host: a Lua 5.4 interpreter (modelled on lua.c) with the fp8 library
 * preloaded, embedded Lua sources, a readline REPL whose printing and completion live in fp8.repl. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <lua.h>
#include <lauxlib.h>
#include <lualib.h>

#if defined(__has_include)
#if __has_include(<dnnl.h>)
#include <dnnl.h>
#define FL_HAVE_DNNL_H 1
#endif
#endif

#ifdef FL_HAVE_READLINE
#include <readline/history.h>
#include <readline/readline.h>
#endif

#include "cpu_isa.h"
#include "error.h"
#include "cpu/par.h"
#include "settings.h"

#define FL_VERSION "0.1.0"
#define FL_PROGNAME "fp8lab"
#define FL_PROMPT "fp8> "
#define FL_PROMPT2 ">> "
#define FL_MAXINPUT 4096

/* The generated table (scripts/embed.c); the anonymous struct is compatible across units. */
extern const struct {
    const char *name;
    const char *path;
    const unsigned char *src;
    size_t len;
} fl_lua_embedded[];

/* Provided by the binding layer (lua/l_fp8.c). */
extern int luaopen_fp8_core(lua_State *L);

/* The signal handler needs the running state; lua.c keeps the same single global for the same
 * reason (a handler has no other way to reach it). */
static lua_State *globalL = NULL;
static const char *progname = FL_PROGNAME;

/* A Ctrl-C came while Lua ran (laction), and the run ended with its error (ended_by_sigint): fp8lab then ends by
 * SIGINT itself, as Python does (a shell sees status 130 and the signal). Until sweep 115 it exited 1, which a shell
 * reads as a program that handled the Ctrl-C and chose to fail: `for f in a b c; do fp8lab train.lua $f; done` went on
 * to the next run at each Ctrl-C, and a Python loop's the same script stopped at the first. */
static volatile sig_atomic_t got_sigint = 0;
static int ended_by_sigint = 0;

/* ---- messages and protected calls ------------------------------------------------------ */

/* One fprintf, so one write to the unbuffered stderr: the lines of two processes of a launch do not interleave
 * inside a message. In a launch of several processes the name carries the rank ("fp8lab (rank 1): ..."). */
static void l_message(const char *pname, const char *msg) {
    const char *rank = getenv("FP8LAB_RANK"), *size = getenv("FP8LAB_WORLD_SIZE");
    const bool ranked = pname && rank && size && atoi(size) > 1;
    if (ranked) fprintf(stderr, "%s (rank %s): %s\n", pname, rank, msg);
    else if (pname) fprintf(stderr, "%s: %s\n", pname, msg);
    else fprintf(stderr, "%s\n", msg);
    fflush(stderr);
}

/* The message on top of the stack replaced by fp8.errfmt[fn](message) when that gives a string; left as it is when
 * anything fails (a message is never lost to its formatting). */
static void errfmt_apply(lua_State *L, const char *fn) {
    if (lua_type(L, -1) != LUA_TSTRING) return;
    int top = lua_gettop(L);
    lua_getglobal(L, "require");
    lua_pushliteral(L, "fp8.errfmt");
    if (lua_pcall(L, 1, 1, 0) == LUA_OK && lua_type(L, -1) == LUA_TTABLE && lua_getfield(L, -1, fn) == LUA_TFUNCTION) {
        lua_pushvalue(L, top);
        if (lua_pcall(L, 1, 1, 0) == LUA_OK && lua_type(L, -1) == LUA_TSTRING) lua_replace(L, top);
    }
    lua_settop(L, top);
}

/* Prints the error on top of the stack (if any) and pops it; fp8.errfmt.hint adds its pointer where it has one (a
 * torch method name that fp8lab's tensors lack). */
static int report(lua_State *L, int status) {
    if (status != LUA_OK) {
        errfmt_apply(L, "hint");
        const char *msg = lua_tostring(L, -1);
        if (msg == NULL) msg = "(error object is not a string)";
        l_message(progname, msg);
        lua_pop(L, 1);
    }
    return status;
}

static int verbose = 0;  /* -v or FP8LAB_VERBOSE=1: full tracebacks for script errors */

/* Like report, for errors of the user's code (a script, -e): unless verbose, fp8.errfmt.short puts
 * the user's line first and keeps only the user's frames of the traceback. */
static int interrupted_error(lua_State *L);
static int report_user(lua_State *L, int status) {
    if (status != LUA_OK && interrupted_error(L)) ended_by_sigint = 1;
    if (status != LUA_OK && !verbose) errfmt_apply(L, "short");
    return report(L, status);
}

/* Message handler: turns any error object into "msg\ntraceback". Tables with __tostring work. */
static int msghandler(lua_State *L) {
    const char *msg = lua_tostring(L, 1);
    if (msg == NULL) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) return 1;
        msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    luaL_traceback(L, L, msg, 1);
    return 1;
}

/* Ctrl-C while Lua runs: the hook raises at the next call/return/line/instruction, and the
 * core's flag makes long C loops return FL_EINTR. A second Ctrl-C before the hook fires gets
 * the default action (kill), so a stuck C call can still be stopped. One Ctrl-C is one error:
 * the hook takes the core's flag down with it, and where a C loop took the flag first (its
 * 'interrupted' already raised) the hook goes without raising again. Until sweep 114 each raised
 * its own: a Ctrl-C caught by pcall in Lua code failed the next long C call ('interrupted'), and
 * one a C loop raised was raised again as 'interrupted!' at the next Lua line, past the pcall
 * that had caught it. */
static void lstop(lua_State *L, lua_Debug *ar) {
    (void)ar;
    lua_sethook(L, NULL, 0, 0);
    if (!fl_interrupt_pending()) return;   /* a C loop took it: raised there */
    fl_interrupt_clear();
    luaL_error(L, "interrupted!");
}

/* The thread that runs Lua (main's), whose Lua state and stack only it may touch. Linux hands a signal sent to the
 * process to any thread that does not block it (the main one first, another where the main one has a signal
 * pending), and tgkill aims one at a thread: a SIGINT that lands on another thread (an OpenMP worker, a library's
 * own thread) is sent on to the main thread and goes no further there (fl_signal_send_to_main, core/error.c, where
 * test_core's signal_forward test aims SIGINTs at OpenMP workers). Until stop 101 the worker ran laction itself:
 * lua_sethook walked the main thread's Lua call frames while that thread ran and changed them, and without an
 * alternate stack of its own the handler's frame landed where oneDNN's JIT kernels keep data below the worker's
 * stack pointer (use_signal_stack). */
static void laction(int sig) {
    if (fl_signal_send_to_main(sig)) return;
    signal(sig, SIG_DFL);
    got_sigint = 1;
    fl_interrupt_set();
    lua_sethook(globalL, lstop, LUA_MASKCALL | LUA_MASKRET | LUA_MASKLINE | LUA_MASKCOUNT, 1);
}

/* SIGINT's handlers run on a stack of their own (SA_ONSTACK): on the interrupted one, the handler's frame landed
 * where oneDNN's JIT kernels keep data below the stack pointer, and a Ctrl-C during a matmul corrupted the heap
 * (about half of 20 interrupts of a matmul-tanh loop aborted in free). One for the main thread (mem NULL: a static
 * one), which Linux hands a process's signal to first, and since stop 101 one for each OpenMP worker, which runs the
 * same kernels and takes a signal the main thread could not (fl_signal_send_to_main sends it on from there); one already set
 * up (a sanitizer's) is kept. A worker's stack is allocated; where that fails it goes without. */
static void use_signal_stack(void) {
    stack_t cur;
    if (sigaltstack(NULL, &cur) == 0 && !(cur.ss_flags & SS_DISABLE)) return;
    static char mem[256 * 1024];
    const bool main_thread = fl_signal_on_main_thread();
    const size_t n = main_thread ? sizeof mem : 64 * 1024;   /* (the frame with AMX's state is about 12 KiB) */
    void *p = main_thread ? mem : malloc(n);
    if (!p) return;
    stack_t ss = { .ss_sp = p, .ss_size = n, .ss_flags = 0 };
    sigaltstack(&ss, NULL);   /* a worker's is never freed: the thread lives as long as the process */
}

/* Runs a function with laction as the SIGINT handler, then puts back whatever was in force
 * (default, the REPL's prompt handler, or readline's own when called from completion). */
static int docall(lua_State *L, int narg, int nres) {
    int base = lua_gettop(L) - narg;
    lua_pushcfunction(L, msghandler);
    lua_insert(L, base);
    globalL = L;
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = laction;
    sa.sa_flags = SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old);
    int status = lua_pcall(L, narg, nres, base);
    sigaction(SIGINT, &old, NULL);
    lua_sethook(L, NULL, 0, 0);  /* a Ctrl-C that landed after the last hook point */
    lua_remove(L, base);
    return status;
}

/* Whether the error on top of the stack is a Ctrl-C's: one came (got_sigint), and the message's first line ends with
 * either form, the hook's "interrupted!" or a C loop's "interrupted" (after "chunk:line: " or alone). */
static int interrupted_error(lua_State *L) {
    const char *m = got_sigint ? lua_tostring(L, -1) : NULL;
    if (m == NULL) return 0;
    size_t n = strcspn(m, "\n");
    static const char *const forms[] = { "interrupted!", "interrupted" };
    for (int i = 0; i < 2; i++) {
        size_t k = strlen(forms[i]);
        if (n >= k && memcmp(m + n - k, forms[i], k) == 0 && (n == k || m[n - k - 1] == ' ')) return 1;
    }
    return 0;
}

/* ---- embedded modules ------------------------------------------------------------------ */

/* The library's chunks, as the identities of their _ENV upvalues (a main chunk's first, which every closure the
 * chunk makes shares where it reads a global): registry["fp8.library_envs"][upvalueid] = true, which
 * fp8.opts.internal_functions reads to tell the library's callers from a user's chunk that only carries a library
 * file's name (load(code, "@lua/fp8/ddp.lua") passed for the library's own until stop 103). The loaded chunk on top. */
static void note_library_chunk(lua_State *L) {
    void *id = lua_upvalueid(L, -1, 1);
    if (!id) return;
    if (lua_getfield(L, LUA_REGISTRYINDEX, "fp8.library_envs") != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_setfield(L, LUA_REGISTRYINDEX, "fp8.library_envs");
    }
    lua_pushlightuserdata(L, id);
    lua_pushboolean(L, 1);
    lua_rawset(L, -3);
    lua_pop(L, 1);
}

/* Loads module `name` from the FP8LAB_LUA_DIR tree (upvalue). The variable may name either the
 * directory holding fp8/ (e.g. lua) or fp8/ itself. Pushes loader+path or a "no file" string. */
static int search_dev_dir(lua_State *L, const char *name, const char *dir) {
    luaL_Buffer b;
    const char *rel = luaL_gsub(L, name, ".", "/");
    const char *sub = strchr(rel, '/') ? strchr(rel, '/') + 1 : "";
    const char *cand[4];
    int n = 0;
    cand[n++] = lua_pushfstring(L, "%s/%s.lua", dir, rel);
    cand[n++] = lua_pushfstring(L, "%s/%s/init.lua", dir, rel);
    if (*sub) cand[n++] = lua_pushfstring(L, "%s/%s.lua", dir, sub);
    cand[n++] = *sub ? lua_pushfstring(L, "%s/%s/init.lua", dir, sub) : lua_pushfstring(L, "%s/init.lua", dir);
    for (int i = 0; i < n; i++) {
        FILE *f = fopen(cand[i], "r");
        if (!f) continue;
        fclose(f);
        if (luaL_loadfilex(L, cand[i], "t") != LUA_OK)
            return luaL_error(L, "error loading module '%s' from file '%s':\n\t%s", name, cand[i],
                              lua_tostring(L, -1));
        note_library_chunk(L);
        lua_pushstring(L, cand[i]);
        return 2;
    }
    luaL_buffinit(L, &b);
    for (int i = 0; i < n; i++) {  /* require adds "\n\t" before each searcher's message */
        luaL_addstring(&b, i ? "\n\tno file '" : "no file '");
        luaL_addstring(&b, cand[i]);
        luaL_addstring(&b, "'");
    }
    luaL_pushresult(&b);
    return 1;
}

/* package.searchers entry: fp8 modules from FP8LAB_LUA_DIR (development), then the embedded
 * table. Chunk names are "@lua/fp8/x.lua" so tracebacks point at the source file. */
static int embedded_searcher(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    const char *dir = lua_tostring(L, lua_upvalueindex(1));
    int is_fp8 = strcmp(name, "fp8") == 0 || strncmp(name, "fp8.", 4) == 0;
    const char *dev_miss = "";
    if (dir && *dir && is_fp8) {
        int r = search_dev_dir(L, name, dir);
        if (r == 2) return 2;
        dev_miss = lua_tostring(L, -1);
    }
    for (int i = 0; fl_lua_embedded[i].name; i++) {
        if (strcmp(fl_lua_embedded[i].name, name) != 0) continue;
        const char *chunk = lua_pushfstring(L, "@%s", fl_lua_embedded[i].path);
        if (luaL_loadbufferx(L, (const char *)fl_lua_embedded[i].src, fl_lua_embedded[i].len, chunk, "t") != LUA_OK)
            return luaL_error(L, "error loading embedded module '%s':\n\t%s", name, lua_tostring(L, -1));
        note_library_chunk(L);
        lua_pushstring(L, fl_lua_embedded[i].path);
        return 2;
    }
    lua_pushfstring(L, "%s%sno embedded module '%s'", dev_miss, *dev_miss ? "\n\t" : "", name);
    return 1;
}

static void install_searcher(lua_State *L) {
    const char *dev = getenv("FP8LAB_LUA_DIR");
    struct stat sb;
    if (dev && *dev && (stat(dev, &sb) != 0 || !S_ISDIR(sb.st_mode)))
        fprintf(stderr, "%s: notice: FP8LAB_LUA_DIR=%s is not a directory: the built-in modules are used\n", progname,
                dev);
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "searchers");
    lua_pushstring(L, getenv("FP8LAB_LUA_DIR") ? getenv("FP8LAB_LUA_DIR") : "");
    lua_pushcclosure(L, embedded_searcher, 1);
    /* insert at position 2, right after the preload searcher */
    for (lua_Integer i = (lua_Integer)luaL_len(L, -2); i >= 2; i--) {
        lua_geti(L, -2, i);
        lua_seti(L, -3, i + 1);
    }
    lua_seti(L, -2, 2);
    lua_getfield(L, -2, "preload");
    lua_pushcfunction(L, luaopen_fp8_core);
    lua_setfield(L, -2, "fp8.core");
    lua_pop(L, 3);
}

/* Builds the `host` table handed to fp8.cli: versions and build features. */
static void push_host_info(lua_State *L) {
    lua_newtable(L);
    lua_pushstring(L, FL_VERSION);
    lua_setfield(L, -2, "version");
    lua_pushstring(L, LUA_RELEASE);
    lua_setfield(L, -2, "lua");
#ifdef FL_HAVE_DNNL_H
    const dnnl_version_t *v = dnnl_version();
    lua_pushfstring(L, "%d.%d.%d", (int)v->major, (int)v->minor, (int)v->patch);
    lua_setfield(L, -2, "onednn");
#endif
#ifdef FL_HAVE_CUDA
    lua_pushboolean(L, 1);
#else
    lua_pushboolean(L, 0);
#endif
    lua_setfield(L, -2, "cuda");
#ifdef FL_HAVE_READLINE
    lua_pushstring(L, rl_library_version);
    lua_setfield(L, -2, "readline");
#endif
}

/* require(name) under the traceback handler; on success leaves the module on the stack. */
static int dorequire(lua_State *L, const char *name) {
    lua_getglobal(L, "require");
    lua_pushstring(L, name);
    return docall(L, 1, 1);
}

/* Like report, for the host's own loading (fp8, fp8.help, fp8.cli, -l's modules): a Ctrl-C that lands there, before
 * the user's code runs (a loaded machine takes a second to start), ends the run by SIGINT as one during it does;
 * it exited 1. */
static int report_load(lua_State *L, int status) {
    if (status != LUA_OK && interrupted_error(L)) ended_by_sigint = 1;
    return report(L, status);
}

/* fp8 = require "fp8"; help = require("fp8.help").help */
static int load_fp8(lua_State *L) {
    if (report_load(L, dorequire(L, "fp8")) != LUA_OK) return 0;
    lua_setglobal(L, "fp8");
    if (report_load(L, dorequire(L, "fp8.help")) != LUA_OK) return 0;
    lua_getfield(L, -1, "help");
    lua_setglobal(L, "help");
    lua_pop(L, 1);
    return 1;
}

/* ---- command line ---------------------------------------------------------------------- */

static void print_usage(FILE *out) {
    fprintf(out,
            "usage: %s [options] [script [args]]\n"
            "       %s COMMAND [args]\n"
            "Options:\n"
            "  -e CODE        run CODE (repeatable)\n"
            "  -l NAME        require library NAME into global NAME\n"
            "  -l G=NAME      require library NAME into global G\n"
            "  -i             enter the REPL after the script, even after its error (piped stdin: line by line)\n"
            "  -v, --version  show version information; script errors show the full traceback\n"
            "  -h, --help     show this help\n"
            "  --             stop handling options\n"
            "  -              run stdin as a script and stop handling options\n"
            "With no script, -e or -v: the REPL when stdin is a terminal, else stdin runs as one script (as -).\n"
            "Commands:\n"
            "  env            show versions of fp8lab, Lua, oneDNN and whether CUDA is built in\n"
            "  launch         start a (multi-process) training script with FP8LAB_* settings (docs/cli.md)\n"
            "  config         write or check an accelerate-style config.yaml (docs/config.md)\n"
            "  test           run the test suite of the source tree (C tests and busted specs)\n"
            "Environment:\n"
            "  FP8LAB_LUA_DIR  load fp8 Lua modules from this directory before the embedded ones\n"
            "  FP8LAB_HISTORY  REPL history file (default ~/.fp8lab_history)\n"
            "  FP8LAB_HISTSIZE  entries the REPL history keeps, 0..1000000 (default 1000; 0: none kept)\n"
            "  FP8LAB_VERBOSE  1 (or true/yes/on): script errors show the full traceback (as -v)\n",
            progname, progname);
}

static void print_version(void) {
    printf("%s %s (%s)\n", FL_PROGNAME, FL_VERSION, LUA_RELEASE);
    fflush(stdout);
}

enum { HAS_E = 1, HAS_I = 2, HAS_V = 4, HAS_H = 8, HAS_ERR = 16 };

/* Scans options like lua.c; returns flags and sets *first to the index of the script (argc if
 * none). Option arguments (-e CODE, -l NAME) are only validated here and run in runargs. */
static int collectargs(char **argv, int argc, int *first) {
    int flags = 0, i;
    for (i = 1; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-") == 0) break;                 /* script from stdin */
        if (strcmp(a, "--") == 0) { i++; break; }
        if (strcmp(a, "-i") == 0) flags |= HAS_I;
        else if (strcmp(a, "-v") == 0 || strcmp(a, "--version") == 0) flags |= HAS_V;
        else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) flags |= HAS_H;
        else if (a[1] == 'e' || a[1] == 'l') {
            if (a[1] == 'e') flags |= HAS_E;
            if (a[2] == '\0' && (++i >= argc || argv[i] == NULL)) {
                fprintf(stderr, "%s: '%s' needs an argument\n", progname, a);
                return HAS_ERR;
            }
            const char *v = a[2] ? a + 2 : argv[i], *eq = strchr(v, '=');
            if (a[1] == 'l' && (*v == '\0' || eq == v || (eq && eq[1] == '\0'))) {
                fprintf(stderr, "%s: -l '%s': expected NAME or GLOBAL=NAME (a module name, and a global to hold it)\n",
                        progname, v);
                return HAS_ERR;
            }
        } else {
            fprintf(stderr, "%s: unrecognized option '%s'\n", progname, a);
            return HAS_ERR;
        }
    }
    *first = i;
    return flags;
}

/* arg table as in lua.c: arg[0] = script, positive indices its arguments, negative ones the
 * interpreter and options. */
static void createargtable(lua_State *L, char **argv, int argc, int script) {
    if (script == argc) script = 0;
    lua_createtable(L, argc - script - 1, script + 1);
    for (int i = 0; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i - script);
    }
    lua_setglobal(L, "arg");
}

static int dochunk(lua_State *L, int status) {
    if (status == LUA_OK) status = docall(L, 0, 0);
    return report_user(L, status);
}

/* Runs -e and -l options in order. */
static int runargs(lua_State *L, char **argv, int n) {
    for (int i = 1; i < n; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || (a[1] != 'e' && a[1] != 'l')) continue;
        const char *v = a[2] ? a + 2 : argv[++i];
        int status;
        if (a[1] == 'e') {
            status = dochunk(L, luaL_loadbufferx(L, v, strlen(v), "=(command line)", "t"));
        } else {   /* -l NAME: global NAME = require "NAME"; -l G=NAME: global G (lua.c 5.4.4's dolibrary) */
            const char *eq = strchr(v, '=');
            const char *mod = eq ? eq + 1 : v;
            status = report_load(L, dorequire(L, mod));
            if (status == LUA_OK) {
                if (eq) lua_pushlstring(L, v, (size_t)(eq - v)); else lua_pushstring(L, v);
                lua_insert(L, -2);
                lua_setglobal(L, lua_tostring(L, -2));
                lua_pop(L, 1);
            }
        }
        if (status != LUA_OK) return 0;
    }
    return 1;
}

/* `fp8lab COMMAND ...` (lua/fp8/cli.lua); anything else is a script. */
static const char *const SUBCOMMANDS[] = { "env", "launch", "config", "test", NULL };

/* Runs the script at argv[script] ("-" = stdin) with its arguments as `...`. */
static int handle_script(lua_State *L, char **argv, int argc, int script) {
    const char *fname = argv[script];
    if (strcmp(fname, "-") == 0 && (script == 0 || strcmp(argv[script - 1], "--") != 0)) fname = NULL;
    int status = luaL_loadfilex(L, fname, "t");   /* text only: binary chunks are unchecked (l_textonly.c) */
    if (status == LUA_ERRFILE && fname && !strchr(fname, '/') && !strchr(fname, '.') && access(fname, F_OK) != 0) {
        /* `fp8lab help`, `fp8lab lauch`: a word, not a file; say what the words are */
        luaL_Buffer b;
        luaL_buffinit(L, &b);
        luaL_addstring(&b, "\n(no such script; fp8lab's commands are ");
        for (int i = 0; SUBCOMMANDS[i]; i++) {
            if (i) luaL_addstring(&b, SUBCOMMANDS[i + 1] ? ", " : " and ");
            luaL_addstring(&b, SUBCOMMANDS[i]);
        }
        luaL_addstring(&b, ", and fp8lab --help lists its options)");
        luaL_pushresult(&b);
        lua_concat(L, 2);   /* the load error, then the hint */
    }
    if (status == LUA_OK) {
        int n = argc - script - 1;
        luaL_checkstack(L, n + 3, "too many script arguments");
        for (int i = script + 1; i < argc; i++) lua_pushstring(L, argv[i]);
        status = docall(L, n, 0);
    }
    return report_user(L, status);
}

/* `fp8lab COMMAND ...`: fp8.cli.main(host, cmd, args...) returns the exit status. */
static int run_subcommand(lua_State *L, char **argv, int argc) {
    if (report_load(L, dorequire(L, "fp8.cli")) != LUA_OK) return 1;
    lua_getfield(L, -1, "main");
    lua_remove(L, -2);
    push_host_info(L);
    luaL_checkstack(L, argc, "too many arguments");
    for (int i = 1; i < argc; i++) lua_pushstring(L, argv[i]);
    int status = docall(L, argc, 1);
    if (status != LUA_OK && interrupted_error(L)) ended_by_sigint = 1;
    if (report(L, status) != LUA_OK) return 1;
    int rc = (int)lua_tointeger(L, -1);
    lua_pop(L, 1);
    /* fp8.cli.main's status for a Ctrl-C ("fp8lab config: interrupted", reported there), or `fp8lab test`'s when its
     * run ended by SIGINT (stop 102): system() ignores SIGINT while it waits, so got_sigint is not set for that one */
    if (rc == 130) ended_by_sigint = 1;
    return rc;
}

/* ---- REPL ------------------------------------------------------------------------------ */

static volatile sig_atomic_t prompt_interrupted = 0;
static int interactive = 0;  /* stdin is a terminal: show banner and prompts */

static void prompt_sigint(int sig) {
    if (fl_signal_send_to_main(sig)) return;   /* the main thread's read() must see EINTR */
    prompt_interrupted = 1;
}

/* FP8LAB_HISTSIZE, read when the REPL starts (repl_histsize); the entries of history kept in memory and on file */
static int histsize = 1000;

#ifdef FL_HAVE_READLINE
static const char *history_path(void) {
    static char buf[1024];
    static int refused = 0;   /* a named pipe or a socket there: said once, then no history file */
    if (refused) return NULL;
    const char *h = getenv("FP8LAB_HISTORY"), *p = h && *h ? h : NULL;
    if (!p) {
        const char *home = getenv("HOME");
        if (!home) return NULL;
        snprintf(buf, sizeof buf, "%s/.fp8lab_history", home);
        p = buf;
    }
    /* opening a named pipe blocks until a writer comes: the prompt would never show (a device such as /dev/null
     * reads as empty and is kept) */
    struct stat sb;
    if (stat(p, &sb) == 0 && (S_ISFIFO(sb.st_mode) || S_ISSOCK(sb.st_mode))) {
        refused = 1;
        fprintf(stderr, "%s: notice: REPL history not saved to %s%s: %s, not a regular file\n", FL_PROGNAME, p,
                p == h ? " (FP8LAB_HISTORY)" : "", S_ISFIFO(sb.st_mode) ? "a named pipe" : "a socket");
        return NULL;
    }
    return p;
}

/* Readline's input function. Readline's own signal handling is off (rl_catch_signals = 0), so
 * SIGINT reaches prompt_sigint and interrupts read() (no SA_RESTART); a Ctrl-C at the prompt
 * then empties the line and accepts it, and loadline drops what was typed so far. A Ctrl-C while
 * completion asks "Display all N possibilities? (y or n)" or pages with --More-- answers 'n' first
 * (the question there takes no newline: it asked again forever, printing ^C each time), so the
 * listing stops and the line is then dropped as at the prompt. */
static int fl_rl_getc(FILE *f) {
    static int answered = 0;   /* the 'n' given to completion's question for this Ctrl-C */
    if (!prompt_interrupted) answered = 0;
    for (;;) {
        unsigned char c;
        /* the flag is checked before read() too: the signal may land while readline redraws */
        ssize_t r = prompt_interrupted ? -1 : read(fileno(f), &c, 1);
        if (r == 1) return c;
        if (r == 0) return EOF;
        if (!prompt_interrupted && errno != EINTR) return EOF;
        if (prompt_interrupted && RL_ISSTATE(RL_STATE_COMPLETING) && !answered) {
            answered = 1;
            return 'n';
        }
        if (prompt_interrupted) {
            rl_replace_line("", 0);
            fputs("^C", rl_outstream ? rl_outstream : stdout);
            return '\n';
        }
    }
}

/* Completion: fp8.repl.complete(text before cursor) gives the candidates for the trailing
 * expression; readline's word breaks are set so that word is exactly that expression. */
static char **fl_rl_complete(const char *text, int start, int end) {
    (void)start;
    lua_State *L = globalL;
    rl_attempted_completion_over = 1;
    /* readline resets these before every completion: no space after a unique match (`fp8.opti` ->
     * `fp8.optim`, then `.SG` completes on), no slash for a match that happens to name a directory */
    rl_completion_append_character = '\0';
    rl_completion_suppress_append = 1;
    rl_filename_completion_desired = 0;
    int top = lua_gettop(L);
    char **matches = NULL;
    if (dorequire(L, "fp8.repl") == LUA_OK) {
        lua_getfield(L, -1, "complete");
        lua_pushlstring(L, rl_line_buffer, (size_t)end);
        if (docall(L, 1, 1) == LUA_OK && lua_istable(L, -1)) {
            size_t n = (size_t)luaL_len(L, -1);
            if (n > 0 && (matches = calloc(n + 2, sizeof *matches)) != NULL) {
                /* matches[0] is the common prefix; readline computes it when we pass text. */
                matches[0] = strdup(text);
                for (size_t i = 1; i <= n; i++) {
                    lua_geti(L, -1, (lua_Integer)i);
                    matches[i] = strdup(lua_tostring(L, -1) ? lua_tostring(L, -1) : "");
                    lua_pop(L, 1);
                }
                if (n == 1) {  /* single match replaces the word outright */
                    free(matches[0]);
                    matches[0] = matches[1];
                    matches[1] = NULL;
                } else {
                    /* let readline fill in the longest common prefix */
                    size_t lcp = strlen(matches[1]);
                    for (size_t i = 2; i <= n; i++)
                        for (size_t k = 0; k < lcp; k++)
                            if (matches[i][k] != matches[1][k]) { lcp = k; break; }
                    free(matches[0]);
                    matches[0] = strndup(matches[1], lcp);
                }
            }
        }
    }
    lua_settop(L, top);
    return matches;
}
#endif

/* Reads one line without its newline; NULL at end of input. Result must be freed. */
static char *read_line(const char *prompt) {
#ifdef FL_HAVE_READLINE
    /* readline hears SIGWINCH only while it reads: a window resized during a computation left it wrapping and
     * redrawing lines at the old width, so the size is read again before each line */
    if (interactive) {
        if (rl_instream) rl_reset_screen_size();   /* NULL before the first line: readline then reads it itself */
        return readline(prompt);
    }
#endif
    char buf[FL_MAXINPUT];
    if (interactive) { fputs(prompt, stdout); fflush(stdout); }
    size_t len = 0, cap = 0;
    char *line = NULL;
    for (;;) {
        errno = 0;
        if (fgets(buf, sizeof buf, stdin) == NULL) {
            if (errno == EINTR && prompt_interrupted) { clearerr(stdin); free(line); return strdup(""); }
            if (line) return line;
            return NULL;
        }
        size_t n = strlen(buf);
        if (len + n + 1 > cap) {
            cap = (len + n + 1) * 2;
            char *nl = realloc(line, cap);
            if (!nl) { free(line); return NULL; }
            line = nl;
        }
        memcpy(line + len, buf, n + 1);
        len += n;
        if (len > 0 && line[len - 1] == '\n') { line[len - 1] = 0; return line; }
    }
}

#ifdef FL_HAVE_READLINE
/* Whether the line at p is a history timestamp ("#" and a digit, as readline writes with history_write_timestamps). */
static int timestamp_line(const char *p) { return p[0] == '#' && p[1] >= '0' && p[1] <= '9'; }

/* Keeps the last n entries of the history file hp, each cut at its "#<time>" line. readline's history_truncate_file
 * counts lines and cut the "#<time>" line off the first entry it kept: the file then read as one written without
 * timestamps, so the next REPL split every statement typed on several lines into one entry a line (and rewrote the
 * file so). A file without timestamps, or of at most n entries, is left as it is. */
static void truncate_history_entries(const char *hp, int n) {
    FILE *f = fopen(hp, "rb");
    if (!f) return;
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size <= 0 || sb.st_size > (64 << 20)) {
        fclose(f);
        return;
    }
    size_t len = (size_t)sb.st_size;
    char *buf = malloc(len + 1);
    if (!buf || fread(buf, 1, len, f) != len) { free(buf); fclose(f); return; }
    fclose(f);
    buf[len] = '\0';
    /* from the end: the start of the n-th "#<time>" line, kept once an (n+1)-th shows there is more */
    size_t keep = 0, cut = 0;
    int seen = 0;
    for (size_t i = len; i-- > 0;) {
        if ((i == 0 || buf[i - 1] == '\n') && timestamp_line(buf + i)) {
            if (++seen == n) keep = i;
            else if (seen > n) { cut = keep; break; }
        }
    }
    if (cut > 0 && (f = fopen(hp, "wb")) != NULL) {
        fwrite(buf + cut, 1, len - cut, f);
        fclose(f);
    }
    free(buf);
}
#endif

static void save_line(const char *line) {
#ifdef FL_HAVE_READLINE
    if (!interactive || !*line || histsize == 0) return;
    add_history(line);
    static int warned = 0;   /* a history file that cannot be written is said once, not after every line */
    const char *hp = history_path();
    if (hp) {
        int err = append_history(1, hp);
        if (err != 0) err = write_history(hp);  /* append fails if file is new */
        if (err == 0) truncate_history_entries(hp, histsize);   /* the file keeps the last histsize entries */
        else if (!warned) {
            warned = 1;
            const char *env = getenv("FP8LAB_HISTORY");
            fprintf(stderr, "%s: notice: REPL history not saved to %s%s: %s\n", FL_PROGNAME, hp,
                    env && *env ? " (FP8LAB_HISTORY)" : "", strerror(err));
        }
    }
#else
    (void)line;
#endif
}

#ifdef FL_HAVE_READLINE
/* Whether the history file hp starts with a "#<time>" line (written with timestamps), or is empty or absent. */
static int history_file_timed(const char *hp) {
    FILE *f = fopen(hp, "r");
    if (!f) return 1;
    const int c0 = fgetc(f), c1 = fgetc(f);
    fclose(f);
    return c0 == EOF || (c0 == '#' && c1 >= '0' && c1 <= '9');
}
#endif

/* FP8LAB_HISTSIZE: unset or empty keeps 1000; else an integer 0..1000000, or -1 after printing why not. */
static int repl_histsize(void) {
    const char *s = getenv("FP8LAB_HISTSIZE");
    if (!s || !*s) return 1000;
    char *end;
    errno = 0;
    long n = strtol(s, &end, 10);
    if (*end != '\0' || errno || n < 0 || n > 1000000 || (*s < '0' || *s > '9')) {
        fprintf(stderr, "%s: FP8LAB_HISTSIZE: expected an integer in 0..1000000 (entries of REPL history), got \"%s\"\n",
                FL_PROGNAME, s);
        return -1;
    }
    return (int)n;
}

/* After Ctrl-C at a prompt: readline ends its line itself; a terminal read by fgets does not. */
static void interrupted_newline(void) {
#ifdef FL_HAVE_READLINE
    if (interactive) return;
#endif
    if (interactive) { fputs("\n", stdout); fflush(stdout); }
}

/* An incomplete chunk: the parser stopped at the end of the input. */
static int incomplete(lua_State *L, int status) {
    if (status != LUA_ERRSYNTAX) return 0;
    size_t lmsg;
    const char *msg = lua_tolstring(L, -1, &lmsg);
    return lmsg >= 5 && strcmp(msg + lmsg - 5, "<eof>") == 0;
}

/* Set by loadline when the input ended inside an incomplete statement. */
static int eof_in_chunk = 0;

/* Compiles one REPL statement, reading continuation lines while it is incomplete. Returns
 * -1 at end of input, 0 when the line was abandoned (Ctrl-C), else 1 with a function or an
 * error message on the stack and the status in *st. End of input at a continuation prompt gives
 * the parser's "... near <eof>" error (lua.c does the same) and sets eof_in_chunk: a terminal then
 * returns to the primary prompt (Ctrl-D there ends the session), piped input ends. */
static int loadline(lua_State *L, int *st) {
    prompt_interrupted = 0;
    char *line = read_line(FL_PROMPT);
    if (line == NULL) return -1;
    if (prompt_interrupted) { free(line); interrupted_newline(); return 0; }
    const char *p = line;
    if (*p == '=') p++;  /* "=expr" as in Lua 5.1 */
    const char *ret = lua_pushfstring(L, "return %s;", p);
    int status = luaL_loadbufferx(L, ret, strlen(ret), "=stdin", "t");
    if (status == LUA_OK) {
        lua_remove(L, -2);
        save_line(line);
        free(line);
        *st = LUA_OK;
        return 1;
    }
    lua_pop(L, 2);
    if (*line == '=') lua_pushfstring(L, "return %s", line + 1);   /* "=expr" continued on more lines */
    else lua_pushstring(L, line);
    free(line);
    for (;;) {
        size_t len;
        const char *code = lua_tolstring(L, -1, &len);
        status = luaL_loadbufferx(L, code, len, "=stdin", "t");
        if (!incomplete(L, status)) break;
        lua_pop(L, 1);
        char *more = read_line(FL_PROMPT2);
        if (more == NULL && !prompt_interrupted) {   /* the chunk as it stands, and its <eof> error */
            status = luaL_loadbufferx(L, lua_tostring(L, -1), len, "=stdin", "t");
            eof_in_chunk = 1;
            if (interactive) {
                fputs("\n", stdout);
                fflush(stdout);
                clearerr(stdin);   /* a terminal's Ctrl-D is not the end of the session (glibc's EOF is sticky) */
            }
            break;
        }
        if (prompt_interrupted) {
            interrupted_newline();
            free(more);
            lua_pop(L, 1);
            return 0;
        }
        lua_pushliteral(L, "\n");
        lua_pushstring(L, more);
        lua_concat(L, 3);
        free(more);
    }
    save_line(lua_tostring(L, -2));
    lua_remove(L, -2);
    *st = status;
    return 1;
}

/* Prints results through fp8.repl.print_results so the format is the same everywhere. */
static void print_results(lua_State *L, int n) {
    if (n == 0) return;
    int base = lua_gettop(L) - n;
    if (dorequire(L, "fp8.repl") != LUA_OK) { report(L, LUA_ERRRUN); lua_settop(L, base); return; }
    lua_getfield(L, -1, "print_results");
    lua_remove(L, -2);
    lua_insert(L, base + 1);
    report(L, docall(L, n, 0));
}

/* The REPL; returns the exit status: 2 for a bad FP8LAB_HISTSIZE, 1 when piped input ended inside an
 * incomplete statement, else 0. */
static int repl(lua_State *L) {
    histsize = repl_histsize();
    if (histsize < 0) return 2;
    const char *saved = progname;
    progname = NULL;  /* REPL errors are printed without the program name, as lua.c does */
    /* marks the session as interactive for Lua code that would otherwise exit (fp8.args.parse --help) */
    lua_pushboolean(L, 1);
    lua_setfield(L, LUA_REGISTRYINDEX, "fp8lab.repl");
    interactive = isatty(STDIN_FILENO);
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = prompt_sigint;  /* no SA_RESTART: a read at the prompt returns EINTR */
    sa.sa_flags = SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old);
#ifdef FL_HAVE_READLINE
    if (interactive) {
        rl_readline_name = FL_PROGNAME;
        rl_catch_signals = 0;
        rl_getc_function = fl_rl_getc;
        rl_attempted_completion_function = fl_rl_complete;
        rl_completion_append_character = '\0';
        /* every character that cannot be part of `a.b:c` breaks a word */
        rl_completer_word_break_characters = " \t\n\"'`@$><=;|&{}()[],+-*/%^#~!?\\";
        rl_basic_word_break_characters = rl_completer_word_break_characters;
        stifle_history(histsize);   /* before reading, so a long file loads its last histsize lines */
        /* a statement typed on several lines is one entry (save_line gets the whole chunk, as lua.c's), and stays one
         * in the file: each entry is written after a "#<time>" line, and the lines up to the next such line are read
         * back as one entry */
        history_comment_char = '#';
        history_write_timestamps = 1;
        const char *hp = history_path();
        if (hp && histsize > 0) {
            /* a file written before (no "#<time>" lines) is read one entry a line, as it was written (read as
             * multi-line entries, its lines would all join its first), and rewritten once in the new form */
            const int timed = history_file_timed(hp);
            history_multiline_entries = timed;
            read_history(hp);
            if (!timed) write_history(hp);
        }
        history_multiline_entries = 1;
    }
#endif
    if (interactive) {
        printf("%s %s (%s) — type help() for help, Ctrl-D to exit\n", FL_PROGNAME, FL_VERSION, LUA_RELEASE);
        fflush(stdout);
    }
    int status, r, rc = 0;
    while ((r = loadline(L, &status)) != -1) {
        if (r == 0) continue;
        if (eof_in_chunk) {
            eof_in_chunk = 0;
            if (!interactive) rc = 1;   /* piped input cut off mid-statement: a failure, once reported */
        }
        fl_interrupt_clear();
        if (status == LUA_OK) {
            int base = lua_gettop(L) - 1;
            status = docall(L, 0, LUA_MULTRET);
            if (status == LUA_OK) print_results(L, lua_gettop(L) - base);
        }
        report(L, status);
        lua_settop(L, 0);
    }
    if (interactive) fputs("\n", stdout);
    fflush(stdout);
    sigaction(SIGINT, &old, NULL);
    progname = saved;
    return rc;
}

/* ---- main ------------------------------------------------------------------------------ */

static int is_subcommand(const char *a) {
    for (int i = 0; SUBCOMMANDS[i]; i++)
        if (strcmp(a, SUBCOMMANDS[i]) == 0) return 1;
    return 0;
}

/* Everything that can raise runs here, protected, so main stays free of Lua errors. */
static int pmain(lua_State *L) {
    int argc = (int)lua_tointeger(L, 1);
    char **argv = (char **)lua_touserdata(L, 2);
    int script, rc = 0;
    luaL_openlibs(L);
    { void fl_lopen_textonly(lua_State *L); fl_lopen_textonly(L); }   /* l_textonly.c: no binary chunks */
    install_searcher(L);
    {   /* the host's C functions that run Lua hold no tensor: a t:free() under them releases at once (l_util.c) */
        void fl_lcallback_safe(lua_State *L, lua_CFunction f);
        fl_lcallback_safe(L, pmain);
        fl_lcallback_safe(L, msghandler);
        fl_lcallback_safe(L, embedded_searcher);
    }
    if (argc >= 2 && is_subcommand(argv[1])) {
        createargtable(L, argv, argc, 1);
        if (!load_fp8(L)) rc = 1;
        else rc = run_subcommand(L, argv, argc);
        lua_pushinteger(L, rc);
        return 1;
    }
    int flags = collectargs(argv, argc, &script);
    if (flags == HAS_ERR) { print_usage(stderr); lua_pushinteger(L, 1); return 1; }
    if (flags & HAS_H) { print_usage(stdout); lua_pushinteger(L, 0); return 1; }
    if (flags & HAS_V) { print_version(); verbose = 1; }
    const char *ve = getenv("FP8LAB_VERBOSE");   /* the booleans of every FP8LAB_* flag; anything else is refused */
    if (ve && *ve) {
        int b = fl_setting_bool(ve, strlen(ve), FL_FROM_TEXT);
        if (b < 0) {
            fprintf(stderr, "fp8lab: FP8LAB_VERBOSE: expected a boolean (true or false), got \"%s\" (also %s)\n", ve,
                    fl_setting_bool_words);
            lua_pushinteger(L, 2);
            return 1;
        }
        if (b) verbose = 1;
    }
    createargtable(L, argv, argc, script);
    if (!load_fp8(L)) { lua_pushinteger(L, 1); return 1; }
    /* an error in -e or the script ends the run; with -i it is reported and the REPL follows (as python -i), to look
     * at what the script left (it ended there, as lua.c does; docs/cli.md said -i always gives the REPL), and the
     * exit status stays 1 */
    int failed = !runargs(L, argv, script);
    if (!failed && script < argc && handle_script(L, argv, argc, script) != LUA_OK) failed = 1;
    if (failed && !(flags & HAS_I)) { lua_pushinteger(L, 1); return 1; }
    if (flags & HAS_I) {
        ended_by_sigint = 0;   /* reported, and the prompt follows: its own end is the status */
        rc = repl(L);
        if (failed && rc == 0) rc = 1;
    }
    else if (script == argc && !(flags & (HAS_E | HAS_V))) {
        /* as lua.c: the REPL at a terminal; piped stdin is one script (like `fp8lab -`), so a local
         * lives to the end and an error stops it with status 1. -i keeps the line-by-line REPL. */
        if (isatty(STDIN_FILENO)) rc = repl(L);
        else if (dochunk(L, luaL_loadfilex(L, NULL, "t")) != LUA_OK) rc = 1;
    }
    lua_pushinteger(L, rc);
    return 1;
}

/* OMP_NUM_THREADS past what a process can start makes libgomp crash in the first parallel region (100000:
 * a segfault): refused before anything runs, in each entry of its list. */
#define FL_MAX_THREADS 1024
static int check_omp_threads(void) {
    const char *s = getenv("OMP_NUM_THREADS");
    if (!s) return 0;
    /* each entry of the list (one per nesting level) as libgomp reads it: spaces, an optional '+', digits */
    for (const char *p = s; *p;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\v' || *p == '\f' || *p == '\r') p++;
        if (*p == '+') p++;
        if (*p < '0' || *p > '9') return 0;   /* not a number: libgomp's own rules apply */
        long v = 0;
        for (; *p >= '0' && *p <= '9'; p++) v = v > FL_MAX_THREADS ? v : v * 10 + (*p - '0');
        if (v > FL_MAX_THREADS) {
            fprintf(stderr, "%s: OMP_NUM_THREADS=%s: at most %d threads per process\n", progname, s, FL_MAX_THREADS);
            return 2;
        }
        while (*p && *p != ',') p++;
        if (*p == ',') p++;
    }
    return 0;
}

/* FP8LAB_CPU_ISA caps the instruction sets the CPU kernels and oneDNN use (core/cpu_isa.h), before any runs; a
 * word outside its choices is refused. */
static int set_cpu_isa(void) {
    const char *s = getenv("FP8LAB_CPU_ISA");
    if (!s || !*s || fl_cpu_isa_limit(s) == FL_OK) return 0;
    fprintf(stderr, "%s: FP8LAB_CPU_ISA: expected one of %s, got \"%s\"\n", progname, fl_cpu_isa_words, s);
    return 2;
}

/* OpenMP's team made before anything runs: libgomp ends the process (exit 1, 'libgomp: Thread creation failed:
 * Resource temporarily unavailable') where it cannot create a team's thread, and it creates them at the first
 * parallel region, which under a narrow `ulimit -v` came in the middle of a session with the address space taken
 * (each thread's stack is a fresh mapping of RLIMIT_STACK's size, 8 MiB by default): DataLoader, attention, a save
 * died there (docs/robustness.md, stop 100). The team is kept and reused by every later region (the count is
 * OMP_NUM_THREADS' for the whole process), so no thread is created later; a limit too narrow for even this ends the
 * process here, at its start, with libgomp's message. Each thread of the team sets up its signal stack there. */
static void start_omp_team(void) {
#ifdef _OPENMP
    /* OMP_DYNAMIC=true lets libgomp size each team from the load average: one thread wherever the 15-minute load
     * reaches the cores, a team malloc'ed at every region, which under a memory limit is libgomp's exit(1) (stop 105,
     * docs/robustness.md); core/cpu/par.h cannot know that size beforehand. Refused by name: teams keep
     * OMP_NUM_THREADS' count (OMP_THREAD_LIMIT and OMP_MAX_ACTIVE_LEVELS are honoured, par.h's fl_par_team). */
    if (omp_get_dynamic()) {
        fprintf(stderr, "%s: OMP_DYNAMIC=%s is not used: a dynamic team can be one thread, which the OpenMP runtime "
                "allocates at every region (its exit where that fails); teams keep OMP_NUM_THREADS' count (%d)\n", progname,
                getenv("OMP_DYNAMIC") ? getenv("OMP_DYNAMIC") : "true", omp_get_max_threads());
        omp_set_dynamic(0);
    }
    FL_PARALLEL(true, , use_signal_stack(););   /* each worker's own (the main thread's too); one thread: no team */
#else
    use_signal_stack();
#endif
}

int main(int argc, char **argv) {
    int bad = check_omp_threads();
    if (!bad) bad = set_cpu_isa();
    if (bad) return bad;
    fl_signals_set_main_thread();
    start_omp_team();
    /* A write past a file-size limit (ulimit -f, a site's quota) raises SIGXFSZ, whose default kills the process in
     * the middle of a save: ignored, the write fails with EFBIG instead and the writer reports it (the atomic
     * writers leave the old file, appends are cut back, core/fileio.c). */
    signal(SIGXFSZ, SIG_IGN);
    lua_State *L = luaL_newstate();
    if (L == NULL) { l_message(progname, "cannot create state: not enough memory"); return 1; }
    globalL = L;
    lua_pushcfunction(L, pmain);
    lua_pushinteger(L, argc);
    lua_pushlightuserdata(L, argv);
    int status = lua_pcall(L, 2, 1, 0);
    int rc = status == LUA_OK ? (int)lua_tointeger(L, -1) : 1;
    if (status != LUA_OK) report(L, status);
    lua_close(L);
    if (ended_by_sigint) {   /* the run ended by a Ctrl-C: end by SIGINT, as Python does (status 130 in a shell) */
        fflush(NULL);
        signal(SIGINT, SIG_DFL);
        raise(SIGINT);
        return 130;   /* (SIGINT blocked: a shell's number for it) */
    }
    return rc;
}

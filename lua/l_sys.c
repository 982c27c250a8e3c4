/* l_sys.c — module fp8.sys (also fp8.config.sys): the few process helpers that `fp8lab launch`,
 * `fp8lab env` and `fp8lab test` need and Lua lacks — setenv, exec, the running executable, realpath,
 * isatty, the effective uid, OpenMP's thread count, and which optional engines the build holds. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "cpu_isa.h"
#include "device.h"
#include "l_util.h"

/* setenv(name, value) sets, setenv(name, nil) removes. */
static int l_setenv(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    luaL_argcheck(L, *name && !strchr(name, '='), 1, "not a valid variable name");
    int r = lua_isnoneornil(L, 2) ? unsetenv(name) : setenv(name, luaL_checkstring(L, 2), 1);
    if (r != 0) return luaL_error(L, "setenv %s: %s", name, strerror(errno));
    return 0;
}

/* env_names(prefix) -> the sorted names of the environment's variables that start with prefix. */
extern char **environ;
static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }
static int l_env_names(lua_State *L) {
    size_t plen;
    const char *prefix = luaL_checklstring(L, 1, &plen);
    lua_newtable(L);
    int n = 0;
    for (char **e = environ; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq || strncmp(*e, prefix, plen) != 0) continue;
        lua_pushlstring(L, *e, (size_t)(eq - *e));
        lua_rawseti(L, -2, ++n);
    }
    /* sorted through a C array of the pushed strings (they stay referenced by the table) */
    const char **names = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *names, 0);
    for (int i = 0; i < n; i++) { lua_rawgeti(L, -2, i + 1); names[i] = lua_tostring(L, -1); lua_pop(L, 1); }
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    lua_newtable(L);
    for (int i = 0; i < n; i++) { lua_pushstring(L, names[i]); lua_rawseti(L, -2, i + 1); }
    return 1;
}

/* exec({prog, args...}) replaces the process (PATH is searched); returns nil, message on failure. */
static int l_exec(lua_State *L) {
    lua_Integer n = fl_lcheckrawlist(L, 1, "exec");
    luaL_argcheck(L, n >= 1 && n < 100000, 1, "expected a non-empty list {program, args...}");
    char **argv = (char **)lua_newuserdatauv(L, (size_t)(n + 1) * sizeof *argv, 0);
    for (lua_Integer i = 1; i <= n; i++) {
        if (lua_rawgeti(L, 1, i) != LUA_TSTRING) return luaL_error(L, "exec: argument %I is not a string", i);
        argv[i - 1] = (char *)lua_tostring(L, -1);   /* kept alive by the table */
        lua_pop(L, 1);
    }
    argv[n] = NULL;
    fflush(NULL);
    execvp(argv[0], argv);
    lua_pushnil(L);
    lua_pushfstring(L, "cannot run %s: %s", argv[0], strerror(errno));
    return 2;
}

/* executable() -> absolute path of the running binary (/proc/self/exe). */
static int l_executable(lua_State *L) {
    fl_lmaxargs(L, 0, "sys.executable", "no arguments");
    char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) return luaL_error(L, "cannot find the fp8lab executable: %s", strerror(errno));
    lua_pushlstring(L, buf, (size_t)n);
    return 1;
}

/* realpath(path) -> absolute path, or nil, message. */
static int l_realpath(lua_State *L) {
    char *r = realpath(luaL_checkstring(L, 1), NULL);
    if (!r) {
        lua_pushnil(L);
        lua_pushstring(L, strerror(errno));
        return 2;
    }
    lua_pushstring(L, r);
    free(r);
    return 1;
}

/* isatty(fd) -> whether fd (0 stdin, 1 stdout, 2 stderr) is a terminal. */
static int l_isatty(lua_State *L) {
    lua_pushboolean(L, isatty((int)luaL_checkinteger(L, 1)));
    return 1;
}

static int l_geteuid(lua_State *L) {
    fl_lmaxargs(L, 0, "sys.geteuid", "no arguments");
    lua_pushinteger(L, (lua_Integer)geteuid());
    return 1;
}

static int l_omp_max_threads(lua_State *L) {
    fl_lmaxargs(L, 0, "sys.omp_max_threads", "no arguments");
#ifdef _OPENMP
    lua_pushinteger(L, omp_get_max_threads());
#else
    lua_pushinteger(L, 1);
#endif
    return 1;
}

/* The Makefile's probes (FL_HAVE_*), as 0/1. */
#ifdef FL_HAVE_CUDA
#define BUILT_CUDA 1
#else
#define BUILT_CUDA 0
#endif
#ifdef FL_HAVE_CUBLASLT
#define BUILT_CUBLASLT 1
#else
#define BUILT_CUBLASLT 0
#endif
#ifdef FL_HAVE_NCCL
#define BUILT_NCCL 1
#else
#define BUILT_NCCL 0
#endif
#ifdef FL_HAVE_MPI
#define BUILT_MPI 1
#else
#define BUILT_MPI 0
#endif

/* cpu_fp8_gemm() -> the kernel family of the CPU's own FP8 GEMM on this CPU ("amx_bf16", "avx512_bf16",
 * "avx512_fma", "avx2_fma"), or nil: FP8 GEMMs decode to bf16 and run oneDNN. */
static int l_cpu_fp8_gemm(lua_State *L) {
    fl_lmaxargs(L, 0, "cpu_fp8_gemm", "no arguments");
    const char *f = fl_cpu_fp8_mm_family();
    if (f) lua_pushstring(L, f);
    else lua_pushnil(L);
    return 1;
}

/* cpu_isa() -> the cap on the CPU's instruction sets (FP8LAB_CPU_ISA: "avx2", "avx512", "avx512_bf16", or "amx",
 * the default, which caps nothing). */
static int l_cpu_isa(lua_State *L) {
    fl_lmaxargs(L, 0, "cpu_isa", "no arguments");
    lua_pushstring(L, fl_cpu_isa_limit_name());
    return 1;
}

/* build() -> which optional engines were compiled in: {cuda=, cublaslt=, nccl=, mpi=}. */
static int l_build(lua_State *L) {
    fl_lmaxargs(L, 0, "sys.build", "no arguments");
    static const struct { const char *name; int on; } BUILT[] = {
        {"cuda", BUILT_CUDA}, {"cublaslt", BUILT_CUBLASLT}, {"nccl", BUILT_NCCL}, {"mpi", BUILT_MPI}};
    lua_createtable(L, 0, 4);
    for (size_t i = 0; i < sizeof BUILT / sizeof *BUILT; i++) {
        lua_pushboolean(L, BUILT[i].on);
        lua_setfield(L, -2, BUILT[i].name);
    }
    return 1;
}

static const luaL_Reg sys_funcs[] = {
    {"setenv", l_setenv},
    {"env_names", l_env_names},
    {"exec", l_exec},
    {"executable", l_executable},
    {"realpath", l_realpath},
    {"isatty", l_isatty},
    {"geteuid", l_geteuid},
    {"omp_max_threads", l_omp_max_threads},
    {"build", l_build},
    {"cpu_fp8_gemm", l_cpu_fp8_gemm},
    {"cpu_isa", l_cpu_isa},
    {NULL, NULL},
};

int luaopen_fp8_sys(lua_State *L) {
    luaL_newlib(L, sys_funcs);
    return 1;
}

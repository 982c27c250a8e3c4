/* l_config.c — module fp8.config: config.yaml over core/config.c (load, parse, write, check a
 * launch-flag value, the key table), the default location, and as fp8.config.sys the few process
 * helpers `fp8lab launch` and `fp8lab env` need that Lua lacks (setenv, exec, own executable). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "l_util.h"
#include "config.h"

#define CONFIG_MT "fp8.config.box"

static int box_gc(lua_State *L) {
    fl_config_free((fl_config *)luaL_checkudata(L, 1, CONFIG_MT));
    return 0;
}

/* A config in a userdata, so a Lua error while it is in use cannot leak its notices. */
static fl_config *newbox(lua_State *L) {
    fl_config *c = (fl_config *)lua_newuserdatauv(L, sizeof *c, 0);
    fl_config_init(c);
    if (luaL_newmetatable(L, CONFIG_MT)) {
        lua_pushcfunction(L, box_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    return c;
}

static void push_value(lua_State *L, fl_config_key k, int v) {
    const fl_config_keyinfo *ki = fl_config_info(k);
    switch (ki->type) {
    case FL_CFG_CHOICE: lua_pushstring(L, ki->choices[v]); break;
    case FL_CFG_INT: lua_pushinteger(L, v); break;
    case FL_CFG_BOOL: lua_pushboolean(L, v); break;
    case FL_CFG_BOOL3:
        lua_createtable(L, 3, 0);
        for (int i = 0; i < 3; i++) {
            lua_pushboolean(L, (v >> i) & 1);
            lua_rawseti(L, -2, i + 1);
        }
        break;
    }
}

/* {mixed_precision=, num_processes=, fp8_config={...}, notices={...}, path=} (absent keys nil). */
static void push_config(lua_State *L, const fl_config *c, const char *path) {
    lua_createtable(L, 0, 5);
    for (int k = 0; k < FL_CFG_KEY_COUNT; k++) {
        const fl_config_keyinfo *ki = fl_config_info((fl_config_key)k);
        if (!fl_config_has(c, (fl_config_key)k)) continue;
        if (ki->in_fp8_block) {
            if (lua_getfield(L, -1, "fp8_config") != LUA_TTABLE) {
                lua_pop(L, 1);
                lua_newtable(L);
                lua_pushvalue(L, -1);
                lua_setfield(L, -3, "fp8_config");
            }
            push_value(L, (fl_config_key)k, c->value[k]);
            lua_setfield(L, -2, ki->name);
            lua_pop(L, 1);
        } else {
            push_value(L, (fl_config_key)k, c->value[k]);
            lua_setfield(L, -2, ki->name);
        }
    }
    lua_createtable(L, c->n_notices, 0);
    for (int i = 0; i < c->n_notices; i++) {
        lua_pushstring(L, c->notices[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "notices");
    if (path) {
        lua_pushstring(L, path);
        lua_setfield(L, -2, "path");
    }
}

/* load(path) -> settings table; raises "path:line:col: ..." */
static int l_load(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    fl_config *c = newbox(L);
    fl_lcheck(L, fl_config_load(c, path));
    push_config(L, c, path);
    return 1;
}

/* parse(text [, name]) -> settings table (name stands for the file in messages). */
static int l_parse(lua_State *L) {
    size_t len;
    const char *text = luaL_checklstring(L, 1, &len);
    const char *name = luaL_optstring(L, 2, "(string)");
    fl_config *c = newbox(L);
    fl_lcheck(L, fl_config_load_buffer(c, text, len, name));
    push_config(L, c, NULL);
    return 1;
}

static fl_config_key check_key(lua_State *L, const char *name, int fp8_block, const char *where) {
    int k = fl_config_key_from_name(name);
    if (k >= 0 && fl_config_info((fl_config_key)k)->in_fp8_block == (fp8_block != 0)) return (fl_config_key)k;
    if (k >= 0)
        luaL_error(L, "%s: key '%s' belongs %s", where, name,
                   fp8_block ? "at the top level, not inside fp8_config" : "inside fp8_config");
    const char *names[FL_CFG_KEY_COUNT * 2 + 1];
    size_t n = 0;
    for (int i = 0; i < FL_CFG_KEY_COUNT; i++) {
        const fl_config_keyinfo *ki = fl_config_info((fl_config_key)i);
        if (ki->in_fp8_block != (fp8_block != 0)) continue;
        names[n++] = ki->name;
        if (ki->alias) names[n++] = ki->alias;
    }
    if (!fp8_block) names[n++] = "fp8_config";
    const char *best = fl_config_suggest(name, names, n);
    if (best) luaL_error(L, "%s: unknown key '%s'%s (did you mean '%s'?)", where, name, fp8_block ? " in fp8_config" : "", best);
    luaL_error(L, "%s: unknown key '%s'%s", where, name, fp8_block ? " in fp8_config" : "");
    return FL_CFG_KEY_COUNT;
}

/* The Lua value at idx as the text fl_config_set reads (booleans, integers, strings, {a,b,c}). */
static const char *value_text(lua_State *L, int idx, const char *key) {
    idx = lua_absindex(L, idx);
    switch (lua_type(L, idx)) {
    case LUA_TSTRING: return lua_tostring(L, idx);
    case LUA_TBOOLEAN: return lua_toboolean(L, idx) ? "true" : "false";
    case LUA_TNUMBER:
        if (!lua_isinteger(L, idx)) luaL_error(L, "%s: expected an integer, got %s", key, lua_tostring(L, idx));
        return lua_pushfstring(L, "%I", lua_tointeger(L, idx));
    case LUA_TTABLE: {
        if (luaL_len(L, idx) != 3) luaL_error(L, "%s: expected a list of 3 booleans", key);
        luaL_Buffer b;
        luaL_buffinit(L, &b);
        for (int i = 1; i <= 3; i++) {
            if (lua_geti(L, idx, i) != LUA_TBOOLEAN) luaL_error(L, "%s[%d]: expected a boolean", key, i);
            int v = lua_toboolean(L, -1);
            lua_pop(L, 1);
            luaL_addstring(&b, v ? "true" : "false");
            if (i < 3) luaL_addchar(&b, ',');
        }
        luaL_pushresult(&b);
        return lua_tostring(L, -1);
    }
    default: luaL_error(L, "%s: expected a string, integer, boolean or list, got %s", key, luaL_typename(L, idx));
    }
    return NULL;
}

static void set_field(lua_State *L, fl_config *c, int fp8_block) {
    /* key at -2, value at -1 */
    if (lua_type(L, -2) != LUA_TSTRING) luaL_error(L, "write: keys must be strings, got %s", luaL_typename(L, -2));
    const char *name = lua_tostring(L, -2);
    fl_config_key k = check_key(L, name, fp8_block, "write");
    const char *shown = lua_pushfstring(L, "write: %s%s", fp8_block ? "fp8_config." : "", name);
    const char *text = value_text(L, -2, shown);
    fl_lcheck(L, fl_config_set(c, k, text, shown));
}

/* Fill c from a settings table shaped as load() returns it (path and notices are skipped). */
static void table_to_config(lua_State *L, int idx, fl_config *c) {
    idx = lua_absindex(L, idx);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        int top = lua_gettop(L);
        const char *key = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "";
        if (strcmp(key, "path") == 0 || strcmp(key, "notices") == 0) {
            /* what load() adds beside the settings */
        } else if (strcmp(key, "fp8_config") == 0) {
            luaL_checktype(L, -1, LUA_TTABLE);
            int blk = lua_gettop(L);
            lua_pushnil(L);
            while (lua_next(L, blk)) {
                int t2 = lua_gettop(L);
                set_field(L, c, 1);
                lua_settop(L, t2 - 1);
            }
        } else {
            set_field(L, c, 0);
        }
        lua_settop(L, top - 1);
    }
}

/* write(path, settings): validated like a loaded file, written atomically. */
static int l_write(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    fl_config *c = newbox(L);
    table_to_config(L, 2, c);
    fl_lcheck(L, fl_config_write(c, path));
    lua_pushstring(L, path);
    return 1;
}

/* check(key, text [, origin]) -> the value as load() would give it; raises "origin: expected ...".
 * key: canonical name or alias. Used for launch flags, FP8LAB_* variables and questionnaire answers. */
static int l_check(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    const char *text = luaL_checkstring(L, 2);
    const char *origin = luaL_optstring(L, 3, name);
    int k = fl_config_key_from_name(name);
    if (k < 0) return luaL_error(L, "check: unknown key '%s'", name);
    fl_config *c = newbox(L);
    fl_lcheck(L, fl_config_set(c, (fl_config_key)k, text, origin));
    push_value(L, (fl_config_key)k, c->value[k]);
    return 1;
}

/* keys() -> list of {name, alias, flag, env, block, type, choices, min, max, default, backends}. */
static int l_keys(lua_State *L) {
    static const char *const TYPES[] = {"choice", "int", "bool", "bool3"};
    static const char *const BACKENDS[] = {"msamp", "te", "ao"};
    lua_createtable(L, FL_CFG_KEY_COUNT, 0);
    for (int k = 0; k < FL_CFG_KEY_COUNT; k++) {
        const fl_config_keyinfo *ki = fl_config_info((fl_config_key)k);
        lua_createtable(L, 0, 11);
        lua_pushstring(L, ki->name); lua_setfield(L, -2, "name");
        if (ki->alias) { lua_pushstring(L, ki->alias); lua_setfield(L, -2, "alias"); }
        lua_pushstring(L, ki->flag); lua_setfield(L, -2, "flag");
        lua_pushstring(L, ki->env); lua_setfield(L, -2, "env");
        if (ki->in_fp8_block) { lua_pushliteral(L, "fp8_config"); lua_setfield(L, -2, "block"); }
        lua_pushstring(L, TYPES[ki->type]); lua_setfield(L, -2, "type");
        if (ki->choices) {
            lua_newtable(L);
            for (int i = 0; ki->choices[i]; i++) { lua_pushstring(L, ki->choices[i]); lua_rawseti(L, -2, i + 1); }
            lua_setfield(L, -2, "choices");
        }
        if (ki->type == FL_CFG_INT) {
            lua_pushinteger(L, ki->min); lua_setfield(L, -2, "min");
            lua_pushinteger(L, ki->max); lua_setfield(L, -2, "max");
        }
        push_value(L, (fl_config_key)k, ki->def); lua_setfield(L, -2, "default");
        if (ki->backends) {
            lua_newtable(L);
            int n = 0;
            for (int b = 0; b < FL_BACKEND_COUNT; b++)
                if (ki->backends & (1u << b)) { lua_pushstring(L, BACKENDS[b]); lua_rawseti(L, -2, ++n); }
            lua_setfield(L, -2, "backends");
        }
        lua_rawseti(L, -2, k + 1);
    }
    return 1;
}

/* distance(a, b) -> the edit distance of two names (fl_edit_distance), or nil when either is longer
 * than 64 bytes. */
static int l_distance(lua_State *L) {
    size_t d = fl_edit_distance(luaL_checkstring(L, 1), luaL_checkstring(L, 2));
    if (d == SIZE_MAX) lua_pushnil(L); else lua_pushinteger(L, (lua_Integer)d);
    return 1;
}

/* suggest(word, {candidates}) -> the nearest plausible candidate, or nil. */
static int l_suggest(lua_State *L) {
    const char *word = luaL_checkstring(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_Integer n = luaL_len(L, 2);
    if (n > 1000) n = 1000;
    if (n < 0) n = 0;   /* a __len that lies: no candidates */
    const char **cands = (const char **)lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *cands, 0);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_geti(L, 2, i);   /* strings stay alive in the table */
        cands[i - 1] = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
        lua_pop(L, 1);
    }
    const char *best = fl_config_suggest(word, cands, (size_t)n);
    if (best) lua_pushstring(L, best); else lua_pushnil(L);
    return 1;
}

/* default_path() -> $XDG_CACHE_HOME (if absolute) or ~/.cache, + /fp8lab/default_config.yaml */
static int l_default_path(lua_State *L) {
    const char *x = getenv("XDG_CACHE_HOME");
    if (x && x[0] == '/') {
        lua_pushfstring(L, "%s/fp8lab/default_config.yaml", x);
        return 1;
    }
    const char *home = getenv("HOME");
    if (!home || !*home) return luaL_error(L, "cannot find the config directory: set HOME or XDG_CACHE_HOME");
    lua_pushfstring(L, "%s/.cache/fp8lab/default_config.yaml", home);
    return 1;
}

/* load_default() -> settings of $FP8LAB_CONFIG_FILE, else of the default path if it exists, else nil. */
static int l_load_default(lua_State *L) {
    const char *env = getenv("FP8LAB_CONFIG_FILE");
    if (env && *env) {
        lua_settop(L, 0);
        lua_pushstring(L, env);
        return l_load(L);
    }
    lua_settop(L, 0);
    l_default_path(L);
    if (access(lua_tostring(L, 1), F_OK) != 0) { lua_pushnil(L); return 1; }
    return l_load(L);
}

static int l_libyaml_version(lua_State *L) {
    lua_pushstring(L, fl_config_yaml_version());
    return 1;
}

/* ---- fp8.config.sys ---------------------------------------------------------------------------- */

/* setenv(name, value) sets, setenv(name, nil) removes. */
static int l_setenv(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    luaL_argcheck(L, *name && !strchr(name, '='), 1, "not a valid variable name");
    int r = lua_isnoneornil(L, 2) ? unsetenv(name) : setenv(name, luaL_checkstring(L, 2), 1);
    if (r != 0) return luaL_error(L, "setenv %s: %s", name, strerror(errno));
    return 0;
}

/* exec({prog, args...}) replaces the process (PATH is searched); returns nil, message on failure. */
static int l_exec(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_Integer n = luaL_len(L, 1);
    luaL_argcheck(L, n >= 1 && n < 100000, 1, "expected a non-empty list {program, args...}");
    char **argv = (char **)lua_newuserdatauv(L, (size_t)(n + 1) * sizeof *argv, 0);
    for (lua_Integer i = 1; i <= n; i++) {
        if (lua_geti(L, 1, i) != LUA_TSTRING) return luaL_error(L, "exec: argument %I is not a string", i);
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
    lua_pushinteger(L, (lua_Integer)geteuid());
    return 1;
}

static int l_omp_max_threads(lua_State *L) {
#ifdef _OPENMP
    lua_pushinteger(L, omp_get_max_threads());
#else
    lua_pushinteger(L, 1);
#endif
    return 1;
}

/* build() -> which optional engines were compiled in. The CUDA-side macros are the Makefile's. */
static int l_build(lua_State *L) {
    lua_createtable(L, 0, 4);
#ifdef FL_HAVE_CUDA
    lua_pushboolean(L, 1);
#else
    lua_pushboolean(L, 0);
#endif
    lua_setfield(L, -2, "cuda");
#ifdef FL_HAVE_CUBLASLT
    lua_pushboolean(L, 1);
#else
    lua_pushboolean(L, 0);
#endif
    lua_setfield(L, -2, "cublaslt");
#ifdef FL_HAVE_NCCL
    lua_pushboolean(L, 1);
#else
    lua_pushboolean(L, 0);
#endif
    lua_setfield(L, -2, "nccl");
#ifdef FL_HAVE_MPI
    lua_pushboolean(L, 1);
#else
    lua_pushboolean(L, 0);
#endif
    lua_setfield(L, -2, "mpi");
    return 1;
}

static const luaL_Reg sys_funcs[] = {
    {"setenv", l_setenv},
    {"exec", l_exec},
    {"executable", l_executable},
    {"realpath", l_realpath},
    {"isatty", l_isatty},
    {"geteuid", l_geteuid},
    {"omp_max_threads", l_omp_max_threads},
    {"build", l_build},
    {NULL, NULL},
};

static const luaL_Reg config_funcs[] = {
    {"load", l_load},
    {"parse", l_parse},
    {"write", l_write},
    {"check", l_check},
    {"keys", l_keys},
    {"suggest", l_suggest},
    {"distance", l_distance},
    {"default_path", l_default_path},
    {"load_default", l_load_default},
    {"libyaml_version", l_libyaml_version},
    {NULL, NULL},
};

int luaopen_fp8_config(lua_State *L) {
    luaL_newlib(L, config_funcs);
    luaL_newlib(L, sys_funcs);
    lua_setfield(L, -2, "sys");
    lua_pushinteger(L, FL_CONFIG_MAX_BYTES);
    lua_setfield(L, -2, "MAX_BYTES");
    lua_pushinteger(L, FL_CONFIG_MAX_DEPTH);
    lua_setfield(L, -2, "MAX_DEPTH");
    return 1;
}

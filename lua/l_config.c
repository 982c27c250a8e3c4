/* l_config.c — module fp8.config: config.yaml over core/config.c (load, parse, write) and its
 * default location. The keys and their checks are the settings table's (fp8.settings, whose check,
 * keys, suggest and distance this module also offers under the names it always had); the process
 * helpers of `fp8lab launch` are fp8.sys (l_sys.c), here also as fp8.config.sys. */
#include <stdlib.h>
#include <string.h>
#include <pwd.h>
#include <unistd.h>
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

/* {mixed_precision=, num_processes=, fp8_config={...}, notices={...}, path=} (absent keys nil). */
static void push_config(lua_State *L, const fl_config *c, const char *path) {
    lua_createtable(L, 0, 5);
    for (int k = 0; k < FL_SET_COUNT; k++) {
        const fl_setting *r = fl_setting_info((fl_setting_id)k);
        if (!r || !fl_settings_has(&c->s, (fl_setting_id)k)) continue;
        if (r->file == FL_FILE_FP8_CONFIG) {
            if (lua_getfield(L, -1, "fp8_config") != LUA_TTABLE) {
                lua_pop(L, 1);
                lua_newtable(L);
                lua_pushvalue(L, -1);
                lua_setfield(L, -3, "fp8_config");
            }
            fl_lpushsetting(L, k, c->s.value[k]);
            lua_setfield(L, -2, r->name);
            lua_pop(L, 1);
        } else {
            fl_lpushsetting(L, k, c->s.value[k]);
            lua_setfield(L, -2, r->name);
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
    const char *path = fl_lcheckpath(L, 1, "config.load");
    fl_config *c = newbox(L);
    FL_LCALL(L, fl_config_load(c, path));
    push_config(L, c, path);
    return 1;
}

/* parse(text [, name]) -> settings table (name stands for the file in messages). */
static int l_parse(lua_State *L) {
    size_t len;
    const char *text = luaL_checklstring(L, 1, &len);
    const char *name = luaL_optstring(L, 2, "(string)");
    fl_lmaxargs(L, 2, "config.parse", "(text [, name])");
    fl_config *c = newbox(L);
    fl_lcheck(L, fl_config_load_buffer(c, text, len, name));
    push_config(L, c, NULL);
    return 1;
}

/* The setting a key of a settings table names in the top level or the fp8_config block. */
static fl_setting_id check_key(lua_State *L, const char *name, int fp8_block, const char *where) {
    fl_setting_place want = fp8_block ? FL_FILE_FP8_CONFIG : FL_FILE_TOP;
    int k = fl_setting_find(name);
    const fl_setting *r = k >= 0 ? fl_setting_info((fl_setting_id)k) : NULL;
    if (r && r->file == want) return (fl_setting_id)k;
    if (r && r->file != FL_FILE_NONE)
        luaL_error(L, "%s: key '%s' belongs %s", where, name,
                   fp8_block ? "at the top level, not inside fp8_config" : "inside fp8_config");
    const char *names[FL_SET_COUNT * 2 + 1];
    size_t n = 0;
    for (int i = 0; i < FL_SET_COUNT; i++) {
        const fl_setting *ri = fl_setting_info((fl_setting_id)i);
        if (!ri || ri->file != want) continue;
        names[n++] = ri->name;
        if (ri->alias) names[n++] = ri->alias;
    }
    if (!fp8_block) names[n++] = "fp8_config";
    const char *best = fl_suggest(name, names, n);
    if (best) luaL_error(L, "%s: unknown key '%s'%s (did you mean '%s'?)", where, name, fp8_block ? " in fp8_config" : "", best);
    luaL_error(L, "%s: unknown key '%s'%s", where, name, fp8_block ? " in fp8_config" : "");
    return FL_SET_COUNT;
}

static void set_field(lua_State *L, fl_config *c, int fp8_block) {
    /* key at -2, value at -1 */
    if (lua_type(L, -2) != LUA_TSTRING) luaL_error(L, "write: keys must be strings, got %s", luaL_typename(L, -2));
    const char *name = lua_tostring(L, -2);
    fl_setting_id k = check_key(L, name, fp8_block, "write");
    if (fl_settings_has(&c->s, k)) {   /* a key and its other name (amax_history_len, amax_history_length) */
        const fl_setting *r = fl_setting_info(k);
        const char *other = strcmp(name, r->name) == 0 && r->alias ? r->alias : r->name;
        const int first = strcmp(name, other) < 0;   /* in sorted order: the table's order is not fixed */
        luaL_error(L, "write: %s'%s' and '%s' name the same option; give one", fp8_block ? "fp8_config: " : "",
                   first ? name : other, first ? other : name);
    }
    const char *shown = lua_pushfstring(L, "write: %s%s", fp8_block ? "fp8_config." : "", name);
    fl_settings_put(&c->s, k, fl_lchecksetting(L, -2, (int)k, shown, 1));
    lua_pop(L, 1);
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
            if (!lua_istable(L, -1))
                luaL_error(L, "write: fp8_config: expected a table of FP8 settings, got %s", luaL_typename(L, -1));
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
    const char *path = fl_lcheckpath(L, 1, "config.write");
    luaL_checktype(L, 2, LUA_TTABLE);
    fl_lmaxargs(L, 2, "config.write", "(path, settings)");
    fl_config *c = newbox(L);
    table_to_config(L, 2, c);
    FL_LCALL(L, fl_config_write(c, path));
    lua_pushstring(L, path);
    return 1;
}

/* The home directory: $HOME, else the user's entry in the password database (as Python's expanduser, which
 * Accelerate's default config path goes through: a cron job or a service often runs without HOME), else NULL. */
static const char *home_dir(void) {
    const char *home = getenv("HOME");
    if (home && *home) return home;
    const struct passwd *pw = getpwuid(getuid());
    return pw && pw->pw_dir && *pw->pw_dir ? pw->pw_dir : NULL;
}

/* default_path() -> $XDG_CACHE_HOME (if absolute) or ~/.cache, + /fp8lab/default_config.yaml */
static int l_default_path(lua_State *L) {
    fl_lmaxargs(L, 0, "config.default_path", "no arguments");
    const char *x = getenv("XDG_CACHE_HOME");
    if (x && x[0] == '/') {
        lua_pushfstring(L, "%s/fp8lab/default_config.yaml", x);
        return 1;
    }
    const char *home = home_dir();
    if (!home) return luaL_error(L, "cannot find the config directory: HOME is not set and this user has no home "
                                    "directory in the password database; set HOME or XDG_CACHE_HOME");
    lua_pushfstring(L, "%s/.cache/fp8lab/default_config.yaml", home);
    return 1;
}

/* load_default() -> settings of $FP8LAB_CONFIG_FILE, else of the default path if it exists, else nil. */
static int l_load_default(lua_State *L) {
    fl_lmaxargs(L, 0, "config.load_default", "no arguments");
    const char *env = getenv("FP8LAB_CONFIG_FILE");
    if (env && *env) {
        lua_settop(L, 0);
        lua_pushstring(L, env);
        return l_load(L);
    }
    lua_settop(L, 0);
    const char *x = getenv("XDG_CACHE_HOME");
    if (!(x && x[0] == '/') && !home_dir()) { lua_pushnil(L); return 1; }   /* no home: no default file either */
    l_default_path(L);
    if (access(lua_tostring(L, 1), F_OK) != 0) { lua_pushnil(L); return 1; }
    return l_load(L);
}

static int l_libyaml_version(lua_State *L) {
    fl_lmaxargs(L, 0, "config.libyaml_version", "no arguments");
    lua_pushstring(L, fl_config_yaml_version());
    return 1;
}

static const luaL_Reg config_funcs[] = {
    {"load", l_load},
    {"parse", l_parse},
    {"write", l_write},
    {"default_path", l_default_path},
    {"load_default", l_load_default},
    {"libyaml_version", l_libyaml_version},
    {NULL, NULL},
};

int luaopen_fp8_settings(lua_State *L);   /* l_settings.c */
int luaopen_fp8_sys(lua_State *L);        /* l_sys.c */

int luaopen_fp8_config(lua_State *L) {
    luaL_newlib(L, config_funcs);
    /* the settings' own functions under the names fp8.config has always offered */
    luaL_requiref(L, "fp8.settings", luaopen_fp8_settings, 0);
    static const char *const SAME[][2] = {{"keys", "list"}, {"suggest", "suggest"}, {"distance", "distance"}};
    for (size_t i = 0; i < sizeof SAME / sizeof *SAME; i++) {
        lua_getfield(L, -1, SAME[i][1]);
        lua_setfield(L, -3, SAME[i][0]);
    }
    lua_pop(L, 1);
    fl_lpush_settings_parse(L, "config.check");   /* settings.parse, its messages naming config.check */
    lua_setfield(L, -2, "check");
    luaL_requiref(L, "fp8.sys", luaopen_fp8_sys, 0);
    lua_setfield(L, -2, "sys");
    lua_pushinteger(L, FL_CONFIG_MAX_BYTES);
    lua_setfield(L, -2, "MAX_BYTES");
    lua_pushinteger(L, FL_CONFIG_MAX_DEPTH);
    lua_setfield(L, -2, "MAX_DEPTH");
    return 1;
}

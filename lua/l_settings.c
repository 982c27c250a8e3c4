/* l_settings.c — module fp8.settings: core/settings.h's table of settings and its one checker, for
 * the Lua library. list() gives the rows (what kwargs.lua builds its handler fields and resolve()
 * from, cli.lua its flags and questions, help() its text); check() and parse() turn a Lua value or a
 * text into a setting's value with the table's messages; suggest() and distance() are the program's
 * one "did you mean". fl_lchecksetting serves the other bindings (l_fp8_layer.c's recipe tables). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "l_util.h"
#include "settings.h"

/* The Lua value at idx as a message shows it: numbers and booleans as written, strings quoted,
 * a short table spelled out ({true, false}), anything else by its type. */
static void render(lua_State *L, int idx, char *buf, size_t n, int depth) {
    idx = lua_absindex(L, idx);
    switch (lua_type(L, idx)) {
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx)) snprintf(buf, n, "%lld", (long long)lua_tointeger(L, idx));
        else {
            double v = lua_tonumber(L, idx);
            if (v != v) snprintf(buf, n, "nan");
            else if (isinf(v)) snprintf(buf, n, v > 0 ? "inf" : "-inf");
            else snprintf(buf, n, "%.14g", v);
        }
        break;
    case LUA_TBOOLEAN: snprintf(buf, n, "%s", lua_toboolean(L, idx) ? "true" : "false"); break;
    case LUA_TNIL: snprintf(buf, n, "nil"); break;
    case LUA_TSTRING: {
        size_t len;
        const char *s = lua_tolstring(L, idx, &len);
        fl_setting_quote(s, len, '"', buf, n);
        break;
    }
    case LUA_TTABLE: {
        if (depth > 0) { snprintf(buf, n, "{...}"); break; }
        size_t o = (size_t)snprintf(buf, n, "{");
        lua_Integer len = (lua_Integer)lua_rawlen(L, idx);
        int shown = 0;
        for (lua_Integer i = 1; i <= len && o + 1 < n; i++) {
            if (shown == 6) { o += (size_t)snprintf(buf + o, n - o, ", ..."); break; }
            char item[80];
            lua_rawgeti(L, idx, i);
            render(L, -1, item, sizeof item, depth + 1);
            lua_pop(L, 1);
            o += (size_t)snprintf(buf + o, n - o, "%s%s", shown++ ? ", " : "", item);
        }
        lua_pushnil(L);
        while (lua_next(L, idx)) {   /* keys outside the list part */
            bool in_list = lua_isinteger(L, -2) && lua_tointeger(L, -2) >= 1 && lua_tointeger(L, -2) <= len;
            if (!in_list && o + 1 < n) {
                char k[80], v[80];
                if (shown == 6) { o += (size_t)snprintf(buf + o, n - o, ", ..."); lua_pop(L, 2); break; }
                if (lua_type(L, -2) == LUA_TSTRING) snprintf(k, sizeof k, "%s", lua_tostring(L, -2));
                else { render(L, -2, k, sizeof k, depth + 1); }
                render(L, -1, v, sizeof v, depth + 1);
                o += (size_t)snprintf(buf + o, n - o, "%s%s=%s", shown++ ? ", " : "", k, v);
            }
            lua_pop(L, 1);
        }
        if (o + 1 < n) snprintf(buf + o, n - o, "}");
        break;
    }
    default: snprintf(buf, n, "a %s", luaL_typename(L, idx)); break;
    }
}

static int refuse_setting(lua_State *L, const char *origin, const char *why) {
    return luaL_error(L, "%s: %s", origin, why);
}

static int mismatch(lua_State *L, int idx, fl_setting_id k, const char *origin) {
    char got[200], why[600];
    render(L, idx, got, sizeof got, 0);
    fl_setting_mismatch(k, got, why, sizeof why);
    return refuse_setting(L, origin, why);
}

static bool callable(lua_State *L, int idx) {
    if (lua_type(L, idx) == LUA_TFUNCTION) return true;
    if (!luaL_getmetafield(L, idx, "__call")) return false;
    lua_pop(L, 1);
    return true;
}

/* {fprop=, dgrad=, wgrad=} (missing ones false) or a list of exactly 3 booleans → mask; -1 otherwise. */
static int bool3_table(lua_State *L, int idx) {
    static const char *const NAMES[] = {"fprop", "dgrad", "wgrad"};
    idx = lua_absindex(L, idx);
    int mask = 0, named = 0, listed = 0, other = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        int slot = -1;
        if (lua_type(L, -2) == LUA_TSTRING) {
            for (int i = 0; i < 3; i++) if (strcmp(lua_tostring(L, -2), NAMES[i]) == 0) slot = i, named++;
        } else if (lua_isinteger(L, -2) && lua_tointeger(L, -2) >= 1 && lua_tointeger(L, -2) <= 3) {
            slot = (int)lua_tointeger(L, -2) - 1;
            listed++;
        }
        if (slot < 0 || !lua_isboolean(L, -1)) other++;
        else if (lua_toboolean(L, -1)) mask |= 1 << slot;
        lua_pop(L, 1);
    }
    if (other || (named && listed) || (listed && listed != 3)) return -1;
    return mask;
}

/* The metamethod that makes the table at idx a proxy (__index, else __pairs), NULL for a plain one: bool3_table reads
 * its fields raw, and a proxy's (in its __index) were taken as absent, false (stop 104; fp8.opts.proxy_text's rule) */
static const char *proxy_metamethod(lua_State *L, int idx) {
    static const char *const MM[] = { "__index", "__pairs" };
    if (!lua_getmetatable(L, idx)) return NULL;
    const char *which = NULL;
    for (int i = 0; i < 2 && !which; i++) {
        lua_pushstring(L, MM[i]);
        if (lua_rawget(L, -2) != LUA_TNIL) which = MM[i];
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return which;
}

int fl_lchecksetting(lua_State *L, int idx, int kk, const char *origin, int strings_as_text) {
    fl_setting_id k = (fl_setting_id)kk;
    const fl_setting *r = fl_setting_info(k);
    if (!r) return luaL_error(L, "settings: no setting number %d", kk);
    if (!origin) origin = r->name;
    idx = lua_absindex(L, idx);
    char why[640];
    int v = 0;
    int t = lua_type(L, idx);
    if (r->unsupported) {
        snprintf(why, sizeof why, "not supported: %s", r->unsupported);
        return refuse_setting(L, origin, why);
    }
    if (t == LUA_TSTRING && (strings_as_text || r->type == FL_SETTING_CHOICE || r->type == FL_SETTING_BOOL3)) {
        size_t len;
        const char *s = lua_tolstring(L, idx, &len);
        if (!fl_setting_parse(k, s, len, FL_FROM_TEXT, &v, why, sizeof why)) return refuse_setting(L, origin, why);
        return v;
    }
    switch (r->type) {
    case FL_SETTING_INT:
        if (t != LUA_TNUMBER) return mismatch(L, idx, k, origin);
        if (!fl_setting_check_number(k, lua_tonumber(L, idx), &v, why, sizeof why)) return refuse_setting(L, origin, why);
        return v;
    case FL_SETTING_BOOL:
        if (t != LUA_TBOOLEAN) return mismatch(L, idx, k, origin);
        return lua_toboolean(L, idx);
    case FL_SETTING_BOOL3: {
        const char *mm = t == LUA_TTABLE ? proxy_metamethod(L, idx) : NULL;
        if (mm) {
            snprintf(why, sizeof why, "expected a plain table of 3 booleans ({fprop, dgrad, wgrad} or by those names), "
                     "got a table whose metatable has %s (a proxy's fields are not read through it: copy them into a "
                     "plain table)", mm);
            return refuse_setting(L, origin, why);
        }
        if (t != LUA_TTABLE || (v = bool3_table(L, idx)) < 0) return mismatch(L, idx, k, origin);
        return v;
    }
    case FL_SETTING_FUNC:
        if (!callable(L, idx)) return mismatch(L, idx, k, origin);
        return 0;
    default:
        return mismatch(L, idx, k, origin);
    }
}

/* The stored value v of k as a Lua value (FUNC: nothing stored, pushes nil). */
static void push_value(lua_State *L, fl_setting_id k, int v) {
    const fl_setting *r = fl_setting_info(k);
    switch (r->type) {
    case FL_SETTING_CHOICE: lua_pushstring(L, r->choices[v]); break;
    case FL_SETTING_INT: lua_pushinteger(L, v); break;
    case FL_SETTING_BOOL: lua_pushboolean(L, v); break;
    case FL_SETTING_BOOL3:
        lua_createtable(L, 3, 0);
        for (int i = 0; i < 3; i++) {
            lua_pushboolean(L, (v >> i) & 1);
            lua_rawseti(L, -2, i + 1);
        }
        break;
    default: lua_pushnil(L); break;
    }
}

void fl_lpushsetting(lua_State *L, int k, int v) { push_value(L, (fl_setting_id)k, v); }

/* The row named (name or alias) at arg; raises with a suggestion for an unknown name. A key of
 * config.yaml's fp8_config block is taken with its block too ("fp8_config.margin", as docs/config.md's
 * table and the loader's messages name it). fname: the function, as messages name it; lister: where
 * the names are listed (fp8.settings.list() or fp8.config.keys()). */
static fl_setting_id check_name(lua_State *L, int arg, const char *fname, const char *lister) {
    static const char BLOCK[] = "fp8_config.";
    const char *name = luaL_checkstring(L, arg);
    int in_block = strncmp(name, BLOCK, sizeof BLOCK - 1) == 0;
    const char *key = in_block ? name + sizeof BLOCK - 1 : name;
    int k = fl_setting_find(key);
    if (k >= 0 && (!in_block || fl_setting_info((fl_setting_id)k)->file == FL_FILE_FP8_CONFIG))
        return (fl_setting_id)k;
    if (k >= 0)
        return (fl_setting_id)luaL_error(L, "%s: '%s' is not a key of the fp8_config block: give '%s'", fname,
                                         name, key);
    const char *names[FL_SET_COUNT * 2];
    size_t n = 0;
    for (int i = 0; i < FL_SET_COUNT; i++) {
        const fl_setting *r = fl_setting_info((fl_setting_id)i);
        if (!r) continue;
        names[n++] = r->name;
        if (r->alias) names[n++] = r->alias;
    }
    const char *best = fl_suggest(key, names, n);
    char hint[160];
    if (best) snprintf(hint, sizeof hint, " (did you mean '%s'?)", best);
    else snprintf(hint, sizeof hint, ": it takes a name or alias that %s lists, e.g. 'margin'", lister);
    return (fl_setting_id)luaL_error(L, "%s: unknown setting '%s'%s", fname, name, hint);
}

/* The function's name for messages: upvalue 1 when it has one (fp8.config's names), else def. */
static const char *own_name(lua_State *L, const char *def) {
    const char *s = lua_tostring(L, lua_upvalueindex(1));
    return s ? s : def;
}

/* check(name, value [, origin]) -> the value as the table stores it, normalized ("te", {false,false,true});
 * a kwarg: strings only where the setting takes text (choices, override_linear_precision).
 * coerce(name, value [, origin]) -> the same, but a string is read as text (a config table that says
 * enable_fsdp_float8_all_gather = "false"). The upvalue says which. */
static int l_check(lua_State *L) {
    int as_text = lua_toboolean(L, lua_upvalueindex(1));
    fl_setting_id k = check_name(L, 1, as_text ? "settings.coerce" : "settings.check", "fp8.settings.list()");
    luaL_checkany(L, 2);
    const char *origin = luaL_optstring(L, 3, fl_setting_info(k)->name);
    int v = fl_lchecksetting(L, 2, (int)k, origin, as_text);
    if (fl_setting_info(k)->type == FL_SETTING_FUNC) lua_pushvalue(L, 2);
    else push_value(L, k, v);
    return 1;
}

/* parse(name, text [, origin]) -> the value of a flag, variable or answer; raises "origin: expected ...".
 * fp8.config offers it as check (upvalue 1: "config.check"; fl_lpush_settings_parse). */
static int l_parse(lua_State *L) {
    int as_config = lua_isstring(L, lua_upvalueindex(1));
    fl_setting_id k = check_name(L, 1, own_name(L, "settings.parse"),
                                 as_config ? "fp8.config.keys()" : "fp8.settings.list()");
    size_t len;
    const char *text = luaL_checklstring(L, 2, &len);
    const char *origin = luaL_optstring(L, 3, fl_setting_info(k)->name);
    char why[640];
    int v;
    if (!fl_setting_parse(k, text, len, FL_FROM_TEXT, &v, why, sizeof why)) return refuse_setting(L, origin, why);
    push_value(L, k, v);
    return 1;
}

/* format(name, value) -> the text a flag or variable carries for a value ("false,false,true"). */
static int l_format(lua_State *L) {
    fl_setting_id k = check_name(L, 1, "settings.format", "fp8.settings.list()");
    int v = fl_lchecksetting(L, 2, (int)k, NULL, 1);
    char buf[128];
    lua_pushstring(L, fl_setting_format(k, v, buf, sizeof buf));
    return 1;
}

static void set_str(lua_State *L, const char *key, const char *v) {
    if (!v) return;
    lua_pushstring(L, v);
    lua_setfield(L, -2, key);
}

/* list() -> one table per setting, in table order: name, alias, type, choices, choice_help
 * ({choice = words}), min, max, default, refused, env, flag, file ("top" | "fp8_config"), block
 * ("fp8_config" for the keys of that block), backends (list of names), fp8_recipe_kwargs, help,
 * question, expected (the words of messages). */
static int l_list(lua_State *L) {
    fl_lmaxargs(L, 0, "settings.list", "no arguments");
    const fl_setting *backend = fl_setting_info(FL_SET_BACKEND);
    lua_newtable(L);
    int n = 0;
    for (int k = 0; k < FL_SET_COUNT; k++) {
        const fl_setting *r = fl_setting_info((fl_setting_id)k);
        if (!r) continue;
        lua_createtable(L, 0, 20);
        set_str(L, "name", r->name);
        set_str(L, "alias", r->alias);
        set_str(L, "type", fl_setting_type_names[r->type]);
        if (r->choices) {
            lua_newtable(L);
            for (int i = 0; r->choices[i]; i++) { lua_pushstring(L, r->choices[i]); lua_rawseti(L, -2, i + 1); }
            lua_setfield(L, -2, "choices");
        }
        if (r->choices && r->choice_help) {   /* help per choice: only beside the choices */
            lua_newtable(L);
            for (int i = 0; r->choices[i]; i++) { lua_pushstring(L, r->choice_help[i]); lua_setfield(L, -2, r->choices[i]); }
            lua_setfield(L, -2, "choice_help");
        }
        if (r->type == FL_SETTING_INT) {
            lua_pushinteger(L, r->min); lua_setfield(L, -2, "min");
            lua_pushinteger(L, r->max); lua_setfield(L, -2, "max");
        }
        push_value(L, (fl_setting_id)k, r->def);
        lua_setfield(L, -2, "default");
        set_str(L, "refused", r->refused);
        set_str(L, "unsupported", r->unsupported);
        set_str(L, "env", r->env);
        set_str(L, "flag", r->flag);
        if (r->file != FL_FILE_NONE) set_str(L, "file", r->file == FL_FILE_TOP ? "top" : "fp8_config");
        if (r->file == FL_FILE_FP8_CONFIG) set_str(L, "block", "fp8_config");
        if (r->backends) {
            lua_newtable(L);
            int m = 0;
            for (int b = 0; b < FL_BACKEND_COUNT; b++)
                if (r->backends & (1u << b)) { lua_pushstring(L, backend->choices[b]); lua_rawseti(L, -2, ++m); }
            lua_setfield(L, -2, "backends");
        }
        lua_pushboolean(L, r->in_fp8_recipe_kwargs);
        lua_setfield(L, -2, "fp8_recipe_kwargs");
        set_str(L, "help", r->help);
        set_str(L, "question", r->question);
        char exp[200];
        set_str(L, "expected", fl_setting_expected((fl_setting_id)k, exp, sizeof exp));
        lua_rawseti(L, -2, ++n);
    }
    return 1;
}

/* distance(a, b) -> the edit distance of two names, or nil when either is longer than 64 bytes. */
static int l_distance(lua_State *L) {
    size_t d = fl_edit_distance(luaL_checkstring(L, 1), luaL_checkstring(L, 2));
    if (d == SIZE_MAX) lua_pushnil(L); else lua_pushinteger(L, (lua_Integer)d);
    return 1;
}

/* suggest(word, {candidates}) -> the nearest plausible candidate, or nil. */
static int l_suggest(lua_State *L) {
    const char *word = luaL_checkstring(L, 1);
    lua_Integer n = fl_lcheckrawlist(L, 2, "suggest");
    if (n > 1000) n = 1000;
    const char **cands = (const char **)lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *cands, 0);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, 2, i);   /* strings stay alive in the table */
        cands[i - 1] = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
        lua_pop(L, 1);
    }
    const char *best = fl_suggest(word, cands, (size_t)n);
    if (best) lua_pushstring(L, best); else lua_pushnil(L);
    return 1;
}

/* parse under another module's name for messages (fp8.config.check). */
void fl_lpush_settings_parse(lua_State *L, const char *fname) {
    lua_pushstring(L, fname);
    lua_pushcclosure(L, l_parse, 1);
}

static const luaL_Reg settings_funcs[] = {
    {"list", l_list},
    {"parse", l_parse},
    {"format", l_format},
    {"suggest", l_suggest},
    {"distance", l_distance},
    {NULL, NULL},
};

int luaopen_fp8_settings(lua_State *L) {
    luaL_newlib(L, settings_funcs);
    for (int as_text = 0; as_text <= 1; as_text++) {
        lua_pushboolean(L, as_text);
        lua_pushcclosure(L, l_check, 1);
        lua_setfield(L, -2, as_text ? "coerce" : "check");
    }
    return 1;
}

-- docs_coverage_spec.lua — docs/lua-api.md names every public name of fp8, fp8.nn, fp8.nn.functional, fp8.optim,
-- fp8.optim.lr_scheduler and fp8.recipes (the API sweep of seed 86 found 13 classes of fp8.nn, 14 functions of
-- fp8.nn.functional, fp8.Tensor and ten names of fp8.recipes in none of its pages' text).
local fp8 = fp8 or require "fp8"

-- The names the page writes as code (`...` spans, over line breaks, not fenced blocks), an option's name
-- (`threshold=20`) not counted as the function of that name; `AdaptiveAvgPool1d`/`2d`/`3d` names each size.
local function documented_names(text)
  text = text:gsub("```.-```", "")
  local names = {}
  for span in text:gmatch("`([^`]+)`") do
    for id, after in span:gmatch("([%a_][%w_]*)()") do
      if not span:sub(after):match("^%s*=[^=]") then names[id] = true end
    end
  end
  for base, rest in text:gmatch("([%a_][%w_]-)1d`([/`23d]*)") do
    names[base .. "1d"] = true
    for n in rest:gmatch("/`([23])d`") do names[base .. n .. "d"] = true end
  end
  return names
end

-- Public names that are not API and so not on the page, each with the reason. (None at present: fp8.recipes'
-- linears, linear_to_fp8, ... are the API for converting by hand, help("recipes"), and are documented.)
local INTERNAL = {}

describe("docs/lua-api.md", function()
  local f = assert(io.open("docs/lua-api.md"))
  local names = documented_names(f:read("a"))
  f:close()

  it("reads the names the way the page writes them", function()
    local n = documented_names("`F.max_unpool1d`/`2d`, `ZeroPad1d`/`2d`/`3d`, `softplus(x [, threshold=20])`, "
      .. "`binary_cross_entropy(input,\ntarget)`\n```lua\nlocal m = fp8.nn.Hidden()\n```")
    for _, k in ipairs { "max_unpool1d", "max_unpool2d", "ZeroPad1d", "ZeroPad2d", "ZeroPad3d", "softplus",
                         "binary_cross_entropy", "target" } do
      assert.is_true(n[k], k)
    end
    for _, k in ipairs { "max_unpool3d", "threshold", "Hidden" } do assert.is_nil(n[k], k) end
  end)

  it("names every public name of fp8, fp8.nn, fp8.nn.functional, fp8.optim, fp8.optim.lr_scheduler, fp8.recipes",
     function()
    -- the fields fp8 loads on first use (lua/fp8/init.lua's LAZY_MODULES and LAZY_RECIPES), so that pairs sees them
    local _ = fp8.nn, fp8.optim, fp8.recipes, fp8.Accelerator, fp8.profiler, fp8.plot, fp8.hist,
      fp8.GradientAccumulationPlugin, fp8.LocalSGD, fp8.autograd, fp8.convert_model, fp8.has_fp8_layers,
      fp8.has_transformer_engine_layers, fp8.contextual_fp8_autocast, fp8.apply_fp8_autowrap, fp8.stats,
      fp8.fp8_autocast, fp8.has_ao_layers
    local missing, counted = {}, 0
    for _, ns in ipairs { { "fp8", fp8 }, { "fp8.nn", fp8.nn }, { "fp8.nn.functional", fp8.nn.functional },
                          { "fp8.optim", fp8.optim }, { "fp8.optim.lr_scheduler", fp8.optim.lr_scheduler },
                          { "fp8.recipes", fp8.recipes } } do
      for k in pairs(ns[2]) do
        if type(k) == "string" and not k:match("^_") then
          local full = ns[1] .. "." .. k
          counted = counted + 1
          if not names[k] and not INTERNAL[full] then missing[#missing + 1] = full end
        end
      end
    end
    assert.is_true(counted > 500, "walked only " .. counted .. " names")
    table.sort(missing)
    assert.are.same({}, missing)
  end)
end)

-- help() finds every public name of fp8.profiler, fp8.progress, fp8.data, fp8.amp, fp8.kwargs and fp8.plot, in an
-- entry that names it (an audit found fp8.amp.MODES, fp8.data.SkipDataLoader, fp8.profiler.Profiler, ... in no entry,
-- and the page naming none of them), and every method of the classes whose objects help() answers for (help.class:
-- a profiler, a SummaryWriter, a progress bar, a safe_open handle, ...) in an entry that names the method.
describe("help()", function()
  local H = require "fp8.help"
  local f = assert(io.open("docs/lua-api.md"))
  local page = f:read("a")
  f:close()
  local function names(text, word) return text:find("%f[%w_]" .. word .. "%f[^%w_]") ~= nil end
  local function entry_names(e, word) return e ~= nil and names((e.sig or "") .. "\n" .. (e.doc or ""), word) end

  it("and docs/lua-api.md name every public name of fp8.profiler, progress, data, amp, kwargs, plot", function()
    local _ = fp8.profiler, fp8.plot
    local missing, counted = {}, 0
    for _, ns in ipairs { "profiler", "progress", "data", "amp", "kwargs", "plot" } do
      for k in pairs(fp8[ns]) do
        if type(k) == "string" and not k:match("^_") then
          counted = counted + 1
          local full = ns .. "." .. k
          if not entry_names(H.lookup(full), k) then missing[#missing + 1] = full .. " (help)" end
          if not names(page, k) then missing[#missing + 1] = full .. " (docs/lua-api.md)" end
        end
      end
    end
    assert.is_true(counted > 40, "walked only " .. counted .. " names")
    table.sort(missing)
    assert.are.same({}, missing)
  end)

  it("finds each method of the classes it answers objects of in an entry that names it", function()
    -- one object of each, so that the C classes' metatables exist and the Lua classes are loaded
    local _ = fp8.profiler.profile {}, fp8.SummaryWriter, fp8.nn.FP8Linear(16, 16, { backend = "te" })
    local p = os.tmpname()
    fp8.save_file({ a = fp8.ones { 1 } }, p)
    local h = fp8.safe_open(p)
    local missing, counted = {}, 0
    for _, c in ipairs(H.CLASSES) do
      local t = c.class or debug.getregistry()[c.registry]
      assert.is_table(t, c.prefix)
      local idx = rawget(t, "__index")
      for _, tbl in ipairs { t, type(idx) == "table" and idx or {} } do
        for k, v in pairs(tbl) do
          if type(k) == "string" and type(v) == "function" and not k:match("^_") then
            counted = counted + 1
            local e = H.lookup(v)
            if not entry_names(e, k) then missing[#missing + 1] = c.prefix .. ":" .. k end
          end
        end
      end
    end
    h:close()
    os.remove(p)
    assert.is_true(counted > 30, "walked only " .. counted .. " methods")
    table.sort(missing)
    assert.are.same({}, missing)
  end)
end)

-- Every ```lua block of README.md and docs/*.md runs as written (audit 10d, stop 94: the pages' examples were run by
-- hand only). Each block runs in a process of its own, in an empty directory (the examples write traces, checkpoints
-- and files under relative names), after a preamble that makes the names the pages take as given: a small `model`,
-- its `opt` (AdamW, which every recipe takes), a `loader` of eight items, a `sched`, `batches`, an input `x`, a
-- `loss` to take a backward of, `F`, `loss_fn` and `train_step`. A block typed at the prompt (its lines begin `fp8> `) is fed to `fp8lab -i` without the prompts.
-- Without a usable GPU a block's lines that name cuda are left out. A block left out is in SKIP, keyed by its first
-- line, with the reason.
describe("the ```lua blocks of README.md and docs/*.md", function()
  local U = dofile("tests/spec/helpers/util.lua")
  local q = U.q
  local cwd = U.sh("pwd -P"):gsub("\n$", "")   -- (not $PWD, which make -C leaves at the caller's directory)
  local function abs(p) return p:sub(1, 1) == "/" and p or cwd .. "/" .. p end
  local BIN = abs(FP8LAB_BIN or "build/fp8lab")
  local lua_dir = os.getenv("FP8LAB_LUA_DIR")
  local env = lua_dir and lua_dir ~= "" and ("FP8LAB_LUA_DIR=" .. q(abs(lua_dir)) .. " ") or ""
  local SKIP = {
    ["local nn, F = fp8.nn, fp8.nn.functional"] = "README's first example trains an epoch of Fashion-MNIST (the data is "
      .. "a Debian package; minutes of CPU); lessons_spec and the demo run the same loop",
  }
  local PREAMBLE = [[
F, nn = fp8.nn.functional, fp8.nn
fp8.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 16))
opt = fp8.optim.AdamW(model:parameters(), { lr = 1e-3 })
local items = {}
for i = 1, 8 do items[i] = { fp8.randn { 32 }, i % 16 } end
loader = fp8.data.DataLoader { items, batch_size = 2 }
sched = fp8.optim.lr_scheduler.StepLR(opt, { step_size = 2 })
batches = {}
for i = 1, 3 do batches[i] = { x = fp8.randn { 4, 32 }, y = fp8.tensor { 1, 2, 3, 4 } } end
loss_fn = F.cross_entropy
x = fp8.randn { 4, 32 }
loss = F.cross_entropy(model(x), batches[1].y)
function train_step(x, y)
  local l = F.cross_entropy(model(x or batches[1].x), y or batches[1].y)
  opt:zero_grad(); l:backward(); opt:step()
  return l
end
]]

  local blocks = {}
  for _, path in ipairs { "README.md", "docs/architecture.md", "docs/checkpoints.md", "docs/cli.md",
                          "docs/concepts.md", "docs/config.md", "docs/cuda.md", "docs/distributed.md",
                          "docs/fp8-spec.md", "docs/lua-api.md", "docs/performance.md", "docs/recipes.md",
                          "docs/robustness.md" } do
    local text = U.must_read(path)
    for pos, code in text:gmatch("()```lua\n(.-)```") do
      local _, line = text:sub(1, pos):gsub("\n", "")
      blocks[#blocks + 1] = { where = ("%s:%d"):format(path, line + 1), code = code,
                              first = code:match("^%s*([^\n]-)%s*\n") }
    end
  end

  it("are found, and each skipped one is still there", function()
    assert.is_true(#blocks >= 12, "found only " .. #blocks)
    for first in pairs(SKIP) do
      local found = false
      for _, b in ipairs(blocks) do found = found or b.first == first end
      assert.is_true(found, "SKIP names a block no page has: " .. first)
    end
  end)

  for _, b in ipairs(blocks) do
    if not SKIP[b.first] then
      it("run as written: " .. b.where, function()
        local dir = U.tmpdir()
        local code = b.code
        if not fp8.cuda.is_available() then
          code = code:gsub("[^\n]*cuda[^\n]*\n", "")
        end
        local prompt = code:match("^fp8> ") ~= nil
        local args
        if prompt then
          -- the lines typed at the prompt, without "fp8> " (a line without it continues the statement above)
          local typed = code:gsub("^fp8> ", ""):gsub("\nfp8> ", "\n")
          U.write(dir .. "/in.txt", PREAMBLE:gsub("\nlocal items", "\nitems") .. typed)
          args = "-i < in.txt"
        else
          U.write(dir .. "/block.lua", PREAMBLE .. code)
          args = "block.lua < /dev/null"
        end
        local out, ok = U.sh(("cd %s && %s%s %s"):format(q(dir), env, q(BIN), args))
        os.execute("rm -rf " .. q(dir))
        assert.is_true(ok, b.where .. ":\n" .. out)
        -- an error at the prompt is reported and the next line read: it must not be there at all
        assert.is_nil(out:find("fp8lab: ", 1, true) and not out:find("fp8lab: notice", 1, true) and out or nil,
          b.where .. ":\n" .. out)
        assert.is_nil(out:find("stdin:%d+:"), b.where .. ":\n" .. out)
        -- the prompt reports every error with a traceback; an error raised without a position (error(msg, 0), as
        -- load_state's "does not exist", or a message placed in a module) or an error object that is not a string
        -- names no stdin line (until stop 95 such a block passed)
        assert.is_nil(out:find("stack traceback:", 1, true) or out:find("(error object is a", 1, true),
          b.where .. ":\n" .. out)
      end)
    end
  end
end)

-- Every name `fp8.a.b` a page writes in code exists (audit 10d, stop 94: docs/cuda.md named `fp8.core._device_has`
-- and `fp8.quantize`, neither of which is a name; the modules only require reaches are written require("...")).
-- docs/robustness.md and docs/performance.md are records of their day and keep the names they had;
-- docs/architecture.md names the modules as require knows them (`fp8._dist`, `fp8.sys`). Two names are read
-- as nil or an error on purpose: `fp8.profiler.current` when no profiler runs, and Accelerate's names fp8lab
-- does not have (`fp8.PartialState`), whose reading says why.
local NOT_A_VALUE = { ["profiler.current"] = true, PartialState = true }
describe("the fp8 names README.md and docs/*.md write in code", function()
  local U = dofile("tests/spec/helpers/util.lua")
  local function resolve(path)
    local t = fp8
    for part in path:gmatch("[^%.]+") do
      if type(t) ~= "table" then return nil end
      local ok, v = pcall(function() return t[part] end)
      if not ok then return nil end
      t = v
    end
    return t
  end

  it("all exist", function()
    local _ = fp8.nn, fp8.optim, fp8.recipes, fp8.profiler, fp8.plot, fp8.autograd, fp8.hist, fp8.stats
    local missing, counted = {}, 0
    for _, path in ipairs { "README.md", "docs/checkpoints.md", "docs/cli.md", "docs/concepts.md",
                            "docs/config.md", "docs/cuda.md", "docs/distributed.md", "docs/fp8-spec.md",
                            "docs/lua-api.md", "docs/recipes.md" } do
      local text = U.must_read(path):gsub("```.-```", "")
      for span in text:gmatch("`([^`]+)`") do
        span = span:gsub("require%s*%b()", ""):gsub('require%s*"[^"]*"', "")
        for name in span:gmatch("%f[%w_.]fp8%.([%a_][%w_%.]*[%w_])") do
          counted = counted + 1
          if not NOT_A_VALUE[name] and resolve(name) == nil then missing[#missing + 1] = path .. ": fp8." .. name end
        end
      end
    end
    assert.is_true(counted > 300, "walked only " .. counted .. " names")
    assert.are.same({}, missing)
  end)
end)

-- docs/cli.md names every FP8LAB_* variable fp8lab reads, but the test suite's (audit 10d, stop 94: recipes.md said
-- docs/config.md listed them all; it lists the settings' variables, and FP8LAB_PROGRESS and FP8LAB_GNUPLOT were in no
-- list, the first only in lua-api.md's progress bars).
describe("docs/cli.md", function()
  it("names every FP8LAB_* variable fp8lab reads (fp8.env's), but the test suite's", function()
    local cli = dofile("tests/spec/helpers/util.lua").must_read("docs/cli.md")
    local E = require "fp8.env"
    local missing, counted = {}, 0
    for name in pairs(E.known()) do
      local what = E.OTHER[name] or ""
      if not what:match("^test") then
        counted = counted + 1
        if not cli:find("`" .. name .. "`", 1, true) then missing[#missing + 1] = name end
      end
    end
    assert.is_true(counted >= 20, "walked only " .. counted .. " names")
    table.sort(missing)
    assert.are.same({}, missing)
  end)
end)

-- The settings tables of docs/cli.md (flags), docs/config.md (keys) and docs/recipes.md (fields) give each setting's
-- values and default as the settings table (core/settings.c, fp8.settings.list()) has them (audit 10d, stop 94: the
-- three pages were written by hand and checked for the names only, settings_spec).
describe("the settings tables of docs/cli.md, docs/config.md and docs/recipes.md", function()
  local U = dofile("tests/spec/helpers/util.lua")
  local BIG = 1000000000   -- a bound of "no limit" (core/settings.c): written "≥ min"
  -- the cells of the table row whose first cell begins with `key` (in backticks), or nil
  local function row(text, key)
    for line in text:gmatch("[^\n]+") do
      if line:sub(1, 3 + #key) == "| `" .. key and line:sub(4 + #key, 4 + #key):match("[` ]") then
        local cells = {}
        for c in line:sub(2):gmatch("([^|]*)|") do cells[#cells + 1] = c end
        return cells
      end
    end
  end
  local function norm(s) return (s:gsub("[`\"'%[%]{}%s]", "")) end
  local function word(cell, w) return cell:find("%f[%w_]" .. w:gsub("%p", "%%%0") .. "%f[^%w_]") ~= nil end
  local function check(where, r, values, default)
    local bad = {}
    if r.type == "choice" then
      for _, c in ipairs(r.choices) do if not word(values, c) then bad[#bad + 1] = "choice " .. c end end
    elseif r.type == "int" then
      local range = r.max >= BIG and ("≥ " .. r.min) or (r.min .. ".." .. r.max)
      if not values:find(range, 1, true) then bad[#bad + 1] = "range " .. range end
    elseif r.type == "bool" then
      if not word(values, "boolean") then bad[#bad + 1] = "boolean" end
    end
    local d = r.default
    local want = type(d) == "table" and table.concat((function()
      local o = {}
      for i, v in ipairs(d) do o[i] = tostring(v) end
      return o
    end)(), ",") or tostring(d)
    -- the default cell: the value alone, or "... else <value>" where a config file or another setting comes first
    local cell = norm(default)
    if cell ~= want and not (norm(default:match("else ([^(]*)") or "") == want) then
      bad[#bad + 1] = ("default %s, the page %q"):format(want, default)
    end
    return #bad == 0 and {} or { where .. " " .. r.name .. ": " .. table.concat(bad, "; ") }
  end

  it("agree with fp8.settings.list()", function()
    local cli, cfg, rec = U.must_read("docs/cli.md"), U.must_read("docs/config.md"), U.must_read("docs/recipes.md")
    local bad, counted = {}, 0
    local function add(list) for _, b in ipairs(list) do bad[#bad + 1] = b end end
    for _, r in ipairs(fp8.settings.list()) do
      if not r.unsupported then
        if r.flag then
          local c = row(cli, "--" .. r.flag)
          if c then counted = counted + 1; add(check("docs/cli.md", r, c[2], c[3]))
          else bad[#bad + 1] = "docs/cli.md: no row for --" .. r.flag end
        end
        if r.file then
          local key = (r.block and r.block .. "." or "") .. r.name
          local c = row(cfg, key)
          if c then counted = counted + 1; add(check("docs/config.md", r, c[3], c[4]))
          else bad[#bad + 1] = "docs/config.md: no row for " .. key end
        end
        if r.backends or r.backend then
          local c = row(rec, r.name)
          if c then counted = counted + 1; add(check("docs/recipes.md", r, c[3], c[2]))
          elseif r.type ~= "function" then bad[#bad + 1] = "docs/recipes.md: no row for " .. r.name end
        end
      end
    end
    assert.is_true(counted >= 30, "checked only " .. counted .. " rows")
    assert.are.same({}, bad)
  end)
end)

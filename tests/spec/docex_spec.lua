-- Found on 2026-12-07 (stop 99): every example of the docs and help() run as written, and what the text says it shows
-- compared with what it does. docs_coverage_spec runs the pages' ```lua blocks (that they run) and names; this spec
-- checks the results they show: the prompt transcripts (their printed lines and the values their comments claim), the
-- `call` → value claims of the prose, the config file errors docs/config.md lists, help()'s signatures against the
-- Lua functions' parameters and the C bindings' own counts, and the refusal of an argument past its parameters that
-- docs/lua-api.md promises for every function and method (Lua functions, C functions, the classes' Lua methods).
-- docs/robustness.md, "The docs' examples run as written (stop 99)".
local U = dofile("tests/spec/helpers/util.lua")
local q = U.q
local cwd = U.sh("pwd -P"):gsub("\n$", "")
local function abs(p) return p:sub(1, 1) == "/" and p or cwd .. "/" .. p end
local BIN = abs(FP8LAB_BIN or "build/fp8lab")
local lua_dir = os.getenv("FP8LAB_LUA_DIR")
local ENV = lua_dir and lua_dir ~= "" and ("FP8LAB_LUA_DIR=" .. q(abs(lua_dir)) .. " ") or ""

-- Runs `args` of fp8lab in a fresh directory holding `files` ({name = text}); returns the output (stdout and stderr)
-- and whether it exited 0.
local function run(args, files)
  local dir = U.tmpdir()
  for name, text in pairs(files or {}) do U.write(dir .. "/" .. name, text) end
  local out, ok = U.sh(("cd %s && %s%s %s"):format(q(dir), ENV, q(BIN), args))
  os.execute("rm -rf " .. q(dir))
  return out, ok
end

local PAGES = { "README.md", "docs/architecture.md", "docs/checkpoints.md", "docs/cli.md", "docs/concepts.md",
                "docs/config.md", "docs/cuda.md", "docs/distributed.md", "docs/fp8-spec.md", "docs/lua-api.md",
                "docs/recipes.md" }

-- ---- the prompt transcripts ----------------------------------------------------------------------------------------
-- A fenced block with lines typed at the prompt (`fp8> `). In a ```lua block a line without the prompt continues the
-- statement above (as docs_coverage_spec reads it); in any other block it is what the prompt printed, a trailing
-- "   -- note" not part of it. A `$ ` line is the shell's.
local function transcripts()
  local found = {}
  for _, path in ipairs(PAGES) do
    local text = U.must_read(path)
    for pos, lang, code in text:gmatch("()```(%w*)\n(.-)```") do
      if code:find("^fp8> ") or code:find("\nfp8> ") then
        local _, line = text:sub(1, pos):gsub("\n", "")
        local b = { where = ("%s:%d"):format(path, line + 1), typed = {}, shown = {}, notes = {} }
        for l in code:gmatch("([^\n]*)\n") do
          if l:find("^fp8> ") then
            local typed = l:sub(6)
            local note = typed:match("^.-%s+%-%-%s+(.*)$")
            b.typed[#b.typed + 1] = typed
            if note then b.notes[#b.notes + 1] = note end
          elseif l:find("^%$ ") then   -- the shell's command line
          elseif lang == "lua" then
            b.typed[#b.typed + 1] = l
          else
            b.shown[#b.shown + 1] = (l:gsub("%s+%-%-%s.*$", ""))
          end
        end
        found[#found + 1] = b
      end
    end
  end
  return found
end

-- What a transcript's notes (its `-- ...` comments) claim, each checked against the output of its block: keyed by the
-- note, which must still be on a page. A note that claims nothing the output could refute is in EXPLAINS, with why.
-- the summary lines fp8.hist printed for format fmt, in order
local function pct(out, fmt)
  local lines = {}
  for l in out:gmatch("fp8%.hist " .. fmt .. ": [^\n]*") do lines[#lines + 1] = l end
  return lines
end
local CLAIMS = {
  -- 709 of 1024: the output line the README shows; concepts.md's block shows no output
  ["without a scale most of the 1024 vanish"] = function(out)
    return tonumber(out:match("^[^\n]*\n[^\n]*\n[^\n]*\n(%d+)\n")) > 512   -- the fourth line printed
  end,
  ["most values vanish without scaling"] = function(out) return tonumber(out:match("^(%d+)\n")) > 512 end,
  ["worst error now ~ amax/32"] = function(out)
    -- amax of randn{4, 256} * 1e-3 at seed 0 is 0.00352; E4M3's relative step at the top binade is 1/16, half: 1/32
    local err = tonumber(out:match("tensor%(([%d.e%-]+), dtype=fp32, shape=%[%]"))
    return err ~= nil and err <= 0.00352057 / 32 * 1.2 and err >= 0.00352057 / 32 / 1.2
  end,
  ["all below 2^-6, the smallest normal: 2/3 underflow, 1/3 subnormal"] = function(out)
    local l = pct(out, "e4m3")[1]
    local u, s = l:match("underflow ([%d.]+)%%, subnormal ([%d.]+)%%")
    return math.abs(u - 66.7) < 2 and math.abs(s - 33.3) < 2 and out:find("%[2%^%-6") == nil
  end,
  ["scaled: the values spread over the binades below 448"] = function(out)
    local l = pct(out, "e4m3")[2]
    return l:find("underflow 0.00%, subnormal 0.00%, saturated 0.00%, binades 2^-4..2^8", 1, true) ~= nil
  end,
  ["E5M2 reaches 2^-16 and keeps most of them unscaled"] = function(out)
    local u = tonumber(pct(out, "e5m2")[1]:match("underflow ([%d.]+)%%"))
    return u < 1
  end,
  ["unscaled: binades 2^-14..2^-6, 0.96% subnormal, 0.12% underflow"] = function(out)
    return pct(out, "e5m2")[1]:find("underflow 0.12%, subnormal 0.96%, saturated 0.00%, binades 2^-14..2^-6", 1,
      true) ~= nil
  end,
  ["scaled to its amax: nothing lost at the bottom"] = function(out)
    return pct(out, "e5m2")[2]:find("underflow 0.00%, subnormal 0.00%", 1, true) ~= nil
  end,
  ["[0, 3.0518e-05, 9.7656e-04]: 1e-6 is under E5M2's smallest subnormal (2^-16) and is lost"] = function(out)
    return out:find("tensor([0.0000e+00, 3.0518e-05, 9.7656e-04]", 1, true) ~= nil
  end,
}
local EXPLAINS = {
  ["464 is a tie between 448 and 480: ties go to even"] = "the output shown (126) is compared",
  ["IEEE policy: E4M3 has no inf, overflow is NaN"] = "the output shown (127, E4M3's NaN) is compared",
  ["small activations"] = "names the input",
  ["scale = 448 / amax: the whole range is used"] = "the rule; the next line's error is checked",
  ["scale = 448 / amax"] = "the rule; the error line is checked in README's copy",
  ["bits, neighbours, rounding error"] = "the output shown is compared",
}

describe("the prompt transcripts of README.md and docs/*.md", function()
  local blocks = transcripts()

  it("are found, and every note is checked or explained", function()
    assert.is_true(#blocks >= 5, "found only " .. #blocks)
    local notes, bad = {}, {}
    for _, b in ipairs(blocks) do
      for _, n in ipairs(b.notes) do
        notes[n] = true
        if not CLAIMS[n] and not EXPLAINS[n] then bad[#bad + 1] = b.where .. ": -- " .. n end
      end
    end
    for n in pairs(CLAIMS) do if not notes[n] then bad[#bad + 1] = "CLAIMS names a note no page has: " .. n end end
    for n in pairs(EXPLAINS) do if not notes[n] then bad[#bad + 1] = "EXPLAINS names a note no page has: " .. n end end
    table.sort(bad)
    assert.are.same({}, bad)
  end)

  for _, b in ipairs(blocks) do
    it("print what they show: " .. b.where, function()
      local out, ok = run("-i < in.txt", { ["in.txt"] = table.concat(b.typed, "\n") .. "\n" })
      assert.is_true(ok, b.where .. ":\n" .. out)
      assert.is_nil(out:find("fp8lab: ", 1, true) or out:find("stdin:%d+:"), b.where .. ":\n" .. out)
      if #b.shown > 0 then assert.are.equal(table.concat(b.shown, "\n") .. "\n", out) end
      for _, n in ipairs(b.notes) do
        if CLAIMS[n] then assert.is_true(CLAIMS[n](out), b.where .. ": -- " .. n .. "\n" .. out) end
      end
    end)
  end
end)

-- ---- `call` → value in the prose ---------------------------------------------------------------------------------
describe("a `call` → value of the pages' prose", function()
  it("gives that value", function()
    local counted, bad = 0, {}
    for _, path in ipairs(PAGES) do
      local text = U.must_read(path):gsub("```.-```", "")
      for call, want in text:gmatch("`(fp8%.[%w_.]+%b())`%s*→%s*([%-%w.]+)") do
        counted = counted + 1
        local got = tostring(assert(load("return " .. call))())
        if got ~= want then bad[#bad + 1] = ("%s: %s is %s, the page says %s"):format(path, call, got, want) end
      end
    end
    assert.is_true(counted >= 2, "found only " .. counted)
    assert.are.same({}, bad)
  end)
end)

-- ---- docs/config.md's error messages -------------------------------------------------------------------------------
-- Each line of the page's two message blocks, made by the file here (`...` in a message is the page's elision).
local CONFIG_CASES = {
  ["ds.yaml:4:3: deepspeed_config: a mapping of 5 keys is not supported: DeepSpeed is not part of fp8lab (leave it "
    .. "out, null or {})"] = "mixed_precision: fp8\nnum_processes: 1\ndeepspeed_config:\n"
    .. "  a: 1\n  b: 2\n  c: 3\n  d: 4\n  e: 5\n",
  ["cfg.yaml:3:3: unknown key 'amax_histroy_len' in fp8_config (did you mean 'amax_history_len'?)"] =
    "mixed_precision: fp8\nfp8_config:\n  amax_histroy_len: 16\n",
  ["cfg.yaml:2:11: fp8_config.margin: expected an integer in 0..64, got \"abc\""] = "fp8_config:\n  margin: abc\n",
  ["cfg.yaml:4:15: fp8_config.fp8_format: E5M2 alone is not a training format (...): expected one of HYBRID, E4M3, "
    .. "got \"E5M2\""] = "mixed_precision: fp8\nfp8_config:\n  backend: te\n  fp8_format: E5M2\n",
  ["cfg.yaml:2:1: key 'margin' belongs inside the fp8_config: block"] = "mixed_precision: fp8\nmargin: 2\n",
  ["cfg.yaml:3:1: duplicate key 'mixed_precision' (first given on line 1)"] =
    "mixed_precision: fp8\nnum_processes: 1\nmixed_precision: no\n",
  ["cfg.yaml:1:7: aliases/anchors are not supported in fp8lab config files (anchor &b)"] = "seed: &b 1\n",
  ["cfg.yaml:3:1: a second YAML document ('---'): a config file holds one"] = "mixed_precision: fp8\nnum_processes: 1\n"
    .. "---\n",
  ["cfg.yaml:1:1: not a YAML text file (binary data?): control characters are not allowed (byte 0x7F)"] = "\127\n",
}
describe("docs/config.md's error messages", function()
  local page = U.must_read("docs/config.md")
  local lines = {}
  for lang, code in page:gmatch("```(%w*)\n(.-)```") do
    for l in code:gmatch("([^\n]+)") do
      if lang == "" and l:match("^%w+%.yaml:%d+:%d+: ") then lines[#lines + 1] = l end
    end
  end

  it("each have a case here, and each case is on the page", function()
    assert.is_true(#lines >= 9, "found only " .. #lines)
    local on_page, bad = {}, {}
    for _, l in ipairs(lines) do
      on_page[l] = true
      if not CONFIG_CASES[l] then bad[#bad + 1] = "no case for: " .. l end
    end
    for l in pairs(CONFIG_CASES) do if not on_page[l] then bad[#bad + 1] = "no such line on the page: " .. l end end
    assert.are.same({}, bad)
  end)

  for _, l in ipairs(lines) do
    if CONFIG_CASES[l] then
      it("are what fp8lab config --check says: " .. l:sub(1, 60), function()
        local file = l:match("^([%w]+%.yaml)")
        local out, ok = run("config --check --config_file " .. file, { [file] = CONFIG_CASES[l] })
        assert.is_false(ok)
        local pattern = "^fp8lab config: " .. l:gsub("%p", "%%%0"):gsub("%%%(%%%.%%%.%%%.%%%)", "%%(.-%%)") .. "\n$"
        assert.truthy(out:match(pattern), "the page: " .. l .. "\nfp8lab:   " .. out)
      end)
    end
  end
end)

-- ---- help()'s signatures and the functions' parameters -------------------------------------------------------------
-- The public functions of fp8 and its modules written in Lua with a fixed parameter list (the others are C bindings,
-- which check their arguments' count themselves, or take `...`).
local function lua_functions()
  local _ = fp8.nn, fp8.optim, fp8.recipes, fp8.profiler, fp8.plot, fp8.autograd, fp8.hist, fp8.stats,
    fp8.convert_model, fp8.has_fp8_layers
  local O = require "fp8.opts"
  local found, seen = {}, {}
  local function walk(prefix, t, depth)
    if seen[t] or depth > 2 then return end
    seen[t] = true
    for k, v in pairs(t) do
      if type(k) == "string" and not k:match("^_") then
        if type(v) == "function" and O.arity(v) then
          found[#found + 1] = { name = prefix .. k, f = v, arity = O.arity(v) }
        elseif type(v) == "table" and k:match("^%l") then
          walk(prefix .. k .. ".", v, depth + 1)
        end
      end
    end
  end
  walk("fp8.", fp8, 0)
  table.sort(found, function(a, b) return a.name < b.name end)
  return found
end

-- The most arguments a signature's argument text shows ("x, fmt [, {saturate=true}]" 3; nil for "..." or "|").
local function shown_args(s)
  s = s:gsub("%b{}", "T"):gsub("%b()", "P"):gsub('%b""', "S"):gsub("[%[%]]", "")
  if s:match("^%s*$") then return 0 end
  if s:find("...", 1, true) or s:find("|", 1, true) then return nil end
  local _, commas = s:gsub(",", "")
  return commas + 1
end

describe("help()'s signatures", function()
  it("show as many arguments as the Lua functions they name take", function()
    local H = require "fp8.help"
    local O = require "fp8.opts"
    local _ = lua_functions()
    local counted, bad = 0, {}
    for _, e in pairs(H.entries) do
      local prefix
      for alt in ((e.sig or "") .. " / "):gmatch("(.-)%s+/%s+") do
        local full, args = alt:match("^%s*([%w_.]+)(%b())")
        if full then
          if full:find(".", 1, true) then prefix = full:match("^(.*%.)") else full = (prefix or "") .. full end
          local f = full:match("^fp8%.") and fp8
          for part in full:sub(5):gmatch("[^.]+") do f = type(f) == "table" and rawget(f, part) or nil end
          local a, n = type(f) == "function" and O.arity(f), shown_args(args:sub(2, -2))
          if a and n then
            counted = counted + 1
            if a.n ~= n then
              bad[#bad + 1] = ("%s: help shows %d arguments (%s), it takes %s"):format(full, n, alt, a.takes)
            end
          end
        end
      end
    end
    assert.is_true(counted >= 10, "checked only " .. counted)
    table.sort(bad)
    assert.are.same({}, bad)
  end)

  it("and a Lua function of fp8 or its modules refuses an argument past its parameters, as lua-api.md says", function()
    local fns = lua_functions()
    assert.is_true(#fns >= 25, "found only " .. #fns)
    local bad = {}
    for _, fn in ipairs(fns) do
      local args = {}
      for i = 1, fn.arity.n + 1 do args[i] = false end
      local ok, err = pcall(fn.f, table.unpack(args, 1, fn.arity.n + 1))
      if ok or not tostring(err):find(": takes " .. fn.arity.takes .. "; got 1 more argument", 1, true) then
        bad[#bad + 1] = fn.name .. (ok and " took it" or ": " .. tostring(err):sub(1, 100))
      end
    end
    assert.are.same({}, bad)
  end)
end)

-- The C functions of fp8 and its modules (fp8.config.sys is fp8.sys, the launcher's helpers, documented in
-- docs/config.md): with twelve arguments each either refuses them or names what it takes ("takes (k [, dim=-1 ...]);
-- got 8 more arguments", fl_lmaxargs); none of them runs (ten that take nothing ran, the extras dropped).
local function c_functions()
  local _ = fp8.nn, fp8.optim, fp8.recipes, fp8.profiler, fp8.plot, fp8.autograd, fp8.hist, fp8.stats
  local found, seen = {}, {}
  local function walk(prefix, t, depth)
    if seen[t] or depth > 2 then return end
    seen[t] = true
    for k, v in pairs(t) do
      if type(k) == "string" and not k:match("^_") then
        if type(v) == "function" and debug.getinfo(v, "S").what == "C" then found[#found + 1] = { prefix .. k, v }
        elseif type(v) == "table" and k:match("^%l") then walk(prefix .. k .. ".", v, depth + 1) end
      end
    end
  end
  walk("fp8.", fp8, 0)
  table.sort(found, function(a, b) return a[1] < b[1] end)
  return found
end
local TWELVE = { false, false, false, false, false, false, false, false, false, false, false, false }
-- what a C function takes, by its own message for twelve arguments: the count, or nil where another check comes first
local function c_takes(f, self)
  local ok, err
  if self ~= nil then ok, err = pcall(f, self, table.unpack(TWELVE)) else ok, err = pcall(f, table.unpack(TWELVE)) end
  local more = not ok and tostring(err):match("takes .-; got (%d+) more argument")
  return more and #TWELVE - tonumber(more) or nil, ok
end

describe("the C functions", function()
  it("of fp8 and its modules refuse arguments past theirs (none runs with twelve)", function()
    local fns = c_functions()
    assert.is_true(#fns >= 60, "found only " .. #fns)
    local ran = {}
    for _, fn in ipairs(fns) do
      local _, ok = c_takes(fn[2])
      if ok then ran[#ran + 1] = fn[1] end
    end
    assert.are.same({}, ran)
  end)

  it("take as many arguments as help() shows (their own message says what they take)", function()
    local H = require "fp8.help"
    local x = fp8.ones { 2, 2 }
    local counted, bad = 0, {}
    for _, e in pairs(H.entries) do
      local prefix
      for alt in ((e.sig or "") .. " / "):gmatch("(.-)%s+/%s+") do
        local full, args = alt:match("^%s*([%w_.:]+)(%b())")
        if full then
          if full:find("[.:]") then prefix = full:match("^(.*[.:])") else full = (prefix or "") .. full end
          local f, self
          if full:match("^fp8%.") and not full:find(":", 1, true) then
            f = fp8
            for part in full:sub(5):gmatch("[^.]+") do f = type(f) == "table" and rawget(f, part) or nil end
          elseif full:match("^[%a_]+:") and e.name:match("^Tensor") then
            f, self = fp8.Tensor[full:match(":(.*)")], x
          end
          local n = shown_args(args:sub(2, -2))
          if type(f) == "function" and debug.getinfo(f, "S").what == "C" and n then
            local real = c_takes(f, self)
            if real then
              counted = counted + 1
              if real ~= n then
                bad[#bad + 1] = ("%s: help shows %d arguments (%s), it takes %d"):format(full, n, alt, real)
              end
            end
          end
        end
      end
    end
    assert.is_true(counted >= 30, "checked only " .. counted)
    table.sort(bad)
    assert.are.same({}, bad)
  end)
end)

-- The classes' methods written in Lua: strict_arity wraps most (a vararg wrapper); one with a fixed parameter list
-- drops an argument past them unless it is one of these, each with the reason.
local FIXED_OK = {
  forward = "Module's __call checks a forward's arguments and names the layer's place (lua/fp8/nn/module.lua)",
  extra_repr = "torch's repr hook, called by tostring with the module alone",
  ["LocalSGD:close"] = "its parameter is the error a <close> passes (Python's __exit__)",
}
describe("the classes' methods written in Lua", function()
  it("refuse an argument past their parameters (help shows what each takes)", function()
    local _ = fp8.nn, fp8.optim, fp8.recipes, fp8.profiler, fp8.plot, fp8.autograd, fp8.hist, fp8.stats,
      fp8.Accelerator, fp8.GradientAccumulationPlugin, fp8.LocalSGD
    local found, seen, counted = {}, {}, 0
    local function scan(label, t, depth)
      if type(t) ~= "table" or seen[t] or depth > 4 then return end
      seen[t] = true
      for k, v in pairs(t) do
        if type(k) == "string" and not k:match("^_") then
          if type(v) == "function" then
            local info = debug.getinfo(v, "Su")
            if info.what == "Lua" and info.nparams >= 1 and debug.getlocal(v, 1) == "self" then
              counted = counted + 1
              local class = label:match("([%w_]+)$")
              if not info.isvararg and not FIXED_OK[k] and not FIXED_OK[class .. ":" .. k] then
                found[#found + 1] = ("%s:%s (%s:%d)"):format(label, k, info.short_src, info.linedefined)
              end
            end
          elseif type(v) == "table" then scan(label .. "." .. k, v, depth + 1) end
        end
      end
      local mt = getmetatable(t)
      local idx = type(mt) == "table" and rawget(mt, "__index")
      if type(idx) == "table" then scan(label, idx, depth + 1) end
    end
    scan("fp8", fp8, 0)
    -- the classes help() answers objects of (a SummaryWriter, a kwargs handler, ...), whose tables fp8 does not hold
    local _ = fp8.profiler.profile {}
    for _, c in ipairs(require("fp8.help").CLASSES) do
      if c.class then scan(c.prefix, c.class, 0) end
    end
    scan("RemovableHandle", getmetatable(fp8.nn.Linear(2, 2):register_forward_hook(function() end)), 0)
    assert.is_true(counted >= 150, "walked only " .. counted .. " methods")
    table.sort(found)
    assert.are.same({}, found)
  end)
end)

-- ---- the functions whose help was wrong ----------------------------------------------------------------------------
describe("what help() showed of", function()
  it("fp8.kwargs.repr(v): a second argument is refused (depth was repr's own: 'x' an arithmetic error, 5 '{...}')",
     function()
    assert.are.equal("{1, {2}}", fp8.kwargs.repr({ 1, { 2 } }))
    U.fails_with("kwargs.repr: takes (v); got 1 more argument", fp8.kwargs.repr, { 1, { 2 } }, 5)
    U.fails_with("kwargs.repr: takes (v); got 1 more argument", fp8.kwargs.repr, { 1 }, "x")
  end)

  it("fp8.nn.Parameter(t [, requires_grad=true]) takes torch's flag (false was dropped: the tensor required grad)",
     function()
    -- torch 2.15: torch.nn.Parameter(torch.ones(2), requires_grad=False).requires_grad is False, and 1 is a TypeError
    local p = fp8.nn.Parameter(fp8.ones { 2 }, false)
    assert.is_false(p:requires_grad())
    assert.is_true(fp8.nn.Parameter(fp8.ones { 2 }):requires_grad())
    assert.is_true(fp8.nn.Parameter(fp8.ones { 2 }, true):requires_grad())
    U.fails_with("Parameter: requires_grad must be a boolean, got 1", fp8.nn.Parameter, fp8.ones { 2 }, 1)
  end)

  it("FP8Linear.as_recipe(r [, level]) refuses a level that is not one", function()
    assert.are.equal("te", fp8.nn.FP8Linear.as_recipe(fp8.TERecipeKwargs {}, 2).backend)
    U.fails_with("as_recipe: level must be an integer >= 1", fp8.nn.FP8Linear.as_recipe, fp8.TERecipeKwargs {}, "x")
    U.fails_with("as_recipe: level must be an integer >= 1", fp8.nn.FP8Linear.as_recipe, fp8.TERecipeKwargs {}, 0)
  end)
end)

-- config_spec.lua — fp8.config: every bad file in tests/data/config/bad gives its expected message
-- (with file:line:column), Accelerate's own files and our aliases load, write() round-trips
-- atomically, and the helpers the CLI builds on (check, suggest, keys, default paths) behave.
local config = require "fp8.config"

local HERE = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local DATA = HERE .. "/../data/config"

local U = dofile("tests/spec/helpers/util.lua")
local q = U.q

local function list(dir)
  local p = assert(io.popen("ls " .. q(dir)))
  local t = {}
  for name in p:lines() do t[#t + 1] = name end
  p:close()
  return t
end

local tmpdir = U.tmpdir
local slurp = U.read
local spit = U.write

-- file → a fragment of the message it must give (position included where it says something).
local BAD = {
  ["typo_top.yaml"] = "typo_top.yaml:1:1: unknown key 'mixed_precison' (did you mean 'mixed_precision'?)",
  -- Accelerate's keys at values fp8lab would not follow
  ["accelerate_deepspeed.yaml"] = "accelerate_deepspeed.yaml:4:3: deepspeed_config: a mapping of 5 keys is not supported: DeepSpeed is not part of fp8lab (leave it out, null or {})",
  ["use_cpu_maybe.yaml"] = 'use_cpu_maybe.yaml:2:10: use_cpu: expected a boolean',
  ["accelerate_num_machines.yaml"] = 'num_machines: "2" is not supported: fp8lab\'s launcher runs on one machine',
  ["accelerate_fsdp.yaml"] = 'distributed_type: "FSDP" is not supported: fp8lab runs num_processes processes over MPI on the CPU; data-parallel training across GPUs is not part of it yet (as launch --multi_gpu says), nor are DeepSpeed, FSDP, Megatron-LM and XLA (accepted: NO, MULTI_CPU)',
  -- (accepted before 2026-12-06: MULTI_GPU ran N CPU processes, or N GPU ones that prepare refused; NO with 2
  -- processes started two, where Accelerate's launcher starts one)
  ["accelerate_multi_gpu.yaml"] = 'accelerate_multi_gpu.yaml:4:19: distributed_type: "MULTI_GPU" is not supported: fp8lab runs num_processes processes over MPI on the CPU',
  ["accelerate_no_two.yaml"] = "accelerate_no_two.yaml:2:19: distributed_type: NO runs one process (Accelerate's launcher ignores num_processes then), but num_processes is 2: write MULTI_CPU for 2 processes, or num_processes: 1",
  ["accelerate_port.yaml"] = 'main_process_port: "29500" is not supported: mpirun picks its own ports',
  ["typo_fp8.yaml"] = "typo_fp8.yaml:3:3: unknown key 'amax_histroy_len' in fp8_config (did you mean 'amax_history_len'?)",
  ["typo_backend_key.yaml"] = "unknown key 'backedn' in fp8_config (did you mean 'backend'?)",
  ["typo_case.yaml"] = "did you mean 'mixed_precision'?",
  ["typo_alias.yaml"] = "did you mean 'optimization_level'?",
  ["unknown_key.yaml"] = "unknown_key.yaml:2:1: unknown key 'learning_rate' (fp8lab reads mixed_precision",
  ["margin_string.yaml"] = 'margin_string.yaml:2:11: fp8_config.margin: expected an integer in 0..64, got "abc"',
  ["margin_quoted_number.yaml"] = 'got "3" (a number in quotes is a string: remove the quotes)',
  ["margin_range.yaml"] = "fp8_config.margin: expected an integer in 0..64, got 65",
  ["fsdp_all_gather.yaml"] = "fp8_config.enable_fsdp_float8_all_gather: not supported: fp8lab has no FSDP",
  ["interval_negative.yaml"] = "fp8_config.interval: expected an integer >= 1, got -1",
  ["interval_float.yaml"] = "fp8_config.interval: expected an integer >= 1, got 1.5",
  ["history_zero.yaml"] = "fp8_config.amax_history_length: expected an integer in 1..1048576, got 0",
  ["format_e5m2.yaml"] = "format_e5m2.yaml:4:15: fp8_config.fp8_format: E5M2 alone is not a training format",
  ["backend_foo.yaml"] = 'fp8_config.backend: expected one of msamp, te, ao, got "foo"',
  ["algo_bad.yaml"] = 'fp8_config.amax_compute_algo: expected one of most_recent, max, got "mean"',
  ["opt_level_bad.yaml"] = 'fp8_config.opt_level: expected one of O1, O2, O3, got "O4"',
  ["bool_quoted.yaml"] = 'got "true" (a boolean in quotes is a string: remove the quotes)',
  ["bool_number.yaml"] = "fp8_config.pad_inner_dim: expected a boolean (true or false), got 1",
  ["override_two.yaml"] = 'expected three booleans for (fprop, dgrad, wgrad), as [false, false, true] or "(false, false, true)", got "(false, true)"',
  ["override_four.yaml"] = 'got "(false, false, true, false)"',
  ["override_list_len.yaml"] = "expected a list of 3 booleans (fprop, dgrad, wgrad), got 2 items",
  ["override_list_item.yaml"] = 'fp8_config.override_linear_precision[2]: expected a boolean (true or false), got "maybe"',
  ["override_true.yaml"] = "override_linear_precision: true is ambiguous",
  ["mixed_precision_bad.yaml"] = 'mixed_precision: expected one of no, fp16, bf16, fp8, got "fp4"',
  ["num_processes_zero.yaml"] = "num_processes: expected an integer in 1..4096, got 0",
  ["num_processes_octal.yaml"] = "num_processes_octal.yaml:2:16: num_processes: expected an integer in 1..4096, got 010 (a leading zero: YAML 1.1 readers such as Accelerate's take it as octal",
  ["num_processes_float_tag.yaml"] = 'num_processes: expected an integer in 1..4096, got !!float "2"',
  ["nesting_margin_top.yaml"] = "nesting_margin_top.yaml:2:1: key 'margin' belongs inside the fp8_config: block",
  ["nesting_mp_inside.yaml"] = "key 'mixed_precision' belongs at the top level, not inside fp8_config",
  ["nesting_accelerate_inside.yaml"] = "key 'distributed_type' belongs at the top level, not inside fp8_config",
  ["fp8_config_list.yaml"] = "fp8_config: expected a mapping of FP8 settings (backend: te, margin: 0, ...), got a list",
  ["fp8_config_scalar.yaml"] = "fp8_config: expected a mapping of FP8 settings (backend: te, margin: 0, ...), got a single value",
  ["backend_mapping.yaml"] = "fp8_config.backend: expected one of msamp, te, ao, got a mapping",
  ["top_list.yaml"] = "top_list.yaml:1:1: expected a mapping of settings (key: value lines) at the top, got a list",
  ["top_scalar.yaml"] = "at the top, got a single value",
  ["not_yaml.yaml"] = "not_yaml.yaml:2:14: not valid YAML: did not find expected ',' or ']'",
  ["tab_indent.yaml"] = "tab_indent.yaml:2:1: not valid YAML: found character that cannot start any token",
  ["multi_doc.yaml"] = "multi_doc.yaml:3:1: a second YAML document ('---'): a config file holds one",
  ["duplicate.yaml"] = "duplicate.yaml:3:1: duplicate key 'mixed_precision' (first given on line 1)",
  ["duplicate_alias.yaml"] = "duplicate key 'amax_history_length': it is another name for 'amax_history_len', given on line 2",
  ["duplicate_block.yaml"] = "duplicate key 'fp8_config' (first given on line 1)",
  ["duplicate_ignored.yaml"] = "duplicate key 'distributed_type' (first given on line 1)",
  ["anchor.yaml"] = "anchor.yaml:1:7: aliases/anchors are not supported in fp8lab config files (anchor &b)",
  ["merge_key.yaml"] = "aliases/anchors are not supported in fp8lab config files (alias *defaults)",
  ["self_alias.yaml"] = "aliases/anchors are not supported in fp8lab config files (anchor &a)",
  ["alias_bomb.yaml"] = "aliases/anchors are not supported in fp8lab config files",
  ["huge_anchor.yaml"] = "aliases/anchors are not supported in fp8lab config files (anchor &big)",
  ["deep_nesting.yaml"] = "deep_nesting.yaml:33:65: nesting deeper than 32 levels",
  ["deep_flow.yaml"] = "nesting deeper than 32 levels",
  ["complex_key.yaml"] = "a key must be a name, got a list",
  ["unknown_tag.yaml"] = 'unsupported YAML tag "tag:yaml.org,2002:binary" on a value',
  ["python_tag.yaml"] = "unsupported YAML tag",
  ["binary_junk.yaml"] = "binary_junk.yaml:1:1: not a YAML text file (binary data?): control characters are not allowed",
  ["nul_bytes.yaml"] = "nul_bytes.yaml:2:1: not a YAML text file (binary data?): control characters are not allowed (byte 0x00)",
  ["bad_utf8.yaml"] = "not a YAML text file (binary data?): invalid trailing UTF-8 octet",
}

describe("fp8.config bad files", function()
  local files = list(DATA .. "/bad")

  it("has at least 30 bad files, each with an expected message", function()
    assert.is_true(#files >= 30, "only " .. #files .. " bad files")
    for _, f in ipairs(files) do assert.is_not_nil(BAD[f], f .. " has no expected message in config_spec.lua") end
    for f in pairs(BAD) do assert.is_not_nil(slurp(DATA .. "/bad/" .. f), f .. " is missing") end
  end)

  for _, f in ipairs(files) do
    it("rejects " .. f, function()
      local path = DATA .. "/bad/" .. f
      local ok, err = pcall(config.load, path)
      assert.is_false(ok, f .. " loaded")
      err = tostring(err)
      assert.truthy(err:find(path, 1, true) == 1, "message does not start with the file: " .. err)
      assert.truthy(err:find(BAD[f] or "?", 1, true), "\nexpected: " .. tostring(BAD[f]) .. "\ngot:      " .. err)
      assert.falsy(err:find("config.c:", 1, true), "core location leaked into the message: " .. err)
    end)
  end

  it("refuses a file over 1 MiB before parsing it", function()
    local p = os.tmpname()
    spit(p, "# " .. ("x"):rep(config.MAX_BYTES) .. "\n")
    local ok, err = pcall(config.load, p)
    os.remove(p)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("file too large for a config file", 1, true), err)
  end)

  it("names a missing file and a directory", function()
    local ok, err = pcall(config.load, "/nonexistent/dir/x.yaml")
    assert.is_false(ok)
    assert.truthy(err:find("/nonexistent/dir/x.yaml: cannot open config file: No such file", 1, true), err)
    local d = tmpdir()
    ok, err = pcall(config.load, d)
    os.execute("rm -rf " .. q(d))
    assert.is_false(ok)
    assert.truthy(err:find("is a directory, not a config file", 1, true), err)
  end)

  it("survives every truncation of a valid file and of each bad file", function()
    -- a cheap in-spec fuzz: every prefix must load or fail with a message, never crash
    for _, f in ipairs { DATA .. "/good/accelerate_te.yaml", DATA .. "/bad/alias_bomb.yaml", DATA .. "/bad/not_yaml.yaml" } do
      local text = slurp(f)
      for n = 0, #text do
        local ok, err = pcall(config.parse, text:sub(1, n), "prefix")
        assert.truthy(ok or (type(err) == "string" and err:find("^prefix")), tostring(err))
      end
    end
  end)
end)

describe("fp8.config good files", function()
  local function load(name) return config.load(DATA .. "/good/" .. name) end

  it("loads Accelerate's TE config (for two CPU processes) unchanged, aliases and string override included", function()
    local t = load("accelerate_te.yaml")
    assert.are.equal("fp8", t.mixed_precision)
    assert.are.equal(2, t.num_processes)
    assert.are.same({ backend = "te", fp8_format = "HYBRID", margin = 0, interval = 1, amax_history_len = 1024,
      amax_compute_algo = "max", override_linear_precision = { false, false, true },
      use_autocast_during_eval = false }, t.fp8_config)
    assert.are.equal(DATA .. "/good/accelerate_te.yaml", t.path)
    assert.are.equal(1, #t.notices)
    local n = t.notices[1]
    assert.truthy(n:find("ignoring settings that only matter to Accelerate (at values that change nothing here):", 1, true), n)
    for _, k in ipairs { "gpu_ids", "machine_rank",
      "downcast_bf16", "rdzv_backend", "same_network", "tpu_env", "main_training_function" } do
      assert.truthy(n:find(k, 1, true), k .. " not in the notice: " .. n)
    end
    assert.falsy(n:find("mixed_precision", 1, true))
    assert.falsy(n:find("use_cpu", 1, true), "use_cpu is a setting of fp8lab's, not ignored: " .. n)
    assert.is_true(t.use_cpu)   -- (Accelerate writes use_cpu: true with MULTI_CPU)
  end)

  it("reads MS-AMP's optimization_level alias and an uppercase backend", function()
    local t = load("accelerate_msamp.yaml")
    assert.are.same({ backend = "msamp", opt_level = "O1" }, t.fp8_config)
  end)

  it("reads Accelerate's `override_linear_precision: false` as no override", function()
    local t = load("accelerate_override_false.yaml")
    assert.are.same({ false, false, false }, t.fp8_config.override_linear_precision)
    assert.are.equal("E4M3", t.fp8_config.fp8_format)
    assert.is_true(t.fp8_config.use_autocast_during_eval)
  end)

  it("takes Accelerate's keys at values that change nothing here (empty blocks, null ports) with one notice", function()
    local t = load("accelerate_empty_blocks.yaml")
    assert.are.equal("bf16", t.mixed_precision)
    assert.are.equal(16, t.num_processes)
    assert.is_nil(t.fp8_config)
    assert.are.equal(1, #t.notices)
    assert.truthy(t.notices[1]:find("(at values that change nothing here)", 1, true))
    for _, k in ipairs { "deepspeed_config", "main_process_port", "dynamo_config", "num_machines" } do
      assert.truthy(t.notices[1]:find(k, 1, true), k)
    end
    assert.is_false(t.use_cpu)   -- `use_cpu: no`
  end)

  it("reads every canonical key, list override and YAML 1.1 booleans", function()
    local t = load("fp8lab_all_keys.yaml")
    assert.are.same({ mixed_precision = "fp8", num_processes = 4, gradient_accumulation_steps = 8, use_cpu = true,
      notices = {}, path = DATA .. "/good/fp8lab_all_keys.yaml",
      fp8_config = { backend = "te", fp8_format = "E4M3", margin = 2, interval = 5, amax_history_len = 16,
        amax_compute_algo = "most_recent", override_linear_precision = { true, false, true },
        use_autocast_during_eval = true, opt_level = "O3", pad_inner_dim = false } }, t)
  end)

  it("reads the Python-tuple string form in any case", function()
    local t = load("override_string_python.yaml")
    assert.are.same({ false, true, false }, t.fp8_config.override_linear_precision)
    assert.are.equal("fp8", t.mixed_precision)
  end)

  it("reads flow style", function()
    local t = load("flow_style.yaml")
    assert.are.same({ backend = "ao", pad_inner_dim = false }, t.fp8_config)
  end)

  it("reads a bare `no` as mixed_precision no", function()
    assert.are.equal("no", load("bare_no.yaml").mixed_precision)
  end)

  it("treats null values and num_processes: -1 as not set", function()
    local t = load("nulls.yaml")
    assert.is_nil(t.mixed_precision)
    assert.is_nil(t.num_processes)
    assert.are.same({ backend = "ao" }, t.fp8_config)
  end)

  it("reads an empty file, comments only, or an empty document as no settings", function()
    for _, f in ipairs { "empty.yaml", "comments_only.yaml", "empty_document.yaml" } do
      local t = load(f)
      assert.are.same({ notices = {}, path = DATA .. "/good/" .. f }, t)
    end
  end)
end)

describe("fp8.config.write", function()
  it("round-trips every key through a file", function()
    local d = tmpdir()
    local p = d .. "/sub/dir/c.yaml"   -- parents are created
    local orig = config.load(DATA .. "/good/fp8lab_all_keys.yaml")
    assert.are.equal(p, config.write(p, orig))
    local back = config.load(p)
    back.path, orig.path = nil, nil
    assert.are.same(orig, back)
    local text = slurp(p)
    assert.truthy(text:find("mixed_precision: 'fp8'\n", 1, true), text)
    assert.truthy(text:find("  override_linear_precision: [true, false, true]\n", 1, true), text)
    assert.are.same({ "c.yaml" }, list(d .. "/sub/dir"))   -- no temporary file left behind
    os.execute("rm -rf " .. q(d))
  end)

  it("quotes 'no' so YAML 1.1 readers do not see a boolean", function()
    local p = os.tmpname()
    config.write(p, { mixed_precision = "no" })
    assert.truthy(slurp(p):find("mixed_precision: 'no'", 1, true))
    assert.are.equal("no", config.load(p).mixed_precision)
    os.remove(p)
  end)

  it("validates before writing and leaves the old file alone on error", function()
    local p = os.tmpname()
    spit(p, "mixed_precision: bf16\n")
    for _, case in ipairs {
      { { fp8_config = { margin = "abc" } }, 'write: fp8_config.margin: expected an integer in 0..64, got "abc"' },
      { { fp8_config = { fp8_format = "E5M2" } }, "E5M2 alone is not a training format" },
      { { mixed_precison = "fp8" }, "write: unknown key 'mixed_precison' (did you mean 'mixed_precision'?)" },
      { { margin = 1 }, "write: key 'margin' belongs inside fp8_config" },
      { { fp8_config = { override_linear_precision = { true } } }, "expected three booleans" },
      { { num_processes = 1.5 }, "num_processes: expected an integer" },
      -- an option under both its names (one was written unseen), and a block that is not a table (the message
      -- was luaL's "bad argument #-1")
      { { fp8_config = { optimization_level = "O1", opt_level = "O3" } },
        "write: fp8_config: 'opt_level' and 'optimization_level' name the same option; give one" },
      { { fp8_config = 1 }, "write: fp8_config: expected a table of FP8 settings, got number" },
    } do
      local ok, err = pcall(config.write, p, case[1])
      assert.is_false(ok)
      assert.truthy(tostring(err):find(case[2], 1, true), err)
    end
    assert.are.equal("mixed_precision: bf16\n", slurp(p))
    -- arguments past the last are refused, as everywhere else (they were dropped)
    U.fails_with("config.write: takes (path, settings); got 1 more argument", config.write, p, {}, 3)
    U.fails_with("config.parse: takes (text [, name]); got 1 more argument", config.parse, "a: 1", "n", 3)
    assert.are.equal("mixed_precision: bf16\n", slurp(p))
    os.remove(p)
  end)

  it("accepts aliases and string values as a loaded file would", function()
    local p = os.tmpname()
    config.write(p, { fp8_config = { backend = "TE", amax_history_length = 8, override_linear_precision = "(true, true, false)" } })
    assert.are.same({ backend = "te", amax_history_len = 8, override_linear_precision = { true, true, false } },
      config.load(p).fp8_config)
    os.remove(p)
  end)

  it("reports an unwritable place", function()
    local ok, err = pcall(config.write, "/proc/fp8lab-no/x.yaml", {})
    assert.is_false(ok)
    assert.truthy(tostring(err):find("cannot create", 1, true), err)
  end)
end)

describe("fp8.config helpers", function()
  it("check() validates flag values with the file's rules, looser booleans", function()
    assert.are.equal("te", config.check("backend", "TE"))
    assert.are.equal(3, config.check("margin", "3"))
    assert.is_true(config.check("pad_inner_dim", "1"))
    assert.is_false(config.check("use_autocast_during_eval", "No"))
    assert.are.same({ false, false, true }, config.check("override_linear_precision", "false,false,true"))
    assert.are.same({ true, false, false }, config.check("override_linear_precision", "(True, False, False)"))
    assert.are.equal("O1", config.check("optimization_level", "o1"))
    local ok, err = pcall(config.check, "margin", "abc", "--fp8_margin")
    assert.is_false(ok)
    assert.are.equal('--fp8_margin: expected an integer in 0..64, got "abc"', err)
    ok, err = pcall(config.check, "amax_history_len", "99999999999999")
    assert.is_false(ok)
    assert.truthy(err:find("expected an integer in 1..", 1, true), err)
  end)

  it("check() takes a key as the table names it, and its messages name check", function()
    -- docs/config.md's table and the loader's messages write fp8_config.margin: the same name is taken here
    assert.are.equal(2, config.check("fp8_config.margin", "2"))
    assert.are.equal(3, config.check("fp8_config.amax_history_length", "3"))   -- the alias, in its block
    local ok, err = pcall(config.check, "fp8_config.mixed_precision", "fp8")
    assert.is_false(ok)
    assert.are.equal("config.check: 'fp8_config.mixed_precision' is not a key of the fp8_config block: "
      .. "give 'mixed_precision'", err)
    ok, err = pcall(config.check, "fp8_config.margn", "2")
    assert.is_false(ok)
    assert.are.equal("config.check: unknown setting 'fp8_config.margn' (did you mean 'margin'?)", err)
    ok, err = pcall(config.check, "learning_rate", "2")
    assert.are.equal("config.check: unknown setting 'learning_rate': it takes a name or alias that "
      .. "fp8.config.keys() lists, e.g. 'margin'", err)
  end)

  it("suggest() finds typos and declines far-off words", function()
    assert.are.equal("fp8_margin", config.suggest("fp8_marign", { "fp8_margin", "fp8_format" }))
    assert.are.equal("num_processes", config.suggest("num_process", { "num_processes", "mixed_precision" }))
    assert.is_nil(config.suggest("learning_rate", { "num_processes", "mixed_precision" }))
    assert.is_nil(config.suggest("", { "a" }))
  end)

  it("keys() describes every setting with its flag and variable", function()
    local keys = config.keys()
    assert.are.equal(17, #keys)   -- every row of the settings table (the self-test row hidden)
    local by = {}
    for _, k in ipairs(keys) do by[k.name] = k end
    assert.are.same({ "msamp", "te", "ao" }, by.backend.choices)
    assert.are.equal("msamp", by.backend.default)
    assert.are.equal("FP8LAB_FP8_FORMAT", by.fp8_format.env)
    assert.are.equal("fp8_format", by.fp8_format.flag)
    assert.are.equal("amax_history_length", by.amax_history_len.alias)
    assert.are.same({ "te" }, by.margin.backends)
    assert.are.same({ "msamp" }, by.opt_level.backends)
    assert.are.same({ false, false, false }, by.override_linear_precision.default)
    assert.is_nil(by.num_processes.block)
    assert.are.equal("fp8_config", by.margin.block)
  end)

  it("default_path() follows XDG_CACHE_HOME, else HOME", function()
    local sys = config.sys
    local old_x, old_h = os.getenv("XDG_CACHE_HOME"), os.getenv("HOME")
    sys.setenv("XDG_CACHE_HOME", "/x/cache")
    assert.are.equal("/x/cache/fp8lab/default_config.yaml", config.default_path())
    sys.setenv("XDG_CACHE_HOME", nil)
    sys.setenv("HOME", "/home/u")
    assert.are.equal("/home/u/.cache/fp8lab/default_config.yaml", config.default_path())
    sys.setenv("XDG_CACHE_HOME", old_x)
    sys.setenv("HOME", old_h)
  end)

  it("load_default() reads FP8LAB_CONFIG_FILE, else the default file if present, else nil", function()
    local sys = config.sys
    local old_x, old_f = os.getenv("XDG_CACHE_HOME"), os.getenv("FP8LAB_CONFIG_FILE")
    local d = tmpdir()
    sys.setenv("FP8LAB_CONFIG_FILE", nil)
    sys.setenv("XDG_CACHE_HOME", d)
    assert.is_nil(config.load_default())
    config.write(config.default_path(), { mixed_precision = "bf16" })
    assert.are.equal("bf16", config.load_default().mixed_precision)
    sys.setenv("FP8LAB_CONFIG_FILE", DATA .. "/good/accelerate_msamp.yaml")
    local t = config.load_default()
    assert.are.equal("msamp", t.fp8_config.backend)
    assert.are.equal(DATA .. "/good/accelerate_msamp.yaml", t.path)
    sys.setenv("FP8LAB_CONFIG_FILE", DATA .. "/bad/typo_top.yaml")
    assert.has_error(function() config.load_default() end)
    sys.setenv("FP8LAB_CONFIG_FILE", old_f)
    sys.setenv("XDG_CACHE_HOME", old_x)
    os.execute("rm -rf " .. q(d))
  end)

  it("reports libyaml's version", function()
    assert.matches("^%d+%.%d+%.%d+$", config.libyaml_version())
  end)
end)

-- Gaps found by an audit of help() and the docs: help(obj.method) of the objects that functions make (a profiler,
-- a SummaryWriter, a progress bar, a safe_open handle, a kwargs handler, an FP8Linear and its fp8_meta, a GPT)
-- found nothing, or an entry that never named the method (acc.prepare_model, fp8.progress.new); a function with two
-- names of one rank showed the entry of the name that sorted first (fp8.settings.list: fp8.config's); public names
-- no entry and no page named; two messages that said the wrong thing; the progress bar's percent floored.
local fp8 = fp8 or require "fp8"
local H = require "fp8.help"
local U = dofile("tests/spec/helpers/util.lua")
local fails_with = U.fails_with

-- whether help's text for x is an entry that names `member` (as a word)
local function names(x, member)
  local t = H.text(x)
  return not t:match("^no help") and t:find("%f[%w_]" .. member .. "%f[^%w_]") ~= nil, t
end
local function assert_names(x, member, label)
  local ok, t = names(x, member)
  assert.is_true(ok, ("%s: help names no %s:\n%s"):format(label or member, member, t:sub(1, 300)))
end

local tmp = os.tmpname()
os.remove(tmp)

describe("help(obj.method) of the objects functions make", function()
  it("a profiler: every method, the object, key_averages()'s rows, fp8.profiler.Profiler", function()
    local prof = fp8.profiler.profile {}
    for _, k in ipairs { "start", "step", "stop", "run", "events", "key_averages", "export_chrome_trace",
                         "trace_path" } do
      assert_names(prof[k], k, "prof." .. k)
    end
    assert_names(prof, "start", "prof")
    local rows = prof:key_averages()
    assert_names(rows.table, "table", "key_averages().table")
    assert_names(rows, "key_averages", "key_averages()")
    assert_names(fp8.profiler.Profiler, "Profiler", "fp8.profiler.Profiler")
    assert_names("profiler.Profiler", "Profiler")
    for _, f in ipairs { "step_num", "windows", "rank", "options", "device" } do assert_names("prof:" .. f, f) end
  end)

  it("a SummaryWriter, a progress bar, a safe_open handle, a kwargs handler", function()
    local w = fp8.SummaryWriter(tmp .. "_tb")
    for _, k in ipairs { "add_scalar", "add_scalars", "add_text", "add_histogram", "add_histogram_raw", "add_hparams",
                         "flush", "close", "get_logdir" } do
      assert_names(w[k], k, "w." .. k)
    end
    w:close()
    os.execute("rm -rf '" .. tmp .. "_tb'")   -- (tmp: os.tmpname's, no quote in it)
    local bar = fp8.progress(3, { tty = false, out = { write = function() end, flush = function() end } })
    for _, k in ipairs { "close", "elapsed", "iter", "line", "set_postfix", "update" } do
      assert_names(bar[k], k, "bar." .. k)
    end
    -- help(bar) once answered "no help for 0/3 (0%) ..."
    assert_names(bar, "set_postfix", "bar")
    assert_names(fp8.progress.Bar, "update", "fp8.progress.Bar")
    fp8.save_file({ a = fp8.ones { 2 } }, tmp .. ".safetensors")
    local f = fp8.safe_open(tmp .. ".safetensors")
    for _, k in ipairs { "keys", "metadata", "get_tensor", "close" } do assert_names(f[k], k, "f." .. k) end
    assert_names(f, "get_tensor", "f")
    f:close()
    os.remove(tmp .. ".safetensors")
    for _, name in ipairs(fp8.kwargs.HANDLER_NAMES) do
      local h = fp8[name] {}
      assert_names(h.to_kwargs, "to_kwargs", name .. ".to_kwargs")
      assert_names(h.to_table, "to_table", name .. ".to_table")
    end
    assert_names("to_kwargs", "to_kwargs")
  end)

  it("an FP8Linear's fused forms, fp8_update and as_recipe, its fp8_meta, a GPT's checkpointing switches", function()
    local l = fp8.nn.FP8Linear(16, 16, { backend = "te" })
    for _, k in ipairs { "forward_gelu", "forward_layernorm", "forward_residual", "fp8_update", "as_recipe" } do
      assert_names(l[k], k, "FP8Linear." .. k)
    end
    local m = l.fp8_meta
    for _, k in ipairs { "state", "load_state", "update", "drop_cache" } do assert_names(m[k], k, "fp8_meta." .. k) end
    assert_names(m, "drop_cache", "fp8_meta")
    local g = fp8.nn.GPT { vocab_size = 8, block_size = 4, n_layer = 1, n_head = 1, n_embd = 4 }
    assert_names(g.gradient_checkpointing_enable, "gradient_checkpointing_enable")
    assert_names(g.gradient_checkpointing_disable, "gradient_checkpointing_disable")
    -- the constructor's option, which the binary takes and docs/lua-api.md documents
    assert_names("nn.GPT", "gradient_checkpointing")
  end)
end)

describe("a function's entry", function()
  it("names the function by the name it was reached by, or shows each entry of names of one rank", function()
    -- fp8.settings.list is fp8.config.keys: both entries, each naming its function
    local t = H.text(fp8.settings.list)
    assert.truthy(t:find("fp8.config.keys and fp8.settings.list are the same function", 1, true), t)
    assert.truthy(t:find("fp8.settings.list() / check", 1, true), t)
    assert.truthy(t:find("keys() lists the keys", 1, true), t)
    assert_names(fp8.progress.new, "new", "fp8.progress.new")
  end)

  it("of the Accelerator's prepare family, local_main_process_first and its fields names each", function()
    local acc = fp8.Accelerator { cpu = true, config = false, env = {} }
    for _, k in ipairs { "prepare", "prepare_model", "prepare_optimizer", "prepare_scheduler", "prepare_data_loader",
                         "local_main_process_first", "main_process_first" } do
      assert_names(acc[k], k, "acc." .. k)
    end
    for _, k in ipairs { "even_batches", "sync_gradients", "step", "process_group", "gradient_state", "scaler",
                         "project_dir", "trackers", "device_placement" } do
      assert_names("acc:" .. k, k)
      assert_names("acc." .. k, k)
    end
  end)
end)

describe("public names no entry named", function()
  it("are found, each in an entry that names it", function()
    for _, n in ipairs { "data.SkipDataLoader", "data.FASHION_MNIST_MEAN", "data.FASHION_MNIST_STD",
                         "data.FASHION_MNIST_ROOT", "data.TEXT_MAX_BYTES", "amp.MODES", "amp.MODE_NAMES",
                         "kwargs.BACKENDS", "kwargs.ENV", "kwargs.HANDLER_NAMES", "kwargs.RECIPE_HANDLER",
                         "plot.available", "plot.command", "progress.Bar", "data.skip_first_batches",
                         "amp.GradScaler.found_inf" } do
      assert_names(n, n:match("[%w_]+$"))
    end
    for _, f in ipairs { "itos", "stoi", "tokens", "vocab", "n", "block_size", "vocab_size" } do
      assert_names("data.TextDataset." .. f, f)
    end
    assert_names(fp8.data.skip_first_batches, "skip_first_batches")
  end)
end)

describe("messages", function()
  it("say of each ProjectConfiguration key what it needs: total_limit automatic naming alone", function()
    local err = fails_with({ "total_limit takes effect only with automatic_checkpoint_naming=true (" }, function()
      return fp8.Accelerator { config = false, env = {},
        project_config = fp8.ProjectConfiguration { project_dir = "/tmp/x", total_limit = 2 } } end)
    assert.falsy(err:find("total_limit take effect only with automatic_checkpoint_naming=true (checkpoints numbered "
      .. "under project_dir/checkpoints) or with log_with=", 1, true))
    -- with log_with, project_dir is used; total_limit still needs automatic naming, and nothing says log_with= helps
    err = fails_with("Accelerator: total_limit takes effect only with automatic_checkpoint_naming=true (", function()
      return fp8.Accelerator { config = false, env = {}, log_with = "tensorboard",
        project_config = fp8.ProjectConfiguration { project_dir = tmp .. "_proj", total_limit = 2 } } end)
    assert.falsy(err:find("log_with", 1, true), err)
  end)

  it("refuse an options table to the init functions that take numbers, naming generator=", function()
    local t = fp8.zeros { 3, 4 }
    local I = fp8.nn.init
    fails_with({ "normal_: options are not offered (got a table {generator})", "generator= is not offered" },
      function() I.normal_(t, { generator = {} }) end)
    fails_with("uniform_: options are not offered", function() I.uniform_(t, { generator = {} }) end)
    fails_with("xavier_uniform_: options are not offered", function() I.xavier_uniform_(t, { gain = 2 }) end)
    fails_with("constant_: options are not offered (got a table {value}): give val as a number",
      function() I.constant_(t, { value = 1 }) end)
    fails_with("normal: options are not offered", function() I.normal({ 2 }, { std = 1 }) end)
    fails_with("kaiming_uniform_: generator= is not offered", function() I.kaiming_uniform_(t, { generator = {} }) end)
    fails_with("trunc_normal_: generator= is not offered", function() I.trunc_normal_(t, { generator = {} }) end)
    -- numbers still work
    I.normal_(t, 0, 0.02)
    I.uniform_(t, -1, 1)
  end)
end)

describe("the progress bar", function()
  it("rounds its percent to the nearest, as tqdm's {percentage:3.0f} (2/3 is 67%)", function()
    local lines = {}
    local out = { write = function(_, ...) for _, s in ipairs { ... } do lines[#lines + 1] = s end end,
                  flush = function() end }
    local bar = fp8.progress(3, { out = out, tty = false, every = 1 })
    bar:update(); bar:update()
    assert.matches("^2/3 %(67%%%)", bar:line())
    assert.matches("^1/3 %(33%%%)", (table.concat(lines):match("1/3 %b()")))
    local tty = fp8.progress(3, { out = out, tty = true })
    tty:update(2)
    assert.matches("^ 67%%|", tty:line())
  end)
end)

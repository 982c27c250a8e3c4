-- Found on 2026-12-07 (stop 99): the hostile API sweep (tests/fuzz/api_sweep.lua, seed 111, ASan + UBSan) with
-- LeakSanitizer on in its children (--leaks) and the collector at its smallest generational step (--gc-stress), over
-- what the API gained since the last leak run (seed 101, stop 94), then the whole API, with the sweep's new entries
-- (the C modules fp8._fileio and fp8._luarng, and each key a function reads from an options table set to the hostile
-- value). docs/robustness.md, "The whole API under LeakSanitizer and the collector under stress (stop 99)".
local U = dofile("tests/spec/helpers/util.lua")
local ends, lying = U.ends, U.lying   -- a call under a budget of instructions; the sweep's lying table

describe("the -inf norm's smallest |x|", function()
  -- T._min_abs_norm (x:norm(-math.huge) and dist's, stop 97) walked its list of dims with ipairs: a table whose
  -- __index answers every key ran for ever (found by the sweep: require("fp8.tensor")._min_abs_norm(T, V)). It reads
  -- the list raw, as _dims_mask does; the sums after it refuse the lying table.
  it("ends on a lying list, and keeps its values for lists of dims", function()
    local T = require("fp8.tensor")
    local ok, e = ends(T._min_abs_norm, fp8.ones{2, 3}, lying())
    assert.is_false(ok)
    assert.truthy(tostring(e):find("does its __len lie?", 1, true), e)
    local x = fp8.tensor{{1, -2, 3}, {0.5, 4, -1}}
    assert.are.same({0.5}, {T._min_abs_norm(x, {1, 2}):item()})
    assert.are.same({{1}, {0.5}}, T._min_abs_norm(x, {-1}, true):tolist())
    assert.are.same({1, 0.5}, x:norm(-math.huge, 2):tolist())
  end)
end)

describe("recurrent layers and the GPT with a huge number of layers", function()
  -- RNN, LSTM and GRU took num_layers = math.maxinteger (any positive integer) and built layers for ever, each small
  -- enough for the size check (found by the sweep's new option-key entries: fp8.nn.GRU(3, 2, {num_layers = V}));
  -- the GPT's n_layer the same (found by hand beside them). Both are bounded as the encoder stacks' num_layers.
  it("refuses a count past 4096 at once, and builds within it", function()
    for _, c in ipairs {
      { function() return fp8.nn.RNN(3, 2, { num_layers = math.maxinteger }) end,
        "RNN: num_layers must be an integer in 1..4096, got 9223372036854775807" },
      { function() return fp8.nn.LSTM(3, 2, { num_layers = 4097 }) end,
        "LSTM: num_layers must be an integer in 1..4096, got 4097" },
      { function() return fp8.nn.GRU{ input_size = 3, hidden_size = 2, num_layers = 1 << 40 } end,
        "GRU: num_layers must be an integer in 1..4096, got 1099511627776" },
      { function() return fp8.nn.GRU(3, 2, { num_layers = 0 }) end,
        "GRU: num_layers must be an integer in 1..4096, got 0" },
      { function()
          return fp8.nn.GPT{ vocab_size = 5, block_size = 4, n_layer = math.maxinteger, n_head = 2, n_embd = 4 }
        end, "GPT: n_layer must be an integer in 1..4096, got 9223372036854775807" },
    } do
      local ok, e = ends(c[1])
      assert.is_false(ok)
      assert.truthy(tostring(e):find(c[2], 1, true), e)
    end
    assert.are.equal(3, fp8.nn.LSTM(3, 2, { num_layers = 3 }).num_layers)
    local gpt = fp8.nn.GPT{ vocab_size = 5, block_size = 4, n_layer = 2, n_head = 2, n_embd = 4 }
    assert.are.equal(2, gpt.config.n_layer)
  end)
end)

describe("a scheduler given a table whose param_groups lies", function()
  -- ReduceLROnPlateau({param_groups = V}) with a table whose __len lies (2^62) looped over its groups for ever (the
  -- option-key entries' finding); LambdaLR's count of lambdas the same. The schedulers take an optimizer's plain list
  -- only now (check_opt, every scheduler), the message naming it.
  it("is refused at once, and an optimizer's groups are taken", function()
    local LS = fp8.optim.lr_scheduler
    for _, c in ipairs {
      { "ReduceLROnPlateau", function() return LS.ReduceLROnPlateau({ param_groups = lying() }) end },
      { "LambdaLR", function() return LS.LambdaLR({ param_groups = lying() }, function() return 1 end) end },
    } do
      local ok, e = ends(c[2])
      assert.is_false(ok)
      assert.truthy(tostring(e):find(c[1] .. ": expected an optimizer from fp8.optim, got a table whose param_groups "
        .. "is not a plain list", 1, true), e)
    end
    local opt = fp8.optim.SGD(fp8.nn.Linear(3, 2):parameters(), { lr = 0.1 })
    assert.are.same({ 0.1 }, LS.ReduceLROnPlateau(opt):get_last_lr())
  end)
end)

describe("autograd.Function's link given a count past any call's", function()
  -- _link (fp8.autograd.Function's and checkpoint's tie of results to arguments) looped from 1 to args.n: an n of 2^62
  -- ran for ever over nils (the whole-API run: require("fp8.autograd_function")._link({n = V}), six values). Internal;
  -- its callers pass table.pack's counts, at most Lua's stack of 1,000,000 values, the bound it checks now.
  it("refuses it at once", function()
    local link = require("fp8.autograd_function")._link
    for _, n in ipairs { 2 ^ 62, math.maxinteger, 2 ^ 31, -1 } do
      local ok, e = ends(link, { n = n }, table.pack())
      assert.is_false(ok)
      assert.truthy(tostring(e):find("_link: args must be a packed list (table.pack), its n an integer in 0..1000000",
        1, true), e)
    end
  end)
end)

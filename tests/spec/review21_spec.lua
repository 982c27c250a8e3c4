-- Found on 2026-12-07 (stop 104, review21: stop 103's code read again). docs/robustness.md, "Stop 103's code read
-- again (stop 104)".
-- Stop 103 refused a proxy (a table whose metatable has __index or __pairs) as resolve's config= table and as an
-- optimizer's parameter group, whose keys are read raw; the option tables nested one level down were read the same
-- way and still took one, each setting in its __index dropped without a word: resolve's config.fp8_config (its
-- backend), DistributedDataParallelKwargs' comm_state_option (PowerSGD's rank), ProfileKwargs' schedule_option (its
-- keys unchecked: a misspelt one passed) and the recipes' override_linear_precision (read by the C settings check:
-- a proxy of {true, false, true} gave {false, false, false}). Each is refused now; plain tables as before.
local F8 = fp8

describe("option tables nested in options refuse a proxy (stop 103's refusal one level down)", function()
  local function proxy(index) return setmetatable({}, { __index = index }) end
  local function refused(where, f)
    local ok, err = pcall(f)
    assert.is_false(ok, where .. ": accepted")
    assert.is_truthy(tostring(err):find("plain table", 1, true), where .. ": " .. tostring(err))
    assert.is_truthy(tostring(err):find("__index", 1, true), where .. ": " .. tostring(err))
  end
  it("resolve's config.fp8_config", function()
    local K = require "fp8.kwargs"
    local fc = { backend = "te", fp8_format = "E4M3" }
    local r = K.resolve({ config = { mixed_precision = "fp8", fp8_config = fc }, env = {} })
    assert.are.equal("te", r.fp8_backend)
    assert.are.equal("E4M3", r.fp8_recipe.fp8_format)
    refused("fp8_config", function()
      return K.resolve({ config = { mixed_precision = "fp8", fp8_config = proxy(fc) }, env = {} })
    end)
  end)
  it("DistributedDataParallelKwargs' comm_state_option", function()
    local h = F8.DistributedDataParallelKwargs { comm_hook = "power_sgd",
      comm_state_option = { matrix_approximation_rank = 4 } }
    assert.are.equal(4, h.comm_state_option.matrix_approximation_rank)
    refused("comm_state_option", function()
      return F8.DistributedDataParallelKwargs { comm_hook = "power_sgd",
        comm_state_option = proxy { matrix_approximation_rank = 4 } }
    end)
  end)
  it("ProfileKwargs' schedule_option", function()
    local ok, err = pcall(F8.ProfileKwargs, { schedule_option = { wait = 1, warmup = 1, active = 2, repaet = 3 } })
    assert.is_false(ok)
    assert.is_truthy(tostring(err):find("unknown key 'repaet'", 1, true), tostring(err))
    refused("schedule_option", function()
      return F8.ProfileKwargs { schedule_option = proxy { wait = 1, warmup = 1, active = 2, repaet = 3 } }
    end)
  end)
  it("a recipe's override_linear_precision (the C settings check)", function()
    local h = F8.FP8RecipeKwargs { backend = "te", override_linear_precision = { true, false, true } }
    assert.are.same({ true, false, true }, h.override_linear_precision)
    refused("override_linear_precision list", function()
      return F8.FP8RecipeKwargs { backend = "te", override_linear_precision = proxy { true, false, true } }
    end)
    refused("override_linear_precision names", function()
      return F8.TERecipeKwargs { override_linear_precision = proxy { wgrad = true } }
    end)
    -- (an empty plain table is all false, as before)
    assert.are.same({ false, false, false },
      F8.FP8RecipeKwargs { backend = "te", override_linear_precision = {} }.override_linear_precision)
  end)
end)

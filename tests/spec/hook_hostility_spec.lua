-- hook_hostility_spec.lua — every way into the autograd engine (backward, its retain_graph and inputs=,
-- fp8.autograd.grad and fp8.autograd.backward) with a hook that misbehaves, in every place a hook can sit (a leaf's
-- or a result's gradient hook, a leaf's post-accumulate-grad hook, a module's forward and full backward hooks).
-- Each run must end in a result or in an error that is a message, never a crash, and leave the engine as it found
-- it: grad mode on, and a fresh backward afterwards giving the right gradient. The engine's walk restricted to some
-- inputs (pruning, capture) or started from several tensors is where a hook that frees, re-registers or re-enters
-- could break an invariant; the ASan build runs this file too.
local fp8 = require "fp8"
local nn = fp8.nn

-- What a misbehaving hook does. ctx: the run's tensors and handles; the hook's own arguments follow.
local BODIES = {
  raise = function() error("hook failed") end,
  raise_table = function() error({ code = 1 }) end,
  yield = function() coroutine.yield(1) end,
  free_all = function(ctx)
    for _, t in pairs(ctx.tensors) do pcall(t.free, t) end
    collectgarbage(); collectgarbage()
  end,
  remove_all = function(ctx) for _, h in ipairs(ctx.handles) do h:remove() end end,
  register_more = function(ctx)
    ctx.tensors.x:register_hook(function(g) return g * 2 end)
    ctx.tensors.x:register_post_accumulate_grad_hook(function() end)
  end,
  toggle_requires_grad = function(ctx) ctx.tensors.x:requires_grad(false) end,
  backward_same = function(ctx) ctx.tensors.y:backward() end,
  grad_same = function(ctx) fp8.autograd.grad(ctx.tensors.y, ctx.tensors.x) end,
  backward_other = function()
    fp8.enable_grad(function()
      local z = fp8.ones(2):requires_grad(true)
      local gz = fp8.autograd.grad((z * z):sum(), z)
      ;(z * 3):sum():backward()
      assert(gz:totable()[1] == 2 and z.grad:totable()[1] == 3)
    end)
  end,
  return_number = function() return 5 end,
  return_table = function() return {} end,
  return_wrong_shape = function() return fp8.ones(7) end,
  return_fp8 = function(_, g) return (fp8.is_tensor(g) and g or fp8.ones(2)):quantize("e4m3") end,
  return_released = function() local t = fp8.ones(2); t:free(); return t end,
  grad_mode_on = function() fp8.set_grad_enabled(true) end,
  write_leaf = function(ctx) fp8.no_grad(function() fp8.nn.init.copy_(ctx.tensors.x, fp8.zeros(2, 3)) end) end,
  set_grad_field = function(ctx) ctx.tensors.x.grad = fp8.ones(3) end,
  step_optimizer = function(ctx) ctx.opt:step(); ctx.opt:zero_grad() end,
}

-- Where the hook sits; each returns the handle.
local PLACES = {
  leaf = function(ctx, f) return ctx.tensors.x:register_hook(function(g) return f(ctx, g) end) end,
  result = function(ctx, f) return ctx.tensors.h:register_hook(function(g) return f(ctx, g) end) end,
  post = function(ctx, f) return ctx.tensors.x:register_post_accumulate_grad_hook(function(p) return f(ctx, p) end) end,
  module_forward = function(ctx, f) return ctx.lin:register_forward_hook(function() return f(ctx) end) end,
  module_backward = function(ctx, f) return ctx.lin:register_full_backward_hook(function() return f(ctx) end) end,
}

local ENTRIES = {
  backward = function(ctx) ctx.tensors.y:backward() end,
  backward_retain = function(ctx) ctx.tensors.y:backward { retain_graph = true }; ctx.tensors.y:backward() end,
  backward_inputs = function(ctx) ctx.tensors.y:backward { inputs = { ctx.tensors.x, ctx.tensors.h } } end,
  grad = function(ctx) fp8.autograd.grad(ctx.tensors.y, { ctx.tensors.x, ctx.tensors.h }) end,
  backward_many = function(ctx)   -- a result and a leaf among the tensors
    fp8.autograd.backward({ ctx.tensors.y, ctx.tensors.h, ctx.tensors.x }, { nil, fp8.ones(2, 3), fp8.ones(2, 3) })
  end,
  in_coroutine = function(ctx)   -- a hook that yields tries to cross the C call of the backward
    local co = coroutine.wrap(function() ctx.tensors.y:backward() end)
    co()
  end,
  grad_unused = function(ctx)
    local u = fp8.ones(1):requires_grad(true)
    fp8.autograd.grad(ctx.tensors.y, { ctx.tensors.x, u }, { allow_unused = true, retain_graph = true })
  end,
}

-- One run: a fresh graph x → Linear → h → y, the hook placed, then the entry (the forward too, for module hooks).
local function run(place, body, entry)
  fp8.manual_seed(5)
  local ctx = { tensors = {}, handles = {} }
  ctx.lin = nn.Linear(3, 3)
  ctx.opt = fp8.optim.SGD(ctx.lin:parameters(), { lr = 0.1 })
  ctx.tensors.x = fp8.randn(2, 3):requires_grad(true)
  if place == "module_forward" or place == "module_backward" then
    ctx.handles[1] = PLACES[place](ctx, BODIES[body])
  end
  local ok, err = pcall(function()
    ctx.tensors.h = ctx.lin(ctx.tensors.x) * 2
    ctx.tensors.y = (ctx.tensors.h * ctx.tensors.h):sum()
    if not ctx.handles[1] then ctx.handles[1] = PLACES[place](ctx, BODIES[body]) end
    ENTRIES[entry](ctx)
  end)
  return ok, err
end

describe("hostile hooks", function()
  it("end every way into the engine with a result or a message, and leave it working", function()
    local names = function(t) local out = {} for k in pairs(t) do out[#out + 1] = k end table.sort(out) return out end
    local runs, errors = 0, 0
    for _, place in ipairs(names(PLACES)) do
      for _, body in ipairs(names(BODIES)) do
        for _, entry in ipairs(names(ENTRIES)) do
          local ok, err = run(place, body, entry)
          runs = runs + 1
          local where = ("%s hook, %s, %s"):format(place, body, entry)
          if not ok then
            errors = errors + 1
            assert.is_truthy(type(err) == "string" or type(err) == "table", where .. ": error " .. type(err))
          end
          assert.is_true(fp8.is_grad_enabled(), where .. ": grad mode left off")
          -- the engine works after it
          local z = fp8.tensor({ 1, 2 }):requires_grad(true)
          ;(z * z):sum():backward()
          assert.are.same({ 2, 4 }, z.grad:totable(), where)
          assert.are.same({ 2, 4 }, fp8.autograd.grad((z * z):sum(), z):totable(), where)
        end
      end
    end
    collectgarbage(); collectgarbage()
    assert.are.equal(#names(PLACES) * #names(BODIES) * #names(ENTRIES), runs)
    assert.is_true(runs >= 400)
    assert.is_true(errors > 0 and errors < runs)   -- the battery reaches both ends
  end)

  it("a misbehaving hook's error names the hook and what it did", function()
    local ok, err = run("leaf", "return_wrong_shape", "grad")
    assert.is_false(ok)
    assert.matches("backward: a tensor's hook returned a tensor of shape %[7%] for a gradient of shape %[2, 3%]", err)
    ok, err = run("post", "yield", "in_coroutine")
    assert.is_false(ok)
    assert.matches("backward: a tensor's post%-accumulate%-grad hook raised: attempt to yield across a C%-call "
      .. "boundary", err)
    ok, err = run("leaf", "return_released", "backward")
    assert.is_false(ok)
    assert.matches("backward: a tensor's hook returned a released tensor", err)
    ok, err = run("result", "write_leaf", "backward")   -- before the Linear reads x again
    assert.is_false(ok)
    assert.matches("LinearBackward needs %(saved tensor 1, shape %[2, 3%]%) was written in place after the "
      .. "forward", err)
    ok, err = run("result", "grad_same", "backward_inputs")
    assert.is_false(ok)
    assert.matches("being run by an unfinished backward", err)
  end)
end)

-- optim_spec.lua — fp8.optim: SGD (momentum, dampening, nesterov, weight decay) and AdamW steps
-- against hand-written float64 Lua references over 3 steps, parameter groups, state_dict round
-- trips, argument errors, and the learning-rate schedules at chosen steps.
local fp8 = fp8 or require "fp8"
local optim = fp8.optim
local sched = optim.lr_scheduler
local U = dofile("tests/spec/helpers/util.lua")

local function close(a, b, tol) return math.abs(a - b) <= (tol or 1e-6) * math.max(1, math.abs(b)) end

local function has_autograd()
  return fp8.randn { 1 }.requires_grad ~= nil
end

-- Gives p the gradient g (a Lua list) through autograd: loss = Σ p·g  ⇒  ∂loss/∂p = g.
local function set_grad(p, g)
  p:zero_grad()
  local loss = (p * fp8.tensor(g)):sum()
  loss:backward()
end

local P0 = { 0.5, -1.25, 2.0, 0.1 }
local GRADS = { { 0.3, -0.2, 1.5, -0.01 }, { -0.7, 0.4, 0.2, 0.05 }, { 0.1, 0.9, -1.1, 0.02 } }

local function sgd_ref(o)
  local p, buf = { table.unpack(P0) }, nil
  for s = 1, 3 do
    local g = GRADS[s]
    local nb = {}
    for i = 1, #p do
      local d = g[i] + (o.weight_decay or 0) * p[i]
      if (o.momentum or 0) ~= 0 then
        nb[i] = buf == nil and d or o.momentum * buf[i] + (1 - (o.dampening or 0)) * d
        d = o.nesterov and d + o.momentum * nb[i] or nb[i]
      end
      p[i] = p[i] - o.lr * d
    end
    if (o.momentum or 0) ~= 0 then buf = nb end
  end
  return p
end

local function adamw_ref(o)
  local lr, b1, b2, eps, wd = o.lr or 1e-3, (o.betas or {})[1] or 0.9, (o.betas or {})[2] or 0.999, o.eps or 1e-8,
    o.weight_decay or 1e-2
  local p, m, v = { table.unpack(P0) }, { 0, 0, 0, 0 }, { 0, 0, 0, 0 }
  for s = 1, 3 do
    local g = GRADS[s]
    for i = 1, #p do
      p[i] = p[i] * (1 - lr * wd)
      m[i] = b1 * m[i] + (1 - b1) * g[i]
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i]
      local mhat, vhat = m[i] / (1 - b1 ^ s), v[i] / (1 - b2 ^ s)
      p[i] = p[i] - lr * mhat / (math.sqrt(vhat) + eps)
    end
  end
  return p
end


-- opt_class({p}, opts) stepped `steps` times from p = {1, -2, 0.5} with p.grad = grad(i), the parameters after each
-- step against torch's (want[i], relative tol); then its state round-trips through state_dict into a fresh
-- optimizer, which goes on as this one does
local function steps_like_torch(label, opt_class, o, want, steps, grad, tol)
  local p = fp8.tensor({ 1, -2, 0.5 }):requires_grad(true)
  local opt = opt_class({ p }, o)
  for i = 1, steps do
    p.grad = grad(i)
    opt:step()
    local got = p:totable()
    for k = 1, 3 do
      assert.is_true(math.abs(got[k] - want[i][k]) <= tol * math.max(1, math.abs(want[i][k])),
        ("%s step %d [%d]: %.9g vs torch's %.9g"):format(label, i, k, got[k], want[i][k]))
    end
  end
  local q = fp8.tensor(p:totable()):requires_grad(true)
  local o2 = opt_class({ q }, o)
  o2:load_state_dict(opt:state_dict())
  p.grad, q.grad = fp8.tensor { 1, 1, 1 }, fp8.tensor { 1, 1, 1 }
  opt:step(); o2:step()
  assert.are.same(p:totable(), q:totable())
end

describe("fp8.optim steps (need autograd bindings)", function()
  if not has_autograd() then
    pending("autograd bindings not in this build")
    return
  end

  local function run(make)
    local p = fp8.tensor(P0):requires_grad(true)
    local opt = make({ p })
    for s = 1, 3 do
      set_grad(p, GRADS[s])
      opt:step()
    end
    return p:totable(), opt
  end

  for _, o in ipairs {
    { lr = 0.1 },
    { lr = 0.1, weight_decay = 0.05 },
    { lr = 0.05, momentum = 0.9 },
    { lr = 0.05, momentum = 0.9, dampening = 0.3, weight_decay = 0.01 },
    { lr = 0.05, momentum = 0.8, nesterov = true, weight_decay = 0.01 },
  } do
    local label = {}
    for k, v in pairs(o) do label[#label + 1] = k .. "=" .. tostring(v) end
    table.sort(label)
    it("SGD{" .. table.concat(label, ", ") .. "} matches the float64 reference over 3 steps", function()
      local got = run(function(ps) return optim.SGD(ps, o) end)
      local want = sgd_ref(o)
      for i = 1, #want do assert.is_true(close(got[i], want[i], 1e-6), ("[%d] %.9g vs %.9g"):format(i, got[i], want[i])) end
    end)
  end

  for _, o in ipairs {
    {},
    { lr = 0.01, betas = { 0.8, 0.99 }, eps = 1e-6, weight_decay = 0.1 },
    { lr = 0.1, weight_decay = 0 },
  } do
    it(("AdamW{lr=%s, wd=%s} matches the float64 reference over 3 steps"):format(tostring(o.lr), tostring(o.weight_decay)), function()
      local got, opt = run(function(ps) return optim.AdamW(ps, o) end)
      local want = adamw_ref(o)
      for i = 1, #want do assert.is_true(close(got[i], want[i], 2e-6), ("[%d] %.9g vs %.9g"):format(i, got[i], want[i])) end
      local sd = opt:state_dict()
      assert.are.equal(3, sd.state[1].step)
      assert.are.same({ 1 }, sd.param_groups[1].params)
    end)
  end

  it("accepts the single-table form and skips parameters without a gradient", function()
    local a = fp8.tensor { 1, 2 }:requires_grad(true)
    local b = fp8.tensor { 3, 4 }:requires_grad(true)
    local opt = optim.AdamW { params = { a, b }, lr = 0.1, weight_decay = 0 }
    set_grad(a, { 1, -1 })
    opt:step()
    assert.are.same({ 3, 4 }, b:totable())
    assert.is_true(close(a:totable()[1], 0.9, 1e-6) and close(a:totable()[2], 2.1, 1e-6))
    opt:zero_grad()
    assert.is_nil(a.grad)
  end)

  it("uses per-group options", function()
    local a = fp8.tensor { 1 }:requires_grad(true)
    local b = fp8.tensor { 1 }:requires_grad(true)
    local opt = optim.SGD({ { params = { a } }, { params = { b }, lr = 0.5 } }, { lr = 0.1 })
    set_grad(a, { 1 }); set_grad(b, { 1 })
    opt:step()
    assert.is_true(close(a:item(), 0.9) and close(b:item(), 0.5))
  end)

  it("continues identically after state_dict / load_state_dict", function()
    local function setup()
      local p = fp8.tensor(P0):requires_grad(true)
      return p, optim.AdamW({ p }, { lr = 0.05 })
    end
    local p1, o1 = setup()
    set_grad(p1, GRADS[1]); o1:step()
    local sd = o1:state_dict()
    local p2, o2 = setup()
    fp8.nn.init.copy_(p2, p1)
    o2:load_state_dict(sd)
    for _, pair in ipairs { { p1, o1 }, { p2, o2 } } do
      set_grad(pair[1], GRADS[2]); pair[2]:step()
    end
    assert.are.same(p1:totable(), p2:totable())
  end)

  it("load_state_dict refuses a parameter index listed twice (one saved state given to two parameters)", function()
    local a, b = fp8.tensor(P0):requires_grad(true), fp8.tensor(P0):requires_grad(true)
    local o = optim.AdamW({ a, b }, { lr = 0.05 })
    set_grad(a, GRADS[1]); set_grad(b, GRADS[2]); o:step()
    local sd = o:state_dict()
    sd.param_groups[1].params = { 1, 1 }
    local before = o.state[b].exp_avg:totable()
    local ok, err = pcall(o.load_state_dict, o, sd)
    assert.is_false(ok)
    assert.truthy(err:find("AdamW:load_state_dict: group 1: params[2] is index 1, already listed at group 1 params[1]",
      1, true), err)
    assert.are.same(before, o.state[b].exp_avg:totable())
  end)
end)

describe("fp8.optim arguments", function()
  local function p() return fp8.zeros { 2 } end
  it("SGD's lr defaults to 1e-3, as torch 2.x's (torch 1.x required it)", function()
    assert.are.equal(1e-3, optim.SGD({ p() }).param_groups[1].lr)
    assert.are.equal(1e-3, optim.SGD({ p() }, { momentum = 0.9 }).param_groups[1].lr)
  end)
  it("maximize=true ascends, as torch 2.x's (the gradient negated before decay and momentum)", function()
    -- torch 2.x's parameters after three steps from {1, -2} with gradients i·{0.5, 0.25}
    for _, c in ipairs {
      { optim.SGD, { lr = 0.1, momentum = 0.9, weight_decay = 0.1, nesterov = true },
        { 1.640119194984436, -1.4821752309799194 } },
      { optim.SGD, { lr = 0.1 }, { 1.2999999523162842, -1.850000023841858 } },
      { optim.AdamW, { lr = 0.1, weight_decay = 0.1 }, { 1.25966215133667, -1.6512348651885986 } },
    } do
      local q = fp8.tensor { 1, -2 }:requires_grad(true)
      c[2].maximize = true
      local o = c[1]({ q }, c[2])
      for i = 1, 3 do q.grad = fp8.tensor { 0.5 * i, 0.25 * i }; o:step() end
      for j = 1, 2 do assert.is_true(math.abs(q:tolist()[j] - c[3][j]) < 1e-6, o.name .. " " .. j) end
    end
    local ok, err = pcall(fp8.optim.MSAMPAdamW and fp8.optim.MSAMPAdamW.new or
      require("fp8.optim.msamp_adamw").new, { p() }, { maximize = true })
    assert.is_false(ok)
    assert.truthy(tostring(err):find("maximize=true is not supported by MS-AMP's AdamW", 1, true), err)
    local acc = fp8.Accelerator { mixed_precision = "fp8",
      kwargs_handlers = { fp8.MSAMPRecipeKwargs { opt_level = "O2" } } }
    local m = fp8.nn.Linear(16, 16)
    ok, err = pcall(acc.prepare, acc, m, optim.AdamW(m:parameters(), { maximize = true }))
    assert.is_false(ok)
    assert.are.equal("MSAMPAdamW: parameter group 1 has maximize=true, which MS-AMP's AdamW does not support (the "
      .. "msamp backend replaces an AdamW by it)", err)
  end)

  it("amsgrad=true takes the running maximum of v, as torch 2.x's AdamW; MS-AMP's refuses it", function()
    -- torch 2.x: AdamW(lr=0.1, weight_decay=0.1, betas=(0.9, 0.5), amsgrad=True), four steps from {1, -2, 0.5}
    local G = { { 2.0, -1.0, 0.1 }, { 0.5, 0.3, 0.0 }, { 0.1, 0.05, -3.0 }, { 0.01, 0.02, 0.0 } }
    local want = {
      [false] = { 0.5645144581794739, -1.6879923343658447, 0.3991749882698059 },
      [true] = { 0.6993974447250366, -1.7458127737045288, 0.40828636288642883 },
      max = { 2.0, 0.5, 4.50124979019165 },
    }
    local last
    for _, ams in ipairs { false, true } do
      local q = fp8.tensor { 1, -2, 0.5 }:requires_grad(true)
      local o = optim.AdamW({ q }, { lr = 0.1, weight_decay = 0.1, betas = { 0.9, 0.5 }, amsgrad = ams })
      for i = 1, 4 do q.grad = fp8.tensor(G[i]); o:step() end
      for j = 1, 3 do assert.is_true(math.abs(q:tolist()[j] - want[ams][j]) < 1e-6, tostring(ams) .. " " .. j) end
      if ams then
        for j = 1, 3 do assert.is_true(math.abs(o.state[q].max_exp_avg_sq:tolist()[j] - want.max[j]) < 1e-6) end
        last = o
      else
        assert.is_nil(o.state[q].max_exp_avg_sq)
      end
    end
    -- the maximum travels with state_dict: a copy continues as the original does
    local sd = last:state_dict()
    assert.is_not_nil(sd.state[1].max_exp_avg_sq)
    local q2 = fp8.tensor(last.param_groups[1].params[1]:tolist()):requires_grad(true)
    local o2 = optim.AdamW({ q2 }, { lr = 0.1, weight_decay = 0.1, betas = { 0.9, 0.5 }, amsgrad = true })
    o2:load_state_dict(sd)
    local q1 = last.param_groups[1].params[1]
    for _, pair in ipairs { { q1, last }, { q2, o2 } } do
      pair[1].grad = fp8.tensor { 0.01, 0.01, 0.01 }
      pair[2]:step()
    end
    assert.are.same(q1:tolist(), q2:tolist())
    local ok, err = pcall(require("fp8.optim.msamp_adamw").new, { p() }, { amsgrad = true })
    assert.is_false(ok)
    assert.truthy(tostring(err):find("amsgrad=true is not supported by MS-AMP's AdamW", 1, true), err)
    local acc = fp8.Accelerator { mixed_precision = "fp8",
      kwargs_handlers = { fp8.MSAMPRecipeKwargs { opt_level = "O2" } } }
    local m = fp8.nn.Linear(16, 16)
    ok, err = pcall(acc.prepare, acc, m, optim.AdamW(m:parameters(), { amsgrad = true }))
    assert.is_false(ok)
    assert.truthy(tostring(err):find("parameter group 1 has amsgrad=true", 1, true), err)
  end)

  it("RMSprop and Adagrad are torch 2.15's, every option (four steps from {1, -2, 0.5})", function()
    -- torch 2.15: p = [1, -2, 0.5]; step i with p.grad = i·[0.5, 0.25, -1]; the parameters after each step
    local ref = {
      rms = { { 2.38418579e-07, -2.99999952, 1.5 }, { -0.89532274, -3.89532232, 2.39532304 },
              { -1.69882715, -4.69882679, 3.19882751 }, { -2.43156195, -5.43156147, 3.93156219 } },
      rms_all = { { 0.833334267, -2.16665554, 0.66666609 }, { 0.545811236, -2.46722722, 0.957382262 },
                  { 0.17032586, -2.86262727, 1.33817112 }, { -0.269673526, -3.32476139, 1.78458941 } },
      rms_max = { { 1.49999988, -1.50000024, 4.02331359e-08 }, { 2.1976614, -0.802338898, -0.69766134 },
                  { 2.94824433, -0.0517560504, -1.44824433 }, { 3.68990302, 0.689902723, -2.18990326 } },
      ada = { { 0.899999976, -2.0999999, 0.600000024 }, { 0.810557246, -2.18944263, 0.689442754 },
              { 0.730378866, -2.2696209, 0.769621134 }, { 0.657349169, -2.34265065, 0.842650831 } },
      ada_all = { { 0.858285725, -2.05282688, 0.674369574 }, { 0.712431014, -2.15706348, 0.832414269 },
                  { 0.585228324, -2.27033448, 0.964812279 }, { 0.475980103, -2.37559938, 1.07677519 } },
      ada_max = { { 1.10000002, -1.89999998, 0.400000006 }, { 1.18944275, -1.81055725, 0.310557276 },
                  { 1.26962113, -1.73037887, 0.230378896 }, { 1.34265077, -1.65734923, 0.157349229 } },
    }
    for _, c in ipairs {
      { "rms", optim.RMSprop, { lr = 0.1 } },
      { "rms_all", optim.RMSprop, { lr = 0.05, alpha = 0.9, eps = 1e-6, weight_decay = 0.1, momentum = 0.8,
        centered = true } },
      { "rms_max", optim.RMSprop, { lr = 0.05, momentum = 0.5, maximize = true } },
      { "ada", optim.Adagrad, { lr = 0.1 } },
      { "ada_all", optim.Adagrad, { lr = 0.2, lr_decay = 0.1, weight_decay = 0.05, initial_accumulator_value = 0.3,
        eps = 1e-6 } },
      { "ada_max", optim.Adagrad, { lr = 0.1, maximize = true } },
    } do
      steps_like_torch(c[1], c[2], c[3], ref[c[1]], 4, function(i) return fp8.tensor({ 0.5, 0.25, -1 }) * i end, 2e-6)
    end
    U.fails_with("RMSprop: alpha must be a finite number >= 0, got -1", optim.RMSprop, { fp8.ones { 1 } }, { alpha = -1 })
    U.fails_with("RMSprop: centered must be a boolean", optim.RMSprop, { fp8.ones { 1 } }, { centered = 1 })
    U.fails_with("Adagrad: unknown option 'lr_dcay' (did you mean 'lr_decay'?)", optim.Adagrad, { fp8.ones { 1 } },
      { lr_dcay = 1 })
  end)

  it("Adadelta, Adamax, NAdam and RAdam are torch 2.15's, every option (eight steps, the gradient's sign flipping)",
    function()
    -- torch 2.15 (foreach=False): p = [1, -2, 0.5]; step i with p.grad = ±i·[0.5, 0.25, -1] (negative every third);
    -- the parameters after each step
    local ref = {
      adadelta = {
        { 0.998418868, -2.00158095, 0.501581132 },
        { 0.996398568, -2.00360107, 0.503601432 },
        { 0.99883312, -2.00116658, 0.501166821 },
        { 0.995995522, -2.004004, 0.504004419 },
        { 0.992762506, -2.00723696, 0.507237494 },
        { 0.996385276, -2.00361443, 0.503614724 },
        { 0.99237752, -2.007622, 0.50762254 },
        { 0.98798871, -2.01201057, 0.512011409 },
      },
      adadelta_all = {
        { 1.01459074, -1.98540604, 0.485396266 },
        { 1.03393412, -1.96723533, 0.466414392 },
        { 1.00966477, -1.9840796, 0.489148468 },
        { 1.03648913, -1.95937645, 0.462416261 },
        { 1.06705737, -1.93182564, 0.432194054 },
        { 1.03189075, -1.95835721, 0.465552688 },
        { 1.06916964, -1.9250226, 0.428681791 },
        { 1.10973644, -1.88908744, 0.388679981 },
      },
      adamax = {
        { 0.899999976, -2.0999999, 0.600000024 },
        { 0.823684216, -2.17631578, 0.676315784 },
        { 0.828481257, -2.1715188, 0.671518743 },
        { 0.801954627, -2.19804549, 0.698045373 },
        { 0.761496007, -2.23850417, 0.738503993 },
        { 0.756318092, -2.24368215, 0.743681908 },
        { 0.733562589, -2.26643753, 0.766437411 },
        { 0.699589312, -2.30041075, 0.800410688 },
      },
      adamax_all = {
        { 1.04983389, -1.95007682, 0.450045407 },
        { 1.09262276, -1.90324104, 0.40553233 },
        { 1.0621953, -1.90619135, 0.432547331 },
        { 1.08885276, -1.87126684, 0.402949244 },
        { 1.13015163, -1.82734311, 0.360769093 },
        { 1.10388815, -1.84350991, 0.384961456 },
        { 1.13113785, -1.81111562, 0.356035024 },
        { 1.17323363, -1.76741266, 0.313429117 },
      },
      nadam = {
        { 0.89435482, -2.10564518, 0.60564518 },
        { 0.79806006, -2.20193982, 0.70193994 },
        { 0.882896304, -2.11710358, 0.617103696 },
        { 0.793091059, -2.2069087, 0.706908941 },
        { 0.697375953, -2.30262375, 0.802624047 },
        { 0.781009018, -2.2189908, 0.718990982 },
        { 0.686365545, -2.3136344, 0.813634455 },
        { 0.585446954, -2.41455293, 0.914553046 },
      },
      nadam_all = {
        { 0.945242226, -2.0546577, 0.554761112 },
        { 0.894057393, -2.10983419, 0.606852174 },
        { 0.935191035, -2.05457711, 0.561280787 },
        { 0.885872364, -2.0926106, 0.608620107 },
        { 0.833216667, -2.13961554, 0.660420597 },
        { 0.874314845, -2.08768964, 0.616547048 },
        { 0.824003696, -2.13086963, 0.665465176 },
        { 0.770118058, -2.18023396, 0.718532741 },
      },
      nadam_dec = {
        { 1.04782259, -1.93717742, 0.444677413 },
        { 1.09073079, -1.87934422, 0.39430666 },
        { 1.04285896, -1.91236567, 0.434753239 },
        { 1.08254719, -1.85790133, 0.387676865 },
        { 1.12499201, -1.80075431, 0.337880939 },
        { 1.07755053, -1.83356702, 0.378008068 },
        { 1.11948442, -1.77707744, 0.328796297 },
        { 1.16434622, -1.71773279, 0.276693016 },
      },
      radam = {
        { 0.949999988, -2.0250001, 0.600000024 },
        { 0.873684168, -2.06315804, 0.752631605 },
        { 0.88087976, -2.0595603, 0.73824048 },
        { 0.82782656, -2.08608699, 0.844346881 },
        { 0.72668004, -2.13666034, 1.04663992 },
        { 0.726474166, -2.13686609, 1.04684579 },
        { 0.725309014, -2.13803124, 1.04801095 },
        { 0.723226011, -2.14011431, 1.05009401 },
      },
      radam_all = {
        { 0.970000029, -2.00250006, 0.547500014 },
        { 0.923433363, -2.01332498, 0.62817502 },
        { 0.943694949, -1.99078333, 0.57524097 },
        { 0.897300541, -2.00162172, 0.65567112 },
        { 0.808019876, -2.03395867, 0.821929097 },
        { 0.838226497, -2.00660968, 0.749270201 },
        { 0.76290983, -2.03208137, 0.88771683 },
        { 0.623092294, -2.0898633, 1.15522504 },
      },
      radam_dec = {
        { 1.01999998, -1.97749996, 0.44749999 },
        { 1.0565666, -1.94677913, 0.361929148 },
        { 1.02628374, -1.94954526, 0.410119504 },
        { 1.062819, -1.91896415, 0.324735552 },
        { 1.14218235, -1.86703062, 0.153757021 },
        { 1.10194755, -1.87495732, 0.222035855 },
        { 1.16750085, -1.83005106, 0.0787996799 },
        { 1.29744768, -1.7530086, -0.193162948 },
      },
    }
    for _, c in ipairs {
      { "adadelta", optim.Adadelta, { lr = 0.5 } },
      { "adadelta_all", optim.Adadelta, { lr = 0.8, rho = 0.7, eps = 1e-4, weight_decay = 0.1, maximize = true } },
      { "adamax", optim.Adamax, { lr = 0.1 } },
      { "adamax_all", optim.Adamax, { lr = 0.05, betas = { 0.3, 0.6 }, eps = 1e-3, weight_decay = 0.2,
        maximize = true } },
      { "nadam", optim.NAdam, { lr = 0.1 } },
      { "nadam_all", optim.NAdam, { lr = 0.05, betas = { 0.8, 0.9 }, eps = 1e-4, weight_decay = 0.1,
        momentum_decay = 0.01 } },
      { "nadam_dec", optim.NAdam, { lr = 0.05, weight_decay = 0.1, decoupled_weight_decay = true, maximize = true } },
      { "radam", optim.RAdam, { lr = 0.1 } },
      { "radam_all", optim.RAdam, { lr = 0.05, betas = { 0.5, 0.6 }, eps = 1e-4, weight_decay = 0.1 } },
      { "radam_dec", optim.RAdam, { lr = 0.05, betas = { 0.5, 0.6 }, weight_decay = 0.1, decoupled_weight_decay = true,
        maximize = true } },
    } do
      steps_like_torch(c[1], c[2], c[3], ref[c[1]], 8,
        function(i) return fp8.tensor({ 0.5, 0.25, -1 }) * (i * (i % 3 == 0 and -1 or 1)) end, 4e-6)
    end
    U.fails_with("Adadelta: rho must be a number in [0, 1], got 2", optim.Adadelta, { fp8.ones { 1 } }, { rho = 2 })
    U.fails_with("Adamax: betas[2] must be in [0, 1), got 1", optim.Adamax, { fp8.ones { 1 } }, { betas = { 0.9, 1 } })
    U.fails_with("NAdam: unknown option 'amsgrad'", optim.NAdam, { fp8.ones { 1 } }, { amsgrad = true })
    U.fails_with("NAdam: momentum_decay must be a finite number >= 0, got -1", optim.NAdam, { fp8.ones { 1 } },
      { momentum_decay = -1 })
    U.fails_with("RAdam: decoupled_weight_decay must be a boolean", optim.RAdam, { fp8.ones { 1 } },
      { decoupled_weight_decay = 1 })
    -- a NAdam state whose mu_product is not a number is refused by name
    local p = fp8.tensor({ 1 }):requires_grad(true)
    local o = optim.NAdam({ p })
    p.grad = fp8.ones { 1 }
    o:step()
    local sd = o:state_dict()
    sd.state[1].mu_product = "x"
    U.fails_with("state 'mu_product' of parameter 1 must be a finite number, got x", o.load_state_dict, o, sd)
  end)

  it("Adam is torch 2.x's: L2 weight decay on the gradient, amsgrad, maximize, decoupled_weight_decay", function()
    -- torch 2.15: Adam(lr=0.1, weight_decay=0.1, betas=(0.9, 0.5), ...), four steps from {1, -2, 0.5}
    local G = { { 2.0, -1.0, 0.1 }, { 0.5, 0.3, 0.0 }, { 0.1, 0.05, -3.0 }, { 0.01, 0.02, 0.0 } }
    local cases = {
      { {}, { 0.586808979511261, -1.656816005706787, 0.3940065801143646 },
        { 0.2250499576330185, -0.10598896443843842, -0.2496536374092102 } },
      { { amsgrad = true }, { 0.7249075174331665, -1.771471619606018, 0.4044266641139984 },
        { 0.22597239911556244, -0.10677003860473633, -0.24919180572032928 } },
      { { maximize = true }, { 1.3768123388290405, -2.087353229522705, 0.48522379994392395 },
        { -0.15643875300884247, -0.029668349772691727, 0.28186100721359253 } },
      { { weight_decay = 0 }, { 0.597987174987793, -1.7623896598815918, 0.4147490859031677 },
        { 0.19629999995231628, -0.04209999740123749, -0.26271000504493713 } },
      -- decoupled: AdamW's step (the AdamW amsgrad spec's torch values above)
      { { decoupled_weight_decay = true }, { 0.5645144581794739, -1.6879923343658447, 0.3991749882698059 } },
    }
    for _, c in ipairs(cases) do
      local o = { lr = 0.1, weight_decay = 0.1, betas = { 0.9, 0.5 } }
      for k, v in pairs(c[1]) do o[k] = v end
      local q = fp8.tensor { 1, -2, 0.5 }:requires_grad(true)
      local opt = optim.Adam({ q }, o)
      for i = 1, 4 do q.grad = fp8.tensor(G[i]); opt:step() end
      local label = next(c[1]) or "L2"
      for j = 1, 3 do
        assert.is_true(math.abs(q:tolist()[j] - c[2][j]) < 1e-6, label .. " p " .. j .. ": " .. q:tolist()[j])
        if c[3] then
          local m = opt.state[q].exp_avg:tolist()[j]
          assert.is_true(math.abs(m - c[3][j]) < 1e-6, label .. " m " .. j .. ": " .. m)
        end
      end
      assert.is_false(q.grad:requires_grad())   -- the decay's sum recorded no graph
    end
    -- torch's defaults (weight_decay 0, where AdamW's is 1e-2)
    local d = optim.Adam({ fp8.zeros { 2 } }).param_groups[1]
    assert.are.same({ 1e-3, 0.9, 0.999, 1e-8, 0, false, false, false },
      { d.lr, d.betas[1], d.betas[2], d.eps, d.weight_decay, d.amsgrad, d.maximize, d.decoupled_weight_decay })
    U.fails_with({ "Adam: decoupled_weight_decay must be a boolean, got string" },
      function() optim.Adam({ fp8.zeros { 2 } }, { decoupled_weight_decay = "yes" }) end)
    U.fails_with({ "Adam", "unknown option 'momentum'" }, function() optim.Adam({ fp8.zeros { 2 } }, { momentum = 0.9 }) end)
    -- state_dict: a copy continues as the original does (amsgrad's maximum and the L2 decay included)
    local a = fp8.tensor { 1, -2, 0.5 }:requires_grad(true)
    local oa = optim.Adam({ a }, { lr = 0.1, weight_decay = 0.1, amsgrad = true })
    for i = 1, 2 do a.grad = fp8.tensor(G[i]); oa:step() end
    local b = fp8.tensor(a:tolist()):requires_grad(true)
    local ob = optim.Adam({ b }, { lr = 0.5 })
    ob:load_state_dict(oa:state_dict())
    for i = 3, 4 do a.grad = fp8.tensor(G[i]); b.grad = fp8.tensor(G[i]); oa:step(); ob:step() end
    assert.are.same(a:tolist(), b:tolist())
  end)

  it("MS-AMP takes an Adam where its step is AdamW's (no decay, or decoupled), and refuses its L2 decay", function()
    local function prep(o)
      local m = fp8.nn.Linear(32, 32)
      local acc = fp8.Accelerator { mixed_precision = "fp8",
        kwargs_handlers = { fp8.MSAMPRecipeKwargs { opt_level = "O3" } } }
      local _, popt = acc:prepare(m, optim.Adam(m:parameters(), o))
      return popt.optimizer
    end
    assert.are.equal("MSAMPAdamW", prep({}).name)
    local o = prep({ weight_decay = 0.01, decoupled_weight_decay = true })
    assert.are.equal("MSAMPAdamW", o.name)
    assert.are.equal(0.01, o.param_groups[1].weight_decay)
    U.fails_with({ "MS-AMP O3 replaces the optimizer by MSAMPAdamW", "parameter group 1: 0.01",
        "decoupled_weight_decay=true or weight_decay=0" },
      function() prep({ weight_decay = 0.01 }) end)
  end)

  it("rejects bad options with clear messages", function()
    local cases = {
      { function() optim.SGD({ p() }, { lr = 0.1, nesterov = true }) end, "nesterov momentum requires momentum > 0" },
      { function() optim.SGD({ p() }, { lr = 0.1, momentum = 0.9, dampening = 0.1, nesterov = true }) end,
        "dampening = 0" },
      { function() optim.SGD({ p() }, { lr = -1 }) end, "lr must be a finite number >= 0" },
      { function() optim.AdamW({ p() }, { betas = { 0.9, 1.0 } }) end, "betas[2] must be in [0, 1)" },
      { function() optim.AdamW({ p() }, { lr = 0.1, momentum = 0.9 }) end, "unknown option 'momentum'" },
      { function() optim.AdamW({ 1, 2 }) end, "must be a tensor" },
      { function() optim.AdamW({}) end, "no parameters" },
      { function() optim.AdamW({ p() }, { amsgrad = "false" }) end, "amsgrad must be a boolean, got string" },
      { function() optim.SGD({ p() }, { lr = 1, maximize = 0 }) end, "maximize must be a boolean, got number" },
      { function() optim.AdamW({ { params = { p() }, weight_decy = 1 } }) end,
        "unknown option 'weight_decy' in parameter group (did you mean 'weight_decay'?)" },
      { function() optim.AdamW({ { params = { p() }, initial_lr = "x" } }) end,
        "initial_lr in a parameter group must be a finite number >= 0, got x" },
    }
    for _, c in ipairs(cases) do
      local ok, err = pcall(c[1])
      assert.is_false(ok)
      assert.truthy(tostring(err):find(c[2], 1, true), tostring(err))
    end
  end)

  it("refuses a parameter given twice (it would be stepped twice), as torch does", function()
    local x = p()
    for _, make in ipairs {
      function() return optim.SGD({ { params = { x } }, { params = { x } } }, { lr = 1 }) end,
      function() return optim.SGD({ x, x }, { lr = 1 }) end,
      function() local o = optim.SGD({ x }, { lr = 1 }); return o:add_param_group { params = { x } } end,
    } do
      local ok, err = pcall(make)
      assert.is_false(ok)
      assert.truthy(tostring(err):find("is already in the optimizer", 1, true), tostring(err))
    end
  end)

  it("refuses a parameter of a dtype its step does not update when it is added, not at the first step", function()
    local b16 = fp8.zeros({ 2 }, "bf16"):requires_grad(true)
    for _, c in ipairs {
      { function() return optim.SGD({ b16 }, { lr = 1 }) end, "SGD: group 1 params[1] is bf16; SGD updates fp32 parameters" },
      { function() return optim.AdamW({ p(), b16 }) end, "AdamW: group 1 params[2] is bf16; AdamW updates fp32 parameters" },
      { function() local o = optim.AdamW({ p() }); return o:add_param_group { params = { b16 } } end,
        "AdamW: params[1] is bf16" },
      { function() return require("fp8.optim.msamp_adamw").new({ b16 }) end, "MSAMPAdamW: group 1 params[1] is bf16; MSAMPAdamW updates fp16 or fp32 parameters" },
    } do
      local ok, err = pcall(c[1])
      assert.is_false(ok)
      assert.truthy(tostring(err):find(c[2], 1, true), tostring(err))
    end
    -- MS-AMP's optimizer keeps fp16 weights (O2)
    assert.truthy(require("fp8.optim.msamp_adamw").new({ fp8.zeros({ 2 }, "fp16"):requires_grad(true) }))
  end)

  it("steps a parameter that is a transposed view in place, as torch does; an expanded one is refused", function()
    -- torch steps a non-contiguous parameter elementwise; here it was accepted and every step failed (must be
    -- contiguous)
    local MS = require "fp8.optim.msamp_adamw"
    for _, c in ipairs {
      { function(q) return optim.SGD({ q }, { lr = 0.1, momentum = 0.9, weight_decay = 0.1 }) end, "fp32" },
      { function(q) return optim.AdamW({ q }, { lr = 0.1, amsgrad = true }) end, "fp32" },
      { function(q) return MS.new({ q }, { lr = 0.1 }) end, "fp16" },
    } do
      fp8.manual_seed(5)
      local base = fp8.randn { 3, 4 }:to(c[2])
      local a = base:t():requires_grad(true)   -- a leaf that views base
      local b = fp8.tensor(a:tolist()):to(c[2]):requires_grad(true)
      assert.is_false(a:is_contiguous())
      local oa, ob = c[1](a), c[1](b)
      for _ = 1, 3 do
        local g = fp8.randn { 4, 3 }
        a.grad, b.grad = g, g:clone()
        oa:step(); ob:step()
      end
      assert.are.same(b:tolist(), a:tolist(), oa.name)
      assert.are.same(b:tolist(), base:t():tolist(), oa.name)   -- written through the view
    end
    local e = fp8.randn { 1, 3 }:expand { 4, 3 }:requires_grad(true)
    e.grad = fp8.ones { 4, 3 }
    for _, name in ipairs { "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "NAdam", "RAdam", "Adamax", "Adadelta" } do
      -- (six of them stepped it, each memory location keeping the last value written; refused when made now)
      local ok, err = pcall(optim[name], { e }, { lr = 0.1 })
      assert.is_false(ok, name)
      assert.truthy(tostring(err):find(name .. ": group 1 params[1] is an expanded view (more than one of its elements refers "
        .. "to one memory location, dim 1)", 1, true), err)
    end
  end)

  it("gives every group its own copy of a table option (betas)", function()
    local a = optim.AdamW({ { params = { p() } }, { params = { p() } } }, { betas = { 0.9, 0.99 } })
    a.param_groups[1].betas[1] = 0.5
    assert.are.equal(0.9, a.param_groups[2].betas[1])
    local b = optim.AdamW({ p() })
    b.param_groups[1].betas[1] = 0.1
    assert.are.equal(0.9, optim.AdamW.DEFAULTS.betas[1])
    assert.are.equal(0.9, optim.AdamW({ p() }).param_groups[1].betas[1])
  end)

  it("zero_grad(false) zeroes in place; step(closure) runs the closure with grad enabled", function()
    local q = fp8.tensor { 1, 2 }:requires_grad(true)
    local o = optim.SGD({ q }, { lr = 0.1 })
    q.grad = fp8.tensor { 5, 5 }
    o:zero_grad(false)
    assert.are.same({ 0, 0 }, q.grad:totable())
    o:zero_grad()
    assert.is_nil(q.grad)
    local ok, err = pcall(o.zero_grad, o, "x")
    assert.is_false(ok); assert.truthy(err:find("set_to_none must be a boolean, got string", 1, true), err)
    local m = fp8.nn.Linear(2, 1)
    m(fp8.ones { 1, 2 }):sum():backward()
    m:zero_grad(false)
    assert.are.same({ { 0, 0 } }, m.weight.grad:totable())
    local loss = fp8.no_grad(function()
      return o:step(function() o:zero_grad(); local l = (q * q):sum(); l:backward(); return l end)
    end)
    assert.are.equal(5, loss:item())
    assert.is_true(close(q[1], 0.8, 1e-7) and close(q[2], 1.6, 1e-7))
  end)

  it("clip_grad_norm_ scales by min(1, max/(norm+1e-6)) as torch's; error_if_nonfinite raises instead", function()
    local q = fp8.tensor { 1, 2 }:requires_grad(true)
    q.grad = fp8.tensor { 3, 4 }
    assert.are.equal(5, fp8.nn.utils.clip_grad_norm_({ q }, 5))   -- at max_norm: scaled by 5/(5+1e-6)
    assert.is_true(q.grad[1] < 3 and close(q.grad[1], 3, 1e-6))
    q.grad = fp8.tensor { 1, 0 / 0 }
    local ok, err = pcall(fp8.nn.utils.clip_grad_norm_, { q }, 1.0, 2, true)
    assert.is_false(ok); assert.truthy(err:find("is non-finite", 1, true), err)
    assert.are.equal(1, q.grad[1])   -- left alone
    ok, err = pcall(fp8.nn.utils.clip_grad_norm_, { q }, 1.0, 2, false, true)
    assert.is_false(ok); assert.truthy(err:find("foreach= is not supported", 1, true), err)
    fp8.nn.utils.clip_grad_norm_({ q }, 1.0)
    assert.is_true(q.grad[1] ~= q.grad[1], "a NaN norm makes every gradient NaN, as torch's")
  end)

  it("the clipping functions take nil for torch's foreach=None (its default) and refuse any other foreach", function()
    local U = fp8.nn.utils
    local q = fp8.tensor { 1, 2 }:requires_grad(true)
    local function run(name, ...)
      q.grad = fp8.tensor { 3, 4 }
      return pcall(U[name], ...)
    end
    local calls = {
      { "clip_grad_norm_", { { q }, 1.0, 2, false } }, { "get_total_norm", { { fp8.tensor { 3, 4 } }, 2, false } },
      { "clip_grads_with_norm_", { { q }, 1.0, 5.0 } }, { "clip_grad_value_", { { q }, 1.0 } },
    }
    for _, c in ipairs(calls) do
      local name, args = c[1], c[2]
      local n = #args
      local ok, err = run(name, table.unpack(args, 1, n))
      assert.is_true(ok, err)
      local want = q.grad:tolist()
      ok, err = run(name, table.unpack(args, 1, n + 1))   -- the same call with foreach=nil: the same result
      assert.is_true(ok, name .. ": " .. tostring(err))
      if name ~= "get_total_norm" then assert.are.same(want, q.grad:tolist(), name) end
      for _, bad in ipairs { true, false, "yes" } do
        local a = { table.unpack(args, 1, n) }
        a[n + 1] = bad
        ok, err = run(name, table.unpack(a, 1, n + 1))
        assert.is_false(ok, name)
        assert.truthy(err:find(name .. ": takes", 1, true) and err:find("foreach= is not supported", 1, true), err)
      end
    end
  end)

  it("takes a Module's parameters", function()
    local m = fp8.nn.Sequential(fp8.nn.Linear(3, 2), fp8.nn.ReLU(), fp8.nn.Linear(2, 1))
    local opt = optim.SGD(m, { lr = 0.1 })
    assert.are.equal(4, #opt.param_groups[1].params)
    assert.truthy(tostring(opt):find("lr: 0.1", 1, true))
  end)
end)

describe("fp8.optim.lr_scheduler", function()
  local function opt(lr) return optim.SGD({ fp8.zeros { 1 } }, { lr = lr }) end

  it("StepLR decays by gamma every step_size steps", function()
    local o = opt(0.1)
    local s = sched.StepLR(o, { step_size = 3, gamma = 0.5 })
    local seen = { s:get_last_lr()[1] }
    for _ = 1, 7 do s:step(); seen[#seen + 1] = o.param_groups[1].lr end
    local want = { 0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025 }
    for i = 1, #want do assert.is_true(close(seen[i], want[i], 1e-12), ("step %d: %g vs %g"):format(i - 1, seen[i], want[i])) end
  end)

  it("warmup_cosine ramps linearly, then follows the cosine down to min_lr", function()
    local o = opt(1.0)
    local s = sched.warmup_cosine(o, { warmup_steps = 4, total_steps = 12, min_lr = 0.1 })
    local lrs = { s:get_last_lr()[1] }
    for _ = 1, 14 do s:step(); lrs[#lrs + 1] = s:get_last_lr()[1] end
    local function want(t)
      if t < 4 then return (t + 1) / 4 end
      local pr = math.min(1, (t - 4) / 8)
      return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * pr))
    end
    for t = 0, 14 do assert.is_true(close(lrs[t + 1], want(t), 1e-12), ("t=%d: %g vs %g"):format(t, lrs[t + 1], want(t))) end
    assert.is_true(close(lrs[5], 1.0, 1e-12))   -- t = 4: peak
    assert.is_true(close(lrs[9], 0.55, 1e-12))  -- t = 8: halfway, (1 + 0.1) / 2
    assert.is_true(close(lrs[13], 0.1, 1e-12))  -- t = 12: min_lr, and it stays there
    assert.is_true(close(lrs[15], 0.1, 1e-12))
  end)

  it("CosineAnnealingLR and LambdaLR follow their formulas, per group", function()
    local o = optim.SGD({ { params = { fp8.zeros { 1 } }, lr = 1.0 }, { params = { fp8.zeros { 1 } }, lr = 0.5 } }, { lr = 1 })
    local s = sched.CosineAnnealingLR(o, { T_max = 10, eta_min = 0.0 })
    for _ = 1, 5 do s:step() end
    local l = s:get_last_lr()
    assert.is_true(close(l[1], 0.5, 1e-12) and close(l[2], 0.25, 1e-12))
    local o2 = opt(0.2)
    local s2 = sched.LambdaLR(o2, function(e) return 1 / (e + 1) end)
    s2:step(); s2:step()
    assert.is_true(close(o2.param_groups[1].lr, 0.2 / 3, 1e-12))
  end)

  it("a group added later joins the schedule with its own lr; a bad value from a schedule is refused", function()
    local o = opt(0.1)
    local s = sched.StepLR(o, { step_size = 1, gamma = 0.5 })
    o:add_param_group { params = { fp8.zeros { 1 } }, lr = 0.01 }
    s:step()
    assert.is_true(close(o.param_groups[1].lr, 0.05, 1e-15) and close(o.param_groups[2].lr, 0.005, 1e-15))
    local o2 = opt(0.1)
    local l = sched.LambdaLR(o2, { function() return 1 end })
    o2:add_param_group { params = { fp8.zeros { 1 } }, lr = 0.01 }
    local ok, err = pcall(l.step, l)
    assert.is_false(ok); assert.truthy(err:find("2 parameter groups, lr_lambda 1 functions", 1, true), err)
    assert.are.equal(0, l.last_epoch)
    -- a group added by the lr_lambda itself, during the step: it keeps its lr (torch's zip), and joins at the next
    -- step (before 2026-12-01 its lr became nil, and opt:step() failed with "sgd_step: lr must be a number, got nil")
    local o3 = opt(0.1)
    local s3 = sched.LambdaLR(o3, function(e)
      if e == 1 then o3:add_param_group { params = { fp8.zeros { 1 } }, lr = 0.5 } end
      return 1 / (e + 1)
    end)
    s3:step()
    assert.are.equal(0.5, o3.param_groups[2].lr)
    assert.is_true(close(o3.param_groups[1].lr, 0.05, 1e-15))
    s3:step()
    assert.is_true(close(o3.param_groups[2].lr, 0.5 / 3, 1e-15) and close(o3.param_groups[1].lr, 0.1 / 3, 1e-15))
    ok, err = pcall(sched.LambdaLR, opt(1), function() return nil end)
    assert.is_false(ok); assert.truthy(err:find("lr_lambda returned nil at step 0", 1, true), err)
    for _, c in ipairs { { sched.StepLR, { step_size = 1, gamma = 0 / 0 }, "gamma must be a finite number >= 0" },
                         { sched.CosineAnnealingLR, { T_max = 1, eta_min = "0.1" }, 'eta_min must be a finite number >= 0, got string "0.1"' },
                         { sched.warmup_cosine, { total_steps = 2, min_lr = 1 / 0 }, "min_lr must be a finite number >= 0" } } do
      ok, err = pcall(c[1], opt(1), c[2])
      assert.is_false(ok); assert.truthy(err:find(c[3], 1, true), err)
    end
  end)

  it("MultiStepLR, ExponentialLR, LinearLR and transformers' warmup schedules give torch's lrs", function()
    -- the lrs torch 2.x's schedulers (and LambdaLR over transformers' lambdas) give at steps 0, 1, ... from lr 0.1
    for _, c in ipairs {
      { function(o) return sched.MultiStepLR(o, { milestones = { 2, 5, 5 }, gamma = 0.5 }) end,
        { 0.1, 0.1, 0.05, 0.05, 0.05, 0.0125, 0.0125, 0.0125 } },
      { function(o) return sched.ExponentialLR(o, { gamma = 0.9 }) end, { 0.1, 0.09, 0.081, 0.0729, 0.06561 } },
      { function(o) return sched.LinearLR(o) end,
        { 0.03333333333, 0.04666666667, 0.06, 0.07333333333, 0.08666666667, 0.1, 0.1, 0.1 } },
      { function(o) return sched.LinearLR(o, { start_factor = 0.5, end_factor = 0.1, total_iters = 3 }) end,
        { 0.05, 0.03666666667, 0.02333333333, 0.01, 0.01, 0.01 } },
      { function(o) return sched.get_linear_schedule_with_warmup(o, 3, 10) end,
        { 0, 0.03333333333, 0.06666666667, 0.1, 0.08571428571, 0.07142857143, 0.05714285714, 0.04285714286,
          0.02857142857, 0.01428571429, 0, 0 } },
      { function(o) return sched.get_cosine_schedule_with_warmup(o, 3, 10) end,
        { 0, 0.03333333333, 0.06666666667, 0.1, 0.0950484434, 0.08117449009, 0.0611260467, 0.0388739533,
          0.01882550991, 0.004951556605, 0, 0.004951556605 } },
      { function(o)
          return sched.get_cosine_schedule_with_warmup(o,
            { num_warmup_steps = 2, num_training_steps = 8, num_cycles = 1.5 })
        end, { 0, 0.05, 0.1, 0.05, 0, 0.05, 0.1, 0.05, 0, 0.05 } },
    } do
      local o = opt(0.1)
      local s = c[1](o)
      for t, want in ipairs(c[2]) do
        local got = s:get_last_lr()[1]
        assert.is_true(math.abs(got - want) <= 1e-11, ("%s step %d: %.12g vs %.12g"):format(s.name, t - 1, got, want))
        assert.are.equal(got, o.param_groups[1].lr)
        o:step(); s:step()
      end
    end
    for _, c in ipairs {
      { sched.MultiStepLR, { milestones = { 2, -1 } }, "milestones[2] must be an integer >= 0, got -1" },
      { sched.MultiStepLR, { gamma = 0.5 }, "milestones must be a list of integers >= 0, got nil" },
      { sched.ExponentialLR, {}, "ExponentialLR: gamma is required" },
      { sched.LinearLR, { start_factor = 0 }, "start_factor must be a number in (0, 1], got 0" },
      { sched.LinearLR, { end_factor = 2 }, "end_factor must be a number in [0, 1], got 2" },
      { sched.LinearLR, { total_iters = 0 }, "total_iters must be an integer >= 1, got 0" },
      { sched.get_linear_schedule_with_warmup, 2.5, "num_warmup_steps must be an integer >= 0, got 2.5", 10 },
      { sched.get_cosine_schedule_with_warmup, { num_warmup_steps = 1, num_training_steps = 4, num_cycles = -1 },
        "num_cycles must be a finite number >= 0, got -1" },
      { sched.get_linear_schedule_with_warmup, { num_warmup_steps = 1, num_training_steps = 4, num_cycles = 1 },
        "unknown option 'num_cycles'" },
    } do
      local ok, err = pcall(c[1], opt(1), c[2], c[4])
      assert.is_false(ok)
      assert.truthy(tostring(err):find(c[3], 1, true), err)
    end
    local ok, err = pcall(sched.get_linear_schedule_with_warmup, opt(1), 1, 2, 3)
    assert.is_false(ok)
    assert.truthy(err:find("takes (opt, num_warmup_steps, num_training_steps); got 1 more argument", 1, true), err)
    -- each refusal points at the caller's line (not a tail call), not into lr_scheduler.lua
    for _, f in ipairs {
      function() local _ = sched.get_linear_schedule_with_warmup(opt(1), -1, 10) end,
      function() local _ = sched.get_cosine_schedule_with_warmup(opt(1), 1, nil) end,
      function()
        local _ = sched.get_linear_schedule_with_warmup(opt(1), { num_warmup_steps = 1, num_training_step = 4 })
      end,
      function() local _ = sched.get_cosine_schedule_with_warmup(nil, 1, 2) end,
    } do
      ok, err = pcall(f)
      assert.is_false(ok)
      assert.truthy(tostring(err):match("^[^:]*optim_spec%.lua:%d+: get_"), err)
    end
  end)

  it("LinearLR down to end_factor=0 ends at 0 (s + (e - s)·r rounded to -1.4e-17 at total_iters, which step refused)",
    function()
      for _, c in ipairs { { 0.1, 3, 0.5 }, { 0.1, 6, 0.03 }, { 1 / 3, 5, 1 } } do
        local o = opt(c[3])
        local s = sched.LinearLR(o, { start_factor = c[1], end_factor = 0, total_iters = c[2] })
        for t = 1, c[2] + 2 do
          o:step(); s:step()
          local want = c[3] * c[1] * (1 - math.min(t, c[2]) / c[2])
          local got = s:get_last_lr()[1]
          assert.is_true(close(got, want, 1e-12), ("t=%d: %.17g vs %.17g"):format(t, got, want))
        end
        assert.are.equal(0, o.param_groups[1].lr)
      end
    end)

  it("rejects bad schedule options", function()
    local ok, err = pcall(sched.warmup_cosine, opt(1), { warmup_steps = 20, total_steps = 10 })
    assert.is_false(ok)
    assert.truthy(err:find("must not exceed total_steps", 1, true), err)
    ok, err = pcall(sched.StepLR, opt(1), { step = 3 })
    assert.is_false(ok)
    assert.truthy(err:find("unknown option 'step'", 1, true), err)
  end)

  it("two schedulers stepping one optimizer are refused (torch multiplies them; here the last would win)", function()
    -- torch 2.x: LinearLR(start 0.1, 3 iters) and CosineAnnealingLR(T_max=10) both stepped compose; here each wrote
    -- its own closed form, so the cosine silently undid the warmup
    local o = opt(0.1)
    local warm = sched.LinearLR(o, { start_factor = 0.1, total_iters = 3 })
    local cos = sched.CosineAnnealingLR(o, { T_max = 10 })
    local ok, err = pcall(warm.step, warm)
    assert.is_false(ok)
    assert.truthy(err:find("LinearLR:step: this optimizer is also stepped by another scheduler (CosineAnnealingLR)", 1,
      true), err)
    assert.are.equal(0, warm.last_epoch)   -- the refused step changed nothing
    cos:step()   -- the one that stepped it last goes on
    -- a scheduler made to replace another (the old one not stepped again) is fine, as is loading into the old one
    local o2 = opt(0.1)
    local old = sched.StepLR(o2, 2)
    old:step()
    local new = sched.StepLR(o2, 3, 0.5)
    for _ = 1, 3 do new:step() end
    assert.is_true(close(0.05, o2.param_groups[1].lr, 1e-15))
    old:load_state_dict(new:state_dict(), false)   -- (another schedule's state: strict=false takes it)
    old:step()
  end)

  -- the lrs of PyTorch 2.x's schedulers and transformers' schedules, step by step (tests/data/lr_schedules_torch.lua,
  -- scripts/gen_lr_schedules.py), against the same cases built here
  local ref = dofile("tests/data/lr_schedules_torch.lua")
  local function sgd(lr, momentum, groups)
    local list = {}
    for i = 1, groups or 1 do list[i] = { params = { fp8.zeros { 1 } } } end
    return optim.SGD(list, { lr = lr, momentum = momentum or 0 })
  end
  local function adamw(lr) return optim.AdamW({ fp8.zeros { 1 } }, { lr = lr }) end
  -- each step's lrs (and momentum or betas[1] with `mom`) against the reference rows; the optimizer is not stepped
  -- (its lr is what the scheduler wrote)
  local function follows(name, o, s, mom, step)
    local rows = ref[name]
    assert.truthy(rows, name)
    for t, row in ipairs(rows) do
      local got = {}
      for i, g in ipairs(o.param_groups) do got[i] = g.lr end
      if mom then
        for _, g in ipairs(o.param_groups) do got[#got + 1] = g.betas and g.betas[1] or g.momentum end
      end
      assert.are.equal(#row, #got, name)
      for k = 1, #row do
        assert.is_true(close(got[k], row[k], 1e-12), ("%s step %d value %d: %.17g vs %.17g"):format(name, t - 1, k,
          got[k], row[k]))
      end
      if t < #rows then (step or function() s:step() end)(t) end
    end
  end

  it("torch's positional forms of CosineAnnealingLR, MultiStepLR and LinearLR give torch's lrs", function()
    local o = sgd(0.1)
    follows("cos_pos", o, sched.CosineAnnealingLR(o, 10))
    o = sgd(0.1)
    follows("cos_pos_eta", o, sched.CosineAnnealingLR(o, 4, 0.01))
    o = sgd(0.1)
    follows("multistep_pos", o, sched.MultiStepLR(o, { 2, 5, 5 }, 0.5))
    o = sgd(0.1)
    follows("linear_pos", o, sched.LinearLR(o, 0.5, 0.1, 3))
    o = sgd(0.1)   -- the table forms are what they were
    follows("multistep_pos", o, sched.MultiStepLR(o, { milestones = { 2, 5, 5 }, gamma = 0.5 }))
  end)

  it("ConstantLR, PolynomialLR and CosineAnnealingWarmRestarts give torch's lrs", function()
    for _, c in ipairs {
      { "constant_default", function(o) return sched.ConstantLR(o) end },
      { "constant_pos", function(o) return sched.ConstantLR(o, 0.5, 3) end },
      { "constant_pos", function(o) return sched.ConstantLR(o, { factor = 0.5, total_iters = 3 }) end },
      { "poly_default", function(o) return sched.PolynomialLR(o) end },
      { "poly_pos", function(o) return sched.PolynomialLR(o, 4, 2.0) end },
      { "poly_pos", function(o) return sched.PolynomialLR(o, { total_iters = 4, power = 2 }) end },
      { "wr_3", function(o) return sched.CosineAnnealingWarmRestarts(o, 3) end },
      { "wr_2_2", function(o) return sched.CosineAnnealingWarmRestarts(o, 2, 2, 0.01) end },
      { "wr_1_3", function(o) return sched.CosineAnnealingWarmRestarts(o, { T_0 = 1, T_mult = 3 }) end },
    } do
      local o = sgd(0.1)
      follows(c[1], o, c[2](o))
    end
    -- torch's step(epoch + i / iters) within an epoch, then plain steps going on from the last position
    local o = sgd(0.1)
    local s = sched.CosineAnnealingWarmRestarts(o, 2, 2)
    local seen = {}
    for e = 0, 2 do
      for i = 0, 3 do s:step(e + i / 4); seen[#seen + 1] = { o.param_groups[1].lr } end
    end
    s:step(); seen[#seen + 1] = { o.param_groups[1].lr }
    s:step(); seen[#seen + 1] = { o.param_groups[1].lr }
    assert.are.equal(#ref.wr_frac, #seen)
    for t, row in ipairs(ref.wr_frac) do
      assert.is_true(close(seen[t][1], row[1], 1e-12), ("wr_frac %d: %.17g vs %.17g"):format(t, seen[t][1], row[1]))
    end
    assert.are.equal(4, s.last_epoch)   -- torch's: floor(2.75), then one more a step
    -- its position survives state_dict / load_state_dict (a checkpoint), and only a fractional schedule has one
    local sd = s:state_dict()
    assert.are.equal(4.75, sd.position)
    local o2 = sgd(0.1)
    local s2 = sched.CosineAnnealingWarmRestarts(o2, 2, 2)
    s2:load_state_dict(sd)
    assert.are.equal(o.param_groups[1].lr, o2.param_groups[1].lr)
    s:step(); s2:step()
    assert.are.equal(o.param_groups[1].lr, o2.param_groups[1].lr)
    local ok, err = pcall(function()
      local st = sched.StepLR(sgd(1), 2)
      st:load_state_dict({ last_epoch = 2, base_lrs = { 1 }, position = 2.5 })
    end)
    assert.is_false(ok)
    assert.truthy(err:find("position must be absent (this schedule steps in whole steps), got 2.5", 1, true), err)
    ok, err = pcall(function() local st = sched.StepLR(sgd(1), 2); st:step(1.5) end)
    assert.is_false(ok)
    assert.truthy(err:find("epoch must be an integer >= 0, got 1.5", 1, true), err)
  end)

  it("CyclicLR gives torch's lrs and momentum: triangular, triangular2, exp_range, a scale_fn; refuses by name",
    function()
      local o = sgd(0.5, 0.9)
      follows("cyclic_tri", o, sched.CyclicLR(o, 0.01, 0.1, 3), true)
      o = sgd(0.5)
      follows("cyclic_tri2", o, sched.CyclicLR(o, { base_lr = 0.01, max_lr = 0.1, step_size_up = 2, step_size_down = 3,
        mode = "triangular2", cycle_momentum = false }))
      o = optim.AdamW({ { params = { fp8.zeros { 1 } } }, { params = { fp8.zeros { 1 } } } }, { lr = 0.5 })
      follows("cyclic_exp", o, sched.CyclicLR(o, { base_lr = { 0.01, 0.02 }, max_lr = { 0.1, 0.3 }, step_size_up = 2,
        mode = "exp_range", gamma = 0.9, base_momentum = 0.7, max_momentum = 0.95 }), true)
      o = sgd(0.5)
      follows("cyclic_fn", o, sched.CyclicLR(o, { base_lr = 0.01, max_lr = 0.1, step_size_up = 2,
        scale_fn = function(x) return 1 / (1 + x) end, scale_mode = "iterations", cycle_momentum = false }))
      for _, c in ipairs {
        { { max_lr = 0.1 }, "CyclicLR: base_lr is required" },
        { { base_lr = 0.1, max_lr = 0.2, mode = "sine" }, 'mode must be "triangular", "triangular2" or "exp_range"' },
        { { base_lr = 0.1, max_lr = 0.2, scale_mode = "iterations" }, "scale_mode goes with scale_fn" },
        { { base_lr = 0.1, max_lr = 0.2, step_size_up = -1 }, "step_size_up must be a finite number >= 0, got -1" },
        { { base_lr = 0.1, max_lr = 0.2, step_size_up = 0 }, "step_size_up + step_size_down must be > 0" },
        { { base_lr = { 0.1, 0.2 }, max_lr = 0.2 }, "base_lr must be a number or a list of 1 (one per parameter group)" },
        { { base_lr = 0.1, max_lr = 0.2, scale_fn = function() return "x" end },
          'CyclicLR: scale_fn must return a number, got "x"' },
        { { base_lr = 0.1, max_lr = 0.2, step_sise_up = 3 }, "unknown option 'step_sise_up'" },
        -- what torch drops unseen is refused (its defaults, which its positional order makes a call pass, are taken)
        { { base_lr = 0.1, max_lr = 0.2, scale_fn = function() return 1 end, mode = "exp_range" },
          'CyclicLR: mode is not used with scale_fn (the function gives the scale), got "exp_range"' },
        { { base_lr = 0.1, max_lr = 0.2, scale_fn = function() return 1 end, gamma = 0.5 },
          "CyclicLR: gamma is not used with scale_fn" },
        { { base_lr = 0.1, max_lr = 0.2, gamma = 0.5 },
          'CyclicLR: gamma takes effect only with mode="exp_range", got 0.5 with mode="triangular"' },
        { { base_lr = 0.1, max_lr = 0.2, cycle_momentum = false, max_momentum = 0.95 },
          "CyclicLR: max_momentum takes effect only with cycle_momentum=true, got 0.95" },
      } do
        local ok, err = pcall(sched.CyclicLR, sgd(0.1, 0.9), c[1])
        assert.is_false(ok)
        assert.truthy(tostring(err):find(c[2], 1, true), err)
      end
      -- an optimizer with neither momentum nor betas (SGD has momentum, 0 by default, which torch cycles too)
      local Plain = optim.Optimizer.class()
      function Plain.new(params) return optim.Optimizer.new(Plain, "Plain", { lr = 0.1 }, params, {}) end
      local ok, err = pcall(sched.CyclicLR, Plain.new({ fp8.zeros { 1 } }), 0.01, 0.1)
      assert.is_false(ok)
      assert.truthy(err:find("cycle_momentum=true needs an optimizer with momentum or betas", 1, true), err)
      -- a checkpoint round trip: the copy continues as the original
      local a, b = sgd(0.5, 0.9), sgd(0.5, 0.9)
      local sa, sb = sched.CyclicLR(a, 0.01, 0.1, 3), sched.CyclicLR(b, 0.01, 0.1, 3)
      for _ = 1, 4 do sa:step() end
      sb:load_state_dict(sa:state_dict())
      sa:step(); sb:step()
      assert.are.same({ a.param_groups[1].lr, a.param_groups[1].momentum }, { b.param_groups[1].lr, b.param_groups[1].momentum })
    end)

  it("OneCycleLR gives torch's lrs and momentum (SGD's momentum, AdamW's betas[1]) and refuses a step past the end",
    function()
      local o = sgd(0.1, 0.9)
      local s = sched.OneCycleLR(o, 0.1, 10)
      local ok, err
      follows("onecycle_sgd", o, s, true)
      -- torch: ValueError "Tried to step 11 times. The specified number of total steps is 10"; the groups keep step
      -- 10's values
      local lr = o.param_groups[1].lr
      ok, err = pcall(s.step, s)
      assert.is_false(ok)
      assert.truthy(err:find("OneCycleLR: tried to step 11 times; the specified number of total steps is 10", 1, true),
        err)
      assert.are.equal(lr, o.param_groups[1].lr)
      assert.are.equal(10, s.last_epoch)
      o = adamw(0.1)
      s = sched.OneCycleLR(o, { max_lr = 0.05, total_steps = 12, anneal_strategy = "linear", pct_start = 0.25 })
      follows("onecycle_adam_lin", o, s, true)
      assert.are.equal(0.999, o.param_groups[1].betas[2])   -- betas[2] untouched
      -- step total_steps itself is allowed, past the last phase's end (a loop's last sched:step(), whose lr no step
      -- uses): torch's line goes on below 0 there (it sets the lr -0.0055553), which failed that last call here; the
      -- final lr is held
      s:step()
      assert.are.equal(12, s.last_epoch)
      assert.is_true(math.abs(o.param_groups[1].lr - 0.05 / 25 / 1e4) < 1e-15, tostring(o.param_groups[1].lr))
      ok, err = pcall(s.step, s)
      assert.is_false(ok)
      assert.truthy(err:find("OneCycleLR: tried to step 13 times", 1, true), err)
      o = sgd(0.1, 0.9, 2)
      follows("onecycle_three", o, sched.OneCycleLR(o, { max_lr = { 0.1, 0.2 }, epochs = 2, steps_per_epoch = 5,
        three_phase = true, div_factor = 10, final_div_factor = 100 }), true)
      -- pct_start = 0: the first phase ends before step 0 and is never reached; torch's runs it (the lr starts falling)
      o = sgd(0.1, 0.9)
      follows("onecycle_pct0", o, sched.OneCycleLR(o, { max_lr = 1, total_steps = 10, pct_start = 0 }), true)
      o = sgd(0.1)
      follows("onecycle_nomom", o, sched.OneCycleLR(o, { max_lr = 0.1, total_steps = 8, cycle_momentum = false }))
      assert.are.equal(0, o.param_groups[1].momentum)
      for _, c in ipairs {
        { { total_steps = 10 }, "OneCycleLR: max_lr is required" },
        { { max_lr = 0.1 }, "OneCycleLR: give total_steps, or epochs and steps_per_epoch" },
        { { max_lr = 0.1, total_steps = 0 }, "total_steps must be an integer >= 1, got 0" },
        { { max_lr = { 0.1, 0.2 }, total_steps = 4 },
          "max_lr must be a number or a list of 1 (one per parameter group)" },
        { { max_lr = 0.1, total_steps = 4, pct_start = 1.5 }, "pct_start must be a number in [0, 1], got 1.5" },
        { { max_lr = 0.1, total_steps = 4, anneal_strategy = "exp" }, 'anneal_strategy must be "cos" or "linear"' },
        { { max_lr = 0.1, total_steps = 4, max_momentum = 2 }, "max_momentum must be a number in [0, 1], got 2" },
        { { max_lr = 0.1, total_steps = 4, div_factor = 0 }, "div_factor must be a finite number > 0, got 0" },
        { { max_lr = 0.1, total_steps = 4, three_phase = 1 }, "three_phase must be a boolean, got 1" },
        { { max_lr = 0.1, total_steps = 4, warmup = 1 }, "unknown option 'warmup'" },
        -- what torch drops unseen is refused
        { { max_lr = 0.1, total_steps = 4, epochs = 2 },
          "OneCycleLR: give total_steps, or epochs and steps_per_epoch, not both" },
        { { max_lr = 0.1, total_steps = 4, cycle_momentum = false, base_momentum = "x" },
          'OneCycleLR: base_momentum takes effect only with cycle_momentum=true, got "x"' },
        -- a phase a step reaches that ends where it starts (torch's ZeroDivisionError, at step 0 or total_steps)
        { { max_lr = 1, total_steps = 10, pct_start = 0.1 }, "OneCycleLR: pct_start=0.1 and total_steps=10 leave "
          .. "phase 1 of 2 no steps: it ends at step pct_start · total_steps − 1 = 0, where it starts (step 0), and "
          .. "torch's divides by zero there; pct_start · total_steps must not be 1" },
        { { max_lr = 1, total_steps = 4, pct_start = 0.25, three_phase = true }, "leave phase 1 of 3 no steps" },
        { { max_lr = 1, total_steps = 10, pct_start = 1 }, "phase 2 of 2 no steps: it ends at step total_steps − 1 = "
          .. "9, where it starts (pct_start · total_steps − 1), and torch's divides by zero there; pct_start must be "
          .. "below 1" },
        { { max_lr = 1, total_steps = 10, pct_start = 0.55, three_phase = true }, "phase 3 of 3 no steps: it ends at "
          .. "step total_steps − 1 = 9, where it starts (2 · pct_start · total_steps − 2), and torch's divides by zero "
          .. "there; 2 · pct_start · total_steps − 2 must be below total_steps − 1" },
      } do
        ok, err = pcall(sched.OneCycleLR, sgd(1), c[1])
        assert.is_false(ok, c[2])
        assert.truthy(tostring(err):find(c[2], 1, true), err)
      end
      -- an optimizer without momentum or betas: cycle_momentum is refused by name (torch's ValueError)
      local Plain = optim.Optimizer.class()
      local plain = optim.Optimizer.new(Plain, "Plain", { lr = 0.1 }, { fp8.zeros { 1 } })
      ok, err = pcall(sched.OneCycleLR, plain, 0.1, 4)
      assert.is_false(ok)
      assert.truthy(err:find("cycle_momentum=true needs an optimizer with momentum or betas (Plain has neither)", 1,
        true), err)
      assert.truthy(sched.OneCycleLR(plain, { max_lr = 0.1, total_steps = 4, cycle_momentum = false }))
    end)

  it("MultiplicativeLR and ChainedScheduler give torch's lrs; ChainedScheduler refuses what torch's chain orders",
    function()
    local o = sgd(0.1)
    follows("mult", o, sched.MultiplicativeLR(o, function() return 0.95 end))
    o = sgd(0.1, 0, 2)
    local calls = 0
    follows("mult_groups", o, sched.MultiplicativeLR(o, { function() calls = calls + 1; return 0.9 end,
      function(k) return 1 - 0.05 * k end }))
    assert.are.equal(7, calls)   -- once a step, as torch's
    o = sgd(0.1)
    local a, b = sched.ConstantLR(o, 0.5, 3), sched.ExponentialLR(o, 0.9)
    local ch = sched.ChainedScheduler({ a, b })
    follows("chain_const_exp", o, ch)
    o = sgd(0.1, 0, 2)
    local l1, s1, m1 = sched.LinearLR(o, 0.2, 1.0, 4), sched.StepLR(o, 3, 0.5),
      sched.MultiplicativeLR(o, function() return 0.98 end)
    follows("chain_lin_step_mult", o, sched.ChainedScheduler { schedulers = { l1, s1, m1 }, optimizer = o })
    o = sgd(0.1)
    local ms, p = sched.MultiStepLR(o, { 2, 4 }, 0.5), sched.PolynomialLR(o, 6, 2.0)
    local c3 = sched.ChainedScheduler({ ms, p }, o)
    follows("chain_multistep_poly", o, c3)
    -- a member stepping the optimizer itself is refused; the state comes back through load_state_dict
    U.fails_with("also stepped by another scheduler (ChainedScheduler)", ms.step, ms)
    local o2 = sgd(0.1)
    local c4 = sched.ChainedScheduler({ sched.MultiStepLR(o2, { 2, 4 }, 0.5), sched.PolynomialLR(o2, 6, 2.0) })
    c4:load_state_dict(c3:state_dict())
    assert.are.equal(o.param_groups[1].lr, o2.param_groups[1].lr)
    -- refusals
    local q = sgd(0.1)
    U.fails_with("schedulers[2] is a CosineAnnealingLR, which sets the lr from the base", sched.ChainedScheduler,
      { sched.StepLR(q, 2), sched.CosineAnnealingLR(q, 4) })
    U.fails_with("schedulers[1] is a LambdaLR", sched.ChainedScheduler, { sched.LambdaLR(q, function() return 1 end) })
    U.fails_with("schedulers[2] (StepLR) belongs to another optimizer", sched.ChainedScheduler,
      { sched.StepLR(q, 2), sched.StepLR(sgd(0.1), 2) })
    U.fails_with("schedulers[1] (StepLR) belongs to another optimizer", sched.ChainedScheduler, { sched.StepLR(q, 2) },
      sgd(0.1))
    U.fails_with("schedulers must be a non-empty list of schedulers", sched.ChainedScheduler, {})
    U.fails_with("MultiplicativeLR: lr_lambda must be a function or a list of 1 functions, got 5",
      sched.MultiplicativeLR, q, 5)
    local bad = sched.MultiplicativeLR(sgd(0.1), function() return "x" end)
    U.fails_with('MultiplicativeLR: lr_lambda returned "x" (a string) at step 1 (expected a number)', bad.step, bad)
  end)

  it("SequentialLR runs each scheduler from its own step 0 at its milestone, as torch's", function()
    local o = sgd(0.1)
    local a, b = sched.LinearLR(o, 0.1, nil, 3), sched.ExponentialLR(o, 0.9)
    local s = sched.SequentialLR(o, { a, b }, { 3 })
    follows("seq2", o, s)
    o = sgd(0.1)
    local c1, c2, c3 = sched.ConstantLR(o, 0.5, 2), sched.CosineAnnealingLR(o, 4), sched.StepLR(o, 2, 0.5)
    s = sched.SequentialLR(o, { schedulers = { c1, c2, c3 }, milestones = { 2, 6 } })
    follows("seq3", o, s)
    -- a member stepping the optimizer itself is refused as any second scheduler; state_dict / load_state_dict
    local ok, err = pcall(c2.step, c2)
    assert.is_false(ok)
    assert.truthy(err:find("also stepped by another scheduler (SequentialLR)", 1, true), err)
    local o2 = sgd(0.1)
    local d1, d2, d3 = sched.ConstantLR(o2, 0.5, 2), sched.CosineAnnealingLR(o2, 4), sched.StepLR(o2, 2, 0.5)
    local s2 = sched.SequentialLR(o2, { d1, d2, d3 }, { 2, 6 })
    s2:load_state_dict(s:state_dict())
    assert.are.equal(o.param_groups[1].lr, o2.param_groups[1].lr)
    -- refusals
    local other = sgd(0.1)
    for _, c in ipairs {
      { function(q) return { sched.StepLR(q, 2) }, { 1 } end, "milestones must be a list of 0 integers" },
      { function(q) return { sched.StepLR(q, 2), sched.StepLR(q, 3) }, { -1 } end,
        "milestones[1] must be an integer >= 0" },
      { function(q) return { sched.StepLR(q, 2), sched.StepLR(q, 3), sched.StepLR(q, 4) }, { 5, 2 } end,
        "milestones[2] must be an integer >= 5, got 2" },
      { function(q) return { sched.StepLR(q, 2), sched.StepLR(other, 3) }, { 2 } end,
        "schedulers[2] (StepLR) belongs to another optimizer" },
      { function(q) return { sched.StepLR(q, 2), 5 }, { 2 } end, "schedulers[2] must be a scheduler" },
      { function() return {}, {} end, "schedulers must be a non-empty list of schedulers" },
    } do
      local q = sgd(0.1)
      local list, ms = c[1](q)
      ok, err = pcall(sched.SequentialLR, q, list, ms)
      assert.is_false(ok, c[2])
      assert.truthy(tostring(err):find(c[2], 1, true), err)
    end
  end)

  it("SequentialLR runs a MultiplicativeLR past a milestone on from the lr before it, as torch's", function()
    local o = sgd(0.1)
    follows("seq_mult", o, sched.SequentialLR(o, { sched.ExponentialLR(o, 0.8),
      sched.MultiplicativeLR(o, function() return 0.95 end) }, { 3 }))
    o = sgd(0.1)
    follows("seq_mult_ms0", o, sched.SequentialLR(o, { sched.ExponentialLR(o, 0.5),
      sched.MultiplicativeLR(o, function(k) return 0.9 + 0.01 * k end) }, { 0 }))
    o = sgd(0.1)
    follows("seq_mult_dup", o, sched.SequentialLR(o, { sched.ExponentialLR(o, 0.8), sched.StepLR(o, 1, 0.1),
      sched.MultiplicativeLR(o, function(k) return 0.9 + 0.01 * k end) }, { 3, 3 }))
    o = sgd(0.1)
    follows("seq_mult_mult", o, sched.SequentialLR(o, { sched.MultiplicativeLR(o, function() return 0.9 end),
      sched.MultiplicativeLR(o, function(k) return 0.5 + 0.1 * k end) }, { 2 }))
    -- two groups of their own lrs, one function each; fn runs once a step (fn(0) once, at the milestone); a state
    -- taken mid-run goes on in a scheduler built the same way
    local calls = 0
    local function two()
      local q = optim.SGD({ { params = { fp8.zeros { 1 } } }, { params = { fp8.zeros { 1 } }, lr = 0.3 } }, { lr = 0.1 })
      return q, sched.SequentialLR(q, { sched.StepLR(q, 2, 0.5), sched.MultiplicativeLR(q, {
        function() calls = calls + 1; return 0.9 end, function(k) return 1 - 0.05 * k end }) }, { 3 })
    end
    local q, s = two()
    local rows = ref.seq_mult_groups
    local function check(o2, t)
      for i = 1, 2 do
        assert.is_true(close(o2.param_groups[i].lr, rows[t + 1][i], 1e-12), ("seq_mult_groups step %d group %d: "
          .. "%.17g vs %.17g"):format(t, i, o2.param_groups[i].lr, rows[t + 1][i]))
      end
    end
    for t = 0, 5 do check(q, t); if t < 5 then s:step() end end
    assert.are.equal(3, calls)   -- fn(0), fn(1), fn(2)
    local q2, s2 = two()
    -- (the optimizer's state first, as torch's resume and Accelerator.load_state do: since stop 99 the
    -- MultiplicativeLR goes on from the groups' lr, as torch's, where it multiplied its lambdas again from step 1)
    q2:load_state_dict(q:state_dict())
    s2:load_state_dict(s:state_dict())
    for t = 5, #rows - 1 do check(q2, t); check(q, t); if t < #rows - 1 then s:step(); s2:step() end end
  end)

  it("SequentialLR starts its first scheduler on the initial_lr the constructors left, as torch's", function()
    -- OneCycleLR's constructor makes every group's initial_lr max_lr/div_factor; the ConstantLR before it scales that
    local o = sgd(0.1, 0.9)
    follows("seq_const_onecycle", o, sched.SequentialLR(o, { sched.ConstantLR(o, 0.5, 3), sched.OneCycleLR(o, 0.5, 45) },
      { 5 }))
    o = sgd(0.1, 0.9)
    follows("seq_lin_onecycle_lambda", o, sched.SequentialLR(o, { sched.LinearLR(o, 0.5, 1.0, 2),
      sched.OneCycleLR(o, 0.5, 20), sched.LambdaLR(o, function(k) return 0.9 ^ k end) }, { 3, 6 }))
    -- a CosineAnnealingLR first descends from that lr, and rises on its own base
    o = sgd(0.1, 0.9)
    follows("seq_cos_onecycle", o, sched.SequentialLR(o, { sched.CosineAnnealingLR(o, 3, 0.001),
      sched.OneCycleLR(o, 0.5, 20) }, { 9 }))
    -- CyclicLR leaves an initial_lr already there (torch's setdefault)
    o = sgd(0.1, 0.9)
    follows("seq_exp_cyclic", o, sched.SequentialLR(o, { sched.ExponentialLR(o, 0.9),
      sched.CyclicLR(o, 0.01, 0.1, 2) }, { 3 }))
    assert.are.equal(0.1, o.param_groups[1].initial_lr)
  end)

  it("ConstantLR with total_iters = 0 keeps the factor, as torch's step(); not past a SequentialLR milestone", function()
    local o = sgd(0.1)
    follows("constant_zero", o, sched.ConstantLR(o, 0.4, 0))
    o = sgd(0.1)
    follows("seq_const0_first", o, sched.SequentialLR(o, { sched.ConstantLR(o, 0.4, 0), sched.ExponentialLR(o, 0.9) },
      { 3 }))
    o = sgd(0.1)
    follows("seq_const0_after", o, sched.SequentialLR(o, { sched.ExponentialLR(o, 0.9), sched.ConstantLR(o, 0.4, 0) },
      { 2 }))
  end)

  it("step(epoch) is refused where torch's takes none or means another lr; a SequentialLR of composites refused",
    function()
    local o = sgd(0.1)
    local s = sched.SequentialLR(o, { sched.StepLR(o, 2), sched.ExponentialLR(o, 0.9) }, { 2 })
    U.fails_with("SequentialLR:step: takes no epoch, got 5: torch 2.15's SequentialLR.step() takes none", s.step, s, 5)
    assert.are.equal(0, s.last_epoch)
    o = sgd(0.1)
    local c = sched.ChainedScheduler({ sched.StepLR(o, 2), sched.ExponentialLR(o, 0.9) })
    U.fails_with("ChainedScheduler:step: takes no epoch, got 5: torch 2.15's ChainedScheduler.step() takes none", c.step,
      c, 5)
    o = sgd(0.1)
    local m = sched.MultiplicativeLR(o, function() return 0.9 end)
    m:step()
    U.fails_with("MultiplicativeLR:step: takes no epoch, got 5: torch's step(epoch), deprecated, multiplies the current "
      .. "lr by lr_lambda(epoch) once", m.step, m, 5)
    assert.is_true(close(0.09, o.param_groups[1].lr, 1e-15))
    assert.are.equal(1, m.last_epoch)
    -- torch's SequentialLR fails entering a ChainedScheduler or SequentialLR at a milestone, and steps one run first
    -- out of turn
    o = sgd(0.1)
    U.fails_with("SequentialLR: schedulers[2] is a ChainedScheduler; torch's SequentialLR fails entering one at a "
      .. "milestone", sched.SequentialLR, o, { sched.StepLR(o, 2), sched.ChainedScheduler({ sched.StepLR(o, 3) }) }, { 2 })
    o = sgd(0.1)
    local inner = sched.SequentialLR(o, { sched.StepLR(o, 2), sched.ExponentialLR(o, 0.9) }, { 2 })
    U.fails_with("SequentialLR: schedulers[1] is a SequentialLR", sched.SequentialLR, o, { inner, sched.StepLR(o, 2) },
      { 3 })
  end)

  it("transformers' other schedules and get_scheduler give transformers' lrs", function()
    local function make(f) local o = sgd(0.1); return o, f(o) end
    for _, c in ipairs {
      { "t_const_w", function(o) return sched.get_constant_schedule_with_warmup(o, 3) end },
      { "t_const_w", function(o) return sched.get_scheduler("constant_with_warmup", o, 3) end },
      { "t_poly", function(o) return sched.get_polynomial_decay_schedule_with_warmup(o, 2, 8, 1e-4, 2.0) end },
      { "t_poly", function(o)
          return sched.get_scheduler("polynomial", o, { num_warmup_steps = 2, num_training_steps = 8,
            scheduler_specific_kwargs = { lr_end = 1e-4, power = 2 } })
        end },
      { "t_poly_default", function(o) return sched.get_polynomial_decay_schedule_with_warmup(o, 1, 5) end },
      { "t_hard", function(o) return sched.get_cosine_with_hard_restarts_schedule_with_warmup(o, 2, 10, 2) end },
      { "t_hard", function(o) return sched.get_scheduler("cosine_with_restarts", o, 2, 10, { num_cycles = 2 }) end },
      { "t_isqrt", function(o) return sched.get_inverse_sqrt_schedule(o, 3) end },
      { "t_isqrt_ts",
        function(o) return sched.get_inverse_sqrt_schedule(o, { num_warmup_steps = 0, timescale = 4 }) end },
    } do
      local o, s = make(c[2])
      follows(c[1], o, s)
    end
    -- get_scheduler's other names are the schedules already here
    local o, s = make(function(q) return sched.get_scheduler("constant", q) end)
    for _ = 1, 3 do s:step() end
    assert.are.equal(0.1, o.param_groups[1].lr)
    -- the generic call of transformers' scripts (both counts, whatever the name) runs where the counts change nothing
    o, s = make(function(q) return sched.get_scheduler("constant", q, 0, 1000) end)
    for _ = 1, 3 do s:step() end
    assert.are.equal(0.1, o.param_groups[1].lr)
    assert.are.equal(0.5, sched.get_scheduler("reduce_lr_on_plateau", sgd(0.1), { num_warmup_steps = 0,
      num_training_steps = 100, scheduler_specific_kwargs = { factor = 0.5 } }).factor)
    o = sgd(0.1)
    s = sched.get_scheduler("linear", o, 3, 10)
    local o2 = sgd(0.1)
    local s2 = sched.get_linear_schedule_with_warmup(o2, 3, 10)
    for _ = 1, 6 do s:step(); s2:step(); assert.are.equal(o2.param_groups[1].lr, o.param_groups[1].lr) end
    for _, c in ipairs {
      { { "warmup_stable_decay" },
        [[get_scheduler: transformers' schedule "warmup_stable_decay" is not offered here]] },
      { { "cosinus" }, "get_scheduler: name must be one of constant, constant_with_warmup, cosine" },
      { { "linear", 3 }, "get_scheduler: linear requires num_training_steps, please provide that argument" },
      { { "cosine" }, "get_scheduler: cosine requires num_warmup_steps" },
      { { "constant", nil, nil, { num_cycles = 1 } }, '"constant" takes no scheduler_specific_kwargs' },
      { { "cosine", 1, 4, { num_warmup_steps = 2 } }, "scheduler_specific_kwargs repeats 'num_warmup_steps'" },
      { { "cosine", 1, 4, { cycles = 2 } }, "get_cosine_schedule_with_warmup: unknown option 'cycles'" },
      -- step counts a schedule does not use: a warmup is refused (transformers drops it unseen); num_training_steps
      -- is checked
      { { "constant", 100, 1000 }, 'get_scheduler: "constant" has no warmup, got num_warmup_steps=100' },
      { { "reduce_lr_on_plateau", 5, 100, { factor = 0.5 } }, '"reduce_lr_on_plateau" has no warmup' },
      { { "constant_with_warmup", 10, "abc" }, "get_scheduler: num_training_steps must be an integer >= 0, got abc" },
      { { "reduce_lr_on_plateau", { bogus = 1 } }, "get_scheduler: unknown option 'bogus'" },
    } do
      local args = c[1]
      local ok, err = pcall(sched.get_scheduler, args[1], sgd(0.1), args[2], args[3], args[4])
      assert.is_false(ok, c[2])
      assert.truthy(tostring(err):find(c[2], 1, true), err)
    end
    local ok, err = pcall(sched.get_polynomial_decay_schedule_with_warmup, sgd(1e-8), 1, 4)
    assert.is_false(ok)
    assert.truthy(err:find("lr_end (1e-07) must be smaller than the optimizer's initial lr (1e-08)", 1, true), err)
  end)

  it("ReduceLROnPlateau reduces on a plateau as torch's (modes, thresholds, cooldown, min_lr) and is saved", function()
    -- torch 2.15: ReduceLROnPlateau(SGD(groups with lr 0.1 (and 0.2)), ...) stepped with these metrics, each group's
    -- lr after each step
    local function run(metrics, groups, kw)
      local list = {}
      for i = 1, groups do list[i] = { params = { fp8.zeros { 1 } }, lr = 0.1 * i } end
      local o = optim.SGD(list, { lr = 0.1 })
      local s = sched.ReduceLROnPlateau(o, kw)
      local out = {}
      for _, m in ipairs(metrics) do
        s:step(m)
        local r = {}
        for i, g in ipairs(o.param_groups) do r[i] = g.lr end
        out[#out + 1] = r
      end
      return out, s, o
    end
    local M = { 1.0, 0.9, 0.95, 0.96, 0.97, 0.98, 0.85, 0.86, 0.87, 0.88, 0.89, 0.9, 0.91 }
    for _, c in ipairs {
      { M, 1, { patience = 2 }, { 0.1, 0.1, 0.1, 0.1, 0.01, 0.01, 0.01, 0.01, 0.01, 0.001, 0.001, 0.001, 0.0001 } },
      { { 0.1, 0.2, 0.2, 0.25, 0.2, 0.2, 0.2, 0.2 }, 1,
        { mode = "max", threshold_mode = "abs", threshold = 0.01, patience = 1, factor = 0.5 },
        { 0.1, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05, 0.025 } },
      { M, 2, { patience = 1, cooldown = 2, factor = 0.5, min_lr = { 0.03, 0.1 } },
        { { 0.1, 0.2 }, { 0.1, 0.2 }, { 0.1, 0.2 }, { 0.05, 0.1 }, { 0.05, 0.1 }, { 0.05, 0.1 }, { 0.05, 0.1 },
          { 0.05, 0.1 }, { 0.03, 0.1 }, { 0.03, 0.1 }, { 0.03, 0.1 }, { 0.03, 0.1 }, { 0.03, 0.1 } } },
    } do
      local got = run(c[1], c[2], c[3])
      for t, want in ipairs(c[4]) do
        if type(want) == "number" then want = { want } end
        for i = 1, #want do
          assert.is_true(close(got[t][i], want[i], 1e-12), ("step %d group %d: %.17g vs %.17g"):format(t, i,
            got[t][i], want[i]))
        end
      end
    end
    -- a one-element tensor as the metric; get_last_lr; state_dict / load_state_dict carry the counters
    local _, s, o = run({ 1.0, 1.0 }, 1, { patience = 3 })
    s:step(fp8.tensor(2.0))
    assert.are.equal(2, s.num_bad_epochs)
    assert.are.same({ 0.1 }, s:get_last_lr())
    local o2 = optim.SGD({ fp8.zeros { 1 } }, { lr = 0.1 })
    local s2 = sched.ReduceLROnPlateau(o2, { patience = 3 })
    s2:load_state_dict(s:state_dict())
    for _ = 1, 2 do s:step(5); s2:step(5) end   -- 4 steps without improvement: past patience, both reduce
    assert.are.equal(o.param_groups[1].lr, o2.param_groups[1].lr)
    assert.is_true(close(0.01, o2.param_groups[1].lr, 1e-12))
    -- get_last_lr after a load is the saved one (it stayed the new scheduler's: 0.1 where 0.01 was saved)
    local o5 = optim.SGD({ fp8.zeros { 1 } }, { lr = 0.1 })
    local s5 = sched.ReduceLROnPlateau(o5, { patience = 3 })
    o5:load_state_dict(o:state_dict()); s5:load_state_dict(s:state_dict())
    assert.are.same(s:get_last_lr(), s5:get_last_lr())
    local old = s:state_dict()
    old._last_lr = nil   -- a state from before it was kept: the restored groups' lr
    s5 = sched.ReduceLROnPlateau(o5, { patience = 3 })
    s5:load_state_dict(old)
    assert.are.same({ o5.param_groups[1].lr }, s5:get_last_lr())
    old._last_lr = { "x" }
    U.fails_with("ReduceLROnPlateau:load_state_dict: _last_lr must be a list of 1 numbers >= 0", s5.load_state_dict,
      s5, old)
    -- get_scheduler's name for it, with its options in scheduler_specific_kwargs
    local s3 = sched.get_scheduler("reduce_lr_on_plateau", optim.SGD({ fp8.zeros { 1 } }, { lr = 1 }),
      { scheduler_specific_kwargs = { patience = 0 } })
    assert.are.equal(0, s3.patience)
    U.fails_with("ReduceLROnPlateau: factor must be a number in [0, 1)", sched.ReduceLROnPlateau, opt(1),
      { factor = 1 })
    U.fails_with("ReduceLROnPlateau: mode must be \"min\" or \"max\"", sched.ReduceLROnPlateau, opt(1), { mode = "up" })
    U.fails_with("ReduceLROnPlateau: unknown option 'verbose'", sched.ReduceLROnPlateau, opt(1), { verbose = true })
    U.fails_with("ReduceLROnPlateau:step: expected the metric (a number, e.g. the validation loss), got nil", s.step, s)
    U.fails_with("ReduceLROnPlateau:step: metric must be a number or a one-element tensor", s.step, s, fp8.ones { 2 })
    local o4 = opt(0.1)
    local step = sched.StepLR(o4, 2)
    local p4 = sched.ReduceLROnPlateau(o4)
    step:step()
    U.fails_with("ReduceLROnPlateau:step: this optimizer is also stepped by another scheduler (StepLR)", p4.step, p4, 1)
    U.fails_with("SequentialLR: schedulers[1] is a ReduceLROnPlateau, which steps on a metric", sched.SequentialLR,
      o4, { p4, step }, { 1 })
  end)

  it("StepLR takes torch's positional gamma; no constructor drops an argument past those it takes", function()
    -- torch 2.x: StepLR(SGD(lr=0.1), 2, 0.5).get_last_lr() over 6 steps
    local o = opt(0.1)
    local s = sched.StepLR(o, 2, 0.5)
    local seen = {}
    for _ = 1, 6 do seen[#seen + 1] = s:get_last_lr()[1]; s:step() end
    local want = { 0.1, 0.1, 0.05, 0.05, 0.025, 0.025 }
    for i = 1, #want do
      assert.is_true(close(seen[i], want[i], 1e-12), ("step %d: %g vs %g"):format(i - 1, seen[i], want[i]))
    end
    for _, c in ipairs {
      { sched.StepLR, { 2, 0.5, 3 }, "StepLR: takes (opt, step_size [, gamma])" },
      { sched.StepLR, { { step_size = 2 }, 0.5 }, "StepLR: takes (opt, {step_size=, gamma=})" },
      { sched.ExponentialLR, { 0.5, 3 }, "ExponentialLR: takes (opt, gamma) or (opt, {gamma=}); got 1 more argument" },
      { sched.LambdaLR, { function() return 1 end, 3 }, "LambdaLR: takes (opt, lr_lambda); got 1 more argument" },
      { sched.MultiStepLR, { { milestones = { 1 } }, 0.5 },
        "MultiStepLR: takes (opt, milestones [, gamma]) or (opt, {milestones=, gamma=}); got 1 more argument" },
      { sched.MultiStepLR, { { 1 }, 0.5, 3 }, "MultiStepLR: takes (opt, milestones [, gamma])" },
      { sched.LinearLR, { {}, 3 }, "LinearLR: takes (opt [, start_factor [, end_factor [, total_iters]]]) or (opt, " },
      { sched.LinearLR, { 0.5, 0.1, 3, 4 }, "LinearLR: takes (opt [, start_factor [, end_factor [, total_iters]]])" },
      { sched.CosineAnnealingLR, { { T_max = 10 }, 0.1 }, "CosineAnnealingLR: takes (opt, T_max [, eta_min]) or" },
      { sched.CosineAnnealingLR, { 10, 0.1, -1 }, "CosineAnnealingLR: takes (opt, T_max [, eta_min])" },
      { sched.ConstantLR, { 0.5, 3, -1 }, "ConstantLR: takes (opt [, factor [, total_iters]])" },
      { sched.PolynomialLR, { 4, 2, -1 }, "PolynomialLR: takes (opt [, total_iters [, power]])" },
      { sched.CosineAnnealingWarmRestarts, { 2, 2, 0, -1 }, "CosineAnnealingWarmRestarts: takes (opt, T_0 [, T_mult" },
      { sched.get_constant_schedule, { 3 }, "get_constant_schedule: takes (opt); got 1 more argument" },
      { sched.get_inverse_sqrt_schedule, { 3, 4, 5 }, "get_inverse_sqrt_schedule: takes (opt, num_warmup_steps [, " },
      { sched.warmup_cosine, { { total_steps = 10 }, 3 }, "warmup_cosine: takes (opt, {warmup_steps=" },
    } do
      local o2 = opt(1)
      local ok, err = pcall(c[1], o2, table.unpack(c[2]))
      assert.is_false(ok, c[3])
      assert.truthy(tostring(err):find(c[3], 1, true), err)
      assert.are.equal(1, o2.param_groups[1].lr)
    end
  end)
end)

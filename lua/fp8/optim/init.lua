-- fp8.optim — optimizers (SGD, Adam, AdamW) whose updates run in fused C kernels, RMSprop, Adagrad, Adadelta,
-- Adamax, NAdam and RAdam (torch's operations in torch's order), and learning-rate
-- schedules (fp8.optim.lr_scheduler). Loaded on first use of fp8.optim.
local optim = {
  Optimizer = require "fp8.optim.optimizer",
  SGD = require "fp8.optim.sgd",
  Adam = require "fp8.optim.adam",
  AdamW = require "fp8.optim.adamw",
  RMSprop = require "fp8.optim.rmsprop",
  Adagrad = require "fp8.optim.adagrad",
  Adadelta = require "fp8.optim.adadelta",
  Adamax = require "fp8.optim.adamax",
  NAdam = require "fp8.optim.nadam",
  RAdam = require "fp8.optim.radam",
  lr_scheduler = require "fp8.optim.lr_scheduler",
}

local help = require "fp8.help"
local function add(name, sig, doc) help.add { section = "Training", name = name, sig = sig, doc = doc } end
add("optim.SGD", "fp8.optim.SGD(params [, {lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=false,\n"
  .. "  maximize=false}])",
  "Stochastic gradient descent as torch.optim.SGD. params: model:parameters(), a Module, or groups\n"
  .. "{{params=..., lr=...}, ...} (a parameter may appear once). opt:step([closure]) updates parameters that\n"
  .. "have a grad (the closure runs with grad enabled); opt:zero_grad([set_to_none=true]) drops the grads, or\n"
  .. "with false zeroes them in place. opt:add_param_group{params=..., lr=...}.")
add("optim.AdamW", "fp8.optim.AdamW(params [, {lr=1e-3, betas={0.9,0.999}, eps=1e-8, weight_decay=1e-2,\n"
  .. "  amsgrad=false, maximize=false}])",
  "AdamW as torch.optim.AdamW (decoupled weight decay, bias correction; amsgrad: the running maximum of the\n"
  .. "second moment in the denominator). Also AdamW{params=..., lr=...}.\n"
  .. "opt:state_dict() / opt:load_state_dict(sd) save and restore steps and moments.")
add("optim.Adam", "fp8.optim.Adam(params [, {lr=1e-3, betas={0.9,0.999}, eps=1e-8, weight_decay=0,\n"
  .. "  amsgrad=false, maximize=false, decoupled_weight_decay=false}])",
  "Adam as torch.optim.Adam: weight_decay is L2, weight_decay·p added to the gradient before the moments (after\n"
  .. "maximize's negation); decoupled_weight_decay=true makes it AdamW's step. State: step, exp_avg, exp_avg_sq\n"
  .. "(and amsgrad's max_exp_avg_sq), as AdamW's; opt:state_dict() / opt:load_state_dict(sd).\n"
  .. "Under MS-AMP (mixed_precision=\"fp8\",\n"
  .. "msamp backend) an Adam is replaced by MS-AMP's AdamW where that is the same step: weight_decay=0, or\n"
  .. "decoupled; an L2 weight_decay is refused there.")
add("optim.RMSprop", "fp8.optim.RMSprop(params [, {lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0,\n"
  .. "  centered=false, maximize=false}]) / Adagrad(params [, {lr=1e-2, lr_decay=0, weight_decay=0,\n"
  .. "  initial_accumulator_value=0, eps=1e-10, maximize=false}])",
  "torch.optim.RMSprop and torch.optim.Adagrad, their operations in torch's order on fp32 tensors (fused into\n"
  .. "one pass per parameter on the CPU, the same bits). State: step and square_avg (RMSprop; momentum_buffer,\n"
  .. "grad_avg with momentum, centered) or sum\n"
  .. "(Adagrad); opt:state_dict() / opt:load_state_dict(sd). MS-AMP takes only Adam and AdamW.")
add("optim.NAdam", "fp8.optim.NAdam(params [, {lr=2e-3, betas={0.9,0.999}, eps=1e-8, weight_decay=0,\n"
  .. "  momentum_decay=4e-3, decoupled_weight_decay=false, maximize=false}]) / RAdam(params [, {lr=1e-3, betas,\n"
  .. "  eps, weight_decay, decoupled_weight_decay, maximize}]) / Adamax(params [, {lr=2e-3, betas, eps, weight_decay,\n"
  .. "  maximize}]) / Adadelta(params [, {lr=1, rho=0.9, eps=1e-6, weight_decay=0, maximize=false}])",
  "torch.optim's NAdam (Nesterov momentum with its schedule), RAdam (the rectified adaptive step, SGD with momentum\n"
  .. "while the rectification is undefined), Adamax (the infinity norm) and Adadelta, their operations in torch's\n"
  .. "order on fp32 tensors (no fused kernel); torch's state names (NAdam: step, mu_product, exp_avg, exp_avg_sq;\n"
  .. "Adamax: exp_avg, exp_inf; Adadelta: square_avg, acc_delta); opt:state_dict() / opt:load_state_dict(sd).")
add("optim.Optimizer", "fp8.optim.Optimizer: the base class of SGD, Adam, AdamW, RMSprop and Adagrad",
  "Methods every optimizer has: step([closure]), zero_grad([set_to_none=true]), add_param_group{params=, ...},\n"
  .. "state_dict() / load_state_dict(sd); fields param_groups, defaults, state. A new optimizer:\n"
  .. "local My = fp8.optim.Optimizer.class(); function My.new(params, opts) return fp8.optim.Optimizer.new(My,\n"
  .. "\"My\", {lr = fp8.optim.Optimizer.REQUIRED, ...}, params, opts) end (REQUIRED: an option the caller must\n"
  .. "give); then My:_new_state(p, group) -> the parameter's state table, made at its first step, and\n"
  .. "My:_update(p, grad, state, group), which writes p in place (fp8.nn.init.copy_), or My:step of its own.")
add("optim.lr_scheduler", "fp8.optim.lr_scheduler.warmup_cosine(opt, {warmup_steps, total_steps, min_lr})"
  .. "  (alias WarmupCosine)",
  "Also torch's StepLR(opt, step_size [, gamma]), MultiStepLR(opt, milestones [, gamma]),\n"
  .. "ExponentialLR(opt, gamma), LinearLR(opt [, start_factor [, end_factor [, total_iters]]]),\n"
  .. "ConstantLR(opt [, factor [, total_iters]]), PolynomialLR(opt [, total_iters [, power]]),\n"
  .. "CosineAnnealingLR(opt, T_max [, eta_min]), CosineAnnealingWarmRestarts(opt, T_0 [, T_mult [, eta_min]])\n"
  .. "(its step(epoch) takes a fraction), OneCycleLR(opt, {max_lr=, total_steps=, pct_start=, anneal_strategy=,\n"
  .. "cycle_momentum=, ...}) (the momentum too), CyclicLR(opt, {base_lr=, max_lr=, step_size_up=2000,\n"
  .. "step_size_down=, mode=\"triangular\"|\"triangular2\"|\"exp_range\", gamma=, scale_fn=, scale_mode=,\n"
  .. "cycle_momentum=, base_momentum=, max_momentum=}) (the momentum too), SequentialLR(opt, schedulers, milestones),\n"
  .. "ChainedScheduler(schedulers [, opt]) (the factors of ConstantLR, LinearLR, ExponentialLR, StepLR, MultiStepLR,\n"
  .. "PolynomialLR, MultiplicativeLR multiplied, as torch's chain), MultiplicativeLR(opt, fn) (lr · fn(t) each step),\n"
  .. "ReduceLROnPlateau(opt [, {mode=, factor=, patience=, threshold=, threshold_mode=, cooldown=, min_lr=, eps=}])\n"
  .. "(sched:step(metric): the lr times factor after patience steps without improvement) (each of these also\n"
  .. "with one table of its option names after opt), LambdaLR(opt, fn); and transformers'\n"
  .. "get_linear_schedule_with_warmup, get_cosine_schedule_with_warmup,\n"
  .. "get_cosine_with_hard_restarts_schedule_with_warmup, get_polynomial_decay_schedule_with_warmup\n"
  .. "(opt, num_warmup_steps, num_training_steps, ...), get_constant_schedule(opt),\n"
  .. "get_constant_schedule_with_warmup(opt, num_warmup_steps), get_inverse_sqrt_schedule(opt, num_warmup_steps)\n"
  .. "and get_scheduler(name, opt, num_warmup_steps, num_training_steps [, scheduler_specific_kwargs])\n"
  .. "(reduce_lr_on_plateau: ReduceLROnPlateau with scheduler_specific_kwargs).\n"
  .. "sched:step([epoch]) after opt:step() (SequentialLR, ChainedScheduler, MultiplicativeLR: step() only, as\n"
  .. "torch's); sched:get_last_lr() → {lr, ...} (sched:get_lr(): the current step's lrs, computed, not written);\n"
  .. "sched:state_dict() / sched:load_state_dict(sd [, strict]) save and restore the step and base lrs, with\n"
  .. "torch's keys (its settings, _last_lr; a state of torch's, as a plain table of its values, loads): a setting\n"
  .. "a state holds is this scheduler's or refused, naming it (strict=false keeps this one's); a MultiplicativeLR\n"
  .. "loaded goes on from the groups' lr, as torch's. Each schedule is a closed form of the step and the group's\n"
  .. "initial lr: an lr set by hand lasts until the next sched:step() (torch's chainable StepLR would scale it). A\n"
  .. "group added later joins at the current step: its lr is that step's in the schedules that multiply the lr\n"
  .. "step by step (StepLR, ...: the later steps scale it, as torch's; past a PolynomialLR's end it keeps its lr),\n"
  .. "its base in the others. A write of a scheduler's own settings (sched.gamma = 0.5, T_max, total_steps, ...)\n"
  .. "is refused: make a new one; sched.gamma reads it. Their class (each one's metatable) is\n"
  .. "fp8.optim.lr_scheduler.LRScheduler, as torch's.")

return optim

-- losses.lua — torch's loss modules over fp8.nn.functional: CrossEntropyLoss([{weight, label_smoothing,
-- ignore_index, reduction}]), NLLLoss([{weight, ignore_index, reduction}]), MSELoss([{reduction}]),
-- L1Loss([{reduction}]), BCELoss([{weight, reduction}]), BCEWithLogitsLoss([{weight, reduction, pos_weight}]),
-- SmoothL1Loss([{reduction, beta}]), HuberLoss([{reduction, delta}]), KLDivLoss([{reduction, log_target}]),
-- MarginRankingLoss, TripletMarginLoss, CosineEmbeddingLoss, HingeEmbeddingLoss, SoftMarginLoss, GaussianNLLLoss,
-- PoissonNLLLoss, MultiMarginLoss, MultiLabelMarginLoss, MultiLabelSoftMarginLoss ([{their options}]);
-- loss(input, target) (three inputs where the function takes three) is the function's value with the options given
-- at construction, checked there.
local Module = require "fp8.nn.module"
local O = require "fp8.opts"
local F = require "fp8.nn.functional"
require "fp8.nn.embedding_losses"    -- F.margin_ranking_loss, F.triplet_margin_loss, ...
require "fp8.nn.likelihood_losses"   -- F.gaussian_nll_loss, F.poisson_nll_loss
require "fp8.nn.multiclass_losses"   -- F.multi_margin_loss, F.multilabel_margin_loss, F.multilabel_soft_margin_loss

local M = {}

local REDUCTIONS = { mean = true, sum = true, none = true }
local function loss_class(name, fn, valid, reductions, nargs)
  local cls = Module.class(name)
  reductions = reductions or REDUCTIONS
  cls["__init"] = function(self, opts)
    if opts ~= nil and type(opts) ~= "table" then
      error(("%s: options must be a table, got %s"):format(name, O.got(opts)), 3)
    end
    self.opts = O.check(name, opts, valid, 3)
    -- the functions' own check (F._util.reduction_of), made when the module is made
    if self.opts.reduction ~= nil then F._util.reduction_of(name, self.opts.reduction, reductions ~= REDUCTIONS, 3) end
    if self.opts.ignore_index ~= nil then F._util.ignore_index_of(name, self.opts.ignore_index, 3) end
  end
  if nargs == 3 then   -- (input1, input2, target), (anchor, positive, negative), (input, target, var)
    cls.forward = function(self, a, b, c) return fn(a, b, c, self.opts) end
  else
    cls.forward = function(self, input, target) return fn(input, target, self.opts) end
  end
  cls.extra_repr = function(self)
    local keys, parts = {}, {}
    for k in next, self.opts do keys[#keys + 1] = k end
    table.sort(keys)
    for _, k in ipairs(keys) do parts[#parts + 1] = ("%s=%s"):format(k, tostring(self.opts[k])) end
    return table.concat(parts, ", ")
  end
  return cls
end

M.CrossEntropyLoss = loss_class("CrossEntropyLoss", F.cross_entropy, { "weight", "label_smoothing", "ignore_index",
  "reduction" })
M.NLLLoss = loss_class("NLLLoss", F.nll_loss, { "weight", "ignore_index", "reduction" })
M.MSELoss = loss_class("MSELoss", F.mse_loss, { "reduction" })
M.L1Loss = loss_class("L1Loss", F.l1_loss, { "reduction" })
M.BCELoss = loss_class("BCELoss", F.binary_cross_entropy, { "weight", "reduction" })
M.BCEWithLogitsLoss = loss_class("BCEWithLogitsLoss", F.binary_cross_entropy_with_logits, { "weight", "reduction",
  "pos_weight" })
M.SmoothL1Loss = loss_class("SmoothL1Loss", F.smooth_l1_loss, { "reduction", "beta" })
M.HuberLoss = loss_class("HuberLoss", F.huber_loss, { "reduction", "delta" })
M.KLDivLoss = loss_class("KLDivLoss", F.kl_div, { "reduction", "log_target" },
  { mean = true, batchmean = true, sum = true, none = true })
M.MarginRankingLoss = loss_class("MarginRankingLoss", F.margin_ranking_loss, { "margin", "reduction" }, nil, 3)
M.TripletMarginLoss = loss_class("TripletMarginLoss", F.triplet_margin_loss,
  { "margin", "p", "eps", "swap", "reduction" }, nil, 3)
M.CosineEmbeddingLoss = loss_class("CosineEmbeddingLoss", F.cosine_embedding_loss, { "margin", "reduction" }, nil, 3)
M.HingeEmbeddingLoss = loss_class("HingeEmbeddingLoss", F.hinge_embedding_loss, { "margin", "reduction" })
M.SoftMarginLoss = loss_class("SoftMarginLoss", F.soft_margin_loss, { "reduction" })
M.GaussianNLLLoss = loss_class("GaussianNLLLoss", F.gaussian_nll_loss, { "full", "eps", "reduction" }, nil, 3)
M.PoissonNLLLoss = loss_class("PoissonNLLLoss", F.poisson_nll_loss, { "log_input", "full", "eps", "reduction" })
M.MultiMarginLoss = loss_class("MultiMarginLoss", F.multi_margin_loss, { "p", "margin", "weight", "reduction" })
M.MultiLabelMarginLoss = loss_class("MultiLabelMarginLoss", F.multilabel_margin_loss, { "reduction" })
M.MultiLabelSoftMarginLoss = loss_class("MultiLabelSoftMarginLoss", F.multilabel_soft_margin_loss,
  { "weight", "reduction" })

return M

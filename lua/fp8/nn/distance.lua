-- distance.lua — torch's fp8.nn.CosineSimilarity([dim=2 [, eps=1e-8]]) (or {dim=, eps=}): the module of
-- F.cosine_similarity, its options checked when made; m(x1, x2) is F.cosine_similarity(x1, x2, dim, eps). And
-- fp8.nn.PairwiseDistance([p=2 [, eps=1e-6 [, keepdim=false]]]), F.pairwise_distance's.
local Module = require "fp8.nn.module"
local O = require "fp8.opts"
local F = require "fp8.nn.functional"
require "fp8.nn.embedding_losses"   -- F.pairwise_distance

local CosineSimilarity = Module.class("CosineSimilarity")

function CosineSimilarity:__init(dim, eps)
  if type(dim) == "table" then
    if eps ~= nil then error("CosineSimilarity: give dim and eps either in order or in one table", 3) end
    local o = O.check("CosineSimilarity", dim, { "dim", "eps" }, 3)
    dim, eps = o.dim, o.eps
  end
  if dim == nil then dim = 2 end
  if eps == nil then eps = 1e-8 end
  if math.type(dim) ~= "integer" or dim == 0 then
    error(("CosineSimilarity: dim must be a nonzero integer (1-based, negative from the end), got %s"):format(
      O.got(dim)), 3)
  end
  if type(eps) ~= "number" or not (eps >= 0 and eps < math.huge) then
    error(("CosineSimilarity: eps must be a finite number >= 0, got %s"):format(O.got(eps)), 3)
  end
  self.dim, self.eps = dim, eps
end

function CosineSimilarity:forward(x1, x2) return F.cosine_similarity(x1, x2, self.dim, self.eps) end

function CosineSimilarity:extra_repr() return ("dim=%d, eps=%g"):format(self.dim, self.eps) end

-- PairwiseDistance([p=2 [, eps=1e-6 [, keepdim=false]]]) (or {p=, eps=, keepdim=}): the module of
-- F.pairwise_distance (lua/fp8/nn/embedding_losses.lua), ‖x1 − x2 + eps‖_p along the last dim
local PairwiseDistance = Module.class("PairwiseDistance")

function PairwiseDistance:__init(p, eps, keepdim)
  if type(p) == "table" then
    if eps ~= nil or keepdim ~= nil then
      error("PairwiseDistance: give p, eps and keepdim in order or in one table", 3)
    end
    local o = O.check("PairwiseDistance", p, { "p", "eps", "keepdim" }, 3)
    p, eps, keepdim = o.p, o.eps, o.keepdim
  end
  self.norm, self.eps, self.keepdim = F._pairwise_options("PairwiseDistance", p, eps, keepdim, 4)
end

function PairwiseDistance:forward(x1, x2) return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim) end

function PairwiseDistance:extra_repr()
  return ("p=%g, eps=%g%s"):format(self.norm, self.eps, self.keepdim and ", keepdim=true" or "")
end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
O.strict_arity(CosineSimilarity, "CosineSimilarity")
O.strict_arity(PairwiseDistance, "PairwiseDistance")
return { CosineSimilarity = CosineSimilarity, PairwiseDistance = PairwiseDistance }

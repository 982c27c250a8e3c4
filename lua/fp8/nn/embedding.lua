-- embedding.lua — fp8.nn.Embedding(num_embeddings, embedding_dim [, padding_idx | {padding_idx=, max_norm=,
-- norm_type=2}]): a lookup table, weight N(0, 1) as in PyTorch (the padding row zeros, and it takes no gradient);
-- indices are 0-based token ids stored in a tensor. max_norm renormalizes the rows a forward looks up, in place, as
-- torch's; scale_grad_by_freq and sparse are refused.
-- Embedding.from_pretrained(embeddings [, {freeze=true, padding_idx=}]) wraps a given table, torch's.
local fp8 = require "fp8.core"   -- the C half only, so loading never recurses into fp8/init.lua
local Module = require "fp8.nn.module"
local F = require "fp8.nn.functional"
local init = require "fp8.nn.init_fns"

local Embedding = Module.class("Embedding")

local pretrained   -- from_pretrained's weight and freeze, for the constructor it calls (not an argument a caller sees)

local OPTS = { "padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse" }

function Embedding:__init(num, dim, padding_idx)
  local O = require "fp8.opts"
  local opts = {}
  if type(num) == "table" then
    if dim ~= nil or padding_idx ~= nil then
      error("Embedding: give Embedding(num, dim [, padding_idx | {options}]) or Embedding{num_embeddings=, "
        .. "embedding_dim=, padding_idx=, ...}", 3)
    end
    local keys = { "num_embeddings", "embedding_dim" }
    for _, k in ipairs(OPTS) do keys[#keys + 1] = k end
    opts = O.check("Embedding", num, keys, 3)
    num, dim, padding_idx = opts.num_embeddings, opts.embedding_dim, opts.padding_idx
  elseif type(padding_idx) == "table" then
    opts = O.check("Embedding", padding_idx, OPTS, 3)
    padding_idx = opts.padding_idx
  end
  for _, k in ipairs { "scale_grad_by_freq", "sparse" } do
    if opts[k] ~= nil and opts[k] ~= false then
      error(("Embedding: %s=%s is not supported (%s)"):format(k, O.got(opts[k]), k == "sparse"
        and "there are no sparse gradients here" or "gradients are not scaled by frequency here"), 3)
    end
  end
  local mn, nt = opts.max_norm, opts.norm_type
  if mn ~= nil and (type(mn) ~= "number" or not (mn >= 0 and mn < math.huge)) then
    error(("Embedding: max_norm must be a finite number >= 0, got %s"):format(O.got(mn)), 3)
  end
  if nt ~= nil and (type(nt) ~= "number" or not (nt > 0)) then
    error(("Embedding: norm_type must be a number > 0 (math.huge for the max), got %s"):format(O.got(nt)), 3)
  end
  self.max_norm, self.norm_type = mn, nt or 2.0
  for _, what in ipairs { "num_embeddings", "embedding_dim" } do   -- a list: a nil size is checked too
    local v = what == "num_embeddings" and num or dim
    if math.type(v) ~= "integer" or v <= 0 then
      error(("Embedding: %s must be a positive integer, got %s"):format(what, (type(v) == "string" and v or require("fp8.opts").got(v))), 3)
    end
  end
  Module._check_size("Embedding", 3, "num_embeddings * embedding_dim", num, dim)
  self.num_embeddings, self.embedding_dim = num, dim
  self.padding_idx = F._padding_idx("Embedding", padding_idx, num, 3)
  if pretrained then   -- from_pretrained's table, as given (its padding row too, as torch's)
    self:register_parameter("weight", pretrained.weight)
    if pretrained.freeze then self.weight:requires_grad(false) end
    return
  end
  local w = init.normal({ num, dim }, 0, 1)
  if self.padding_idx then fp8.no_grad(function() w:narrow(1, self.padding_idx + 1, 1):fill_(0) end) end
  self:register_parameter("weight", w)
end

-- Embedding.from_pretrained(embeddings[V, D] [, {freeze=true, padding_idx=, max_norm=, norm_type=}]): torch's; the
-- weight is a copy of
-- embeddings (a leaf), frozen (no gradient) unless freeze=false
function Embedding.from_pretrained(embeddings, opts, ...)
  require("fp8.opts").no_more("Embedding.from_pretrained", "(embeddings [, {freeze=, padding_idx=}])", ...)
  if not fp8.is_tensor(embeddings) or embeddings:dim() ~= 2 then
    error(("Embedding.from_pretrained: embeddings must be a 2-D tensor [num_embeddings, embedding_dim], got %s"):format(
      fp8.is_tensor(embeddings) and embeddings:shape_str() or require("fp8.opts").got(embeddings)), 2)
  end
  opts = require("fp8.opts").check("Embedding.from_pretrained", opts, { "freeze", "padding_idx", "max_norm",
    "norm_type" }, 2)
  if opts.freeze ~= nil and type(opts.freeze) ~= "boolean" then
    error(("Embedding.from_pretrained: freeze must be a boolean, got %s"):format(require("fp8.opts").got(opts.freeze)),
      2)
  end
  pretrained = { weight = embeddings:detach():to("fp32"):clone(), freeze = opts.freeze ~= false }
  local ok, e = pcall(Embedding, embeddings:size(1), embeddings:size(2), { padding_idx = opts.padding_idx,
    max_norm = opts.max_norm, norm_type = opts.norm_type })
  pretrained = nil
  if not ok then error(e, 2) end
  return e
end

function Embedding:forward(idx)
  if not fp8.is_tensor(idx) then
    Module._forward_error(self, ("expected a tensor of token ids, got %s"):format(type(idx)))
  end
  if self.max_norm == nil then return F.embedding(idx, self.weight, self.padding_idx) end
  return F.embedding(idx, self.weight, { padding_idx = self.padding_idx, max_norm = self.max_norm,
    norm_type = self.norm_type })
end

function Embedding:extra_repr()
  return ("%d, %d%s%s%s"):format(self.num_embeddings, self.embedding_dim,
    self.padding_idx and (", padding_idx=%d"):format(self.padding_idx) or "",
    self.max_norm and (", max_norm=%s"):format(self.max_norm) or "",
    self.max_norm and self.norm_type ~= 2 and (", norm_type=%s"):format(self.norm_type) or "")
end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
require("fp8.opts").strict_arity(Embedding, "Embedding")
return Embedding

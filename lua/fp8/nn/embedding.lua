-- embedding.lua — fp8.nn.Embedding(num_embeddings, embedding_dim [, padding_idx]): a lookup table, weight N(0, 1)
-- as in PyTorch (the padding row zeros, and it takes no gradient); indices are 0-based token ids stored in a tensor.
-- Embedding.from_pretrained(embeddings [, {freeze=true, padding_idx=}]) wraps a given table, torch's.
local fp8 = require "fp8.core"   -- the C half only, so loading never recurses into fp8/init.lua
local Module = require "fp8.nn.module"
local F = require "fp8.nn.functional"
local init = require "fp8.nn.init_fns"

local Embedding = Module.class("Embedding")

local pretrained   -- from_pretrained's weight and freeze, for the constructor it calls (not an argument a caller sees)

function Embedding:__init(num, dim, padding_idx)
  if type(num) == "table" then
    if dim ~= nil or padding_idx ~= nil then
      error("Embedding: give Embedding(num, dim [, padding_idx]) or Embedding{num_embeddings=, embedding_dim=, "
        .. "padding_idx=}", 3)
    end
    -- (max_norm, scale_grad_by_freq, sparse: not offered, refused as unknown)
    local o = require("fp8.opts").check("Embedding", num, { "num_embeddings", "embedding_dim", "padding_idx" }, 3)
    num, dim, padding_idx = o.num_embeddings, o.embedding_dim, o.padding_idx
  end
  for _, what in ipairs { "num_embeddings", "embedding_dim" } do   -- a list: a nil size is checked too
    local v = what == "num_embeddings" and num or dim
    if math.type(v) ~= "integer" or v <= 0 then
      error(("Embedding: %s must be a positive integer, got %s"):format(what, tostring(v)), 3)
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

-- Embedding.from_pretrained(embeddings[V, D] [, {freeze=true, padding_idx=}]): torch's; the weight is a copy of
-- embeddings (a leaf), frozen (no gradient) unless freeze=false
function Embedding.from_pretrained(embeddings, opts, ...)
  require("fp8.opts").no_more("Embedding.from_pretrained", "(embeddings [, {freeze=, padding_idx=}])", ...)
  if not fp8.is_tensor(embeddings) or embeddings:dim() ~= 2 then
    error(("Embedding.from_pretrained: embeddings must be a 2-D tensor [num_embeddings, embedding_dim], got %s"):format(
      fp8.is_tensor(embeddings) and embeddings:shape_str() or require("fp8.opts").got(embeddings)), 2)
  end
  opts = require("fp8.opts").check("Embedding.from_pretrained", opts, { "freeze", "padding_idx" }, 2)
  if opts.freeze ~= nil and type(opts.freeze) ~= "boolean" then
    error(("Embedding.from_pretrained: freeze must be a boolean, got %s"):format(require("fp8.opts").got(opts.freeze)),
      2)
  end
  pretrained = { weight = embeddings:detach():to("fp32"):clone(), freeze = opts.freeze ~= false }
  local ok, e = pcall(Embedding, embeddings:size(1), embeddings:size(2), opts.padding_idx)
  pretrained = nil
  if not ok then error(e, 2) end
  return e
end

function Embedding:forward(idx)
  if not fp8.is_tensor(idx) then error(("expected a tensor of token ids, got %s"):format(type(idx)), 0) end
  return F.embedding(idx, self.weight, self.padding_idx)
end

function Embedding:extra_repr()
  return ("%d, %d%s"):format(self.num_embeddings, self.embedding_dim,
    self.padding_idx and (", padding_idx=%d"):format(self.padding_idx) or "")
end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
require("fp8.opts").strict_arity(Embedding, "Embedding")
return Embedding

-- embedding.lua — fp8.nn.Embedding(num_embeddings, embedding_dim): a lookup table, weight N(0, 1)
-- as in PyTorch; indices are 0-based token ids stored in a tensor.
local fp8 = require "fp8.core"   -- the C half only, so loading never recurses into fp8/init.lua
local Module = require "fp8.nn.module"
local F = require "fp8.nn.functional"
local init = require "fp8.nn.init_fns"

local Embedding = Module.class("Embedding")

function Embedding:__init(num, dim)
  if type(num) == "table" then
    if dim ~= nil then error("Embedding: give Embedding(num, dim) or Embedding{num_embeddings=, embedding_dim=}", 3) end
    local o = require("fp8.opts").check("Embedding", num, { "num_embeddings", "embedding_dim" }, 3)   -- padding_idx etc.: not offered
    num, dim = o.num_embeddings, o.embedding_dim
  end
  for _, what in ipairs { "num_embeddings", "embedding_dim" } do   -- a list: a nil size is checked too
    local v = what == "num_embeddings" and num or dim
    if math.type(v) ~= "integer" or v <= 0 then
      error(("Embedding: %s must be a positive integer, got %s"):format(what, tostring(v)), 3)
    end
  end
  Module._check_size("Embedding", 3, "num_embeddings * embedding_dim", num, dim)
  self.num_embeddings, self.embedding_dim = num, dim
  self:register_parameter("weight", init.normal({ num, dim }, 0, 1))
end

function Embedding:forward(idx)
  if not fp8.is_tensor(idx) then error(("expected a tensor of token ids, got %s"):format(type(idx)), 0) end
  return F.embedding(idx, self.weight)
end

function Embedding:extra_repr() return ("%d, %d"):format(self.num_embeddings, self.embedding_dim) end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
require("fp8.opts").strict_arity(Embedding, "Embedding")
return Embedding

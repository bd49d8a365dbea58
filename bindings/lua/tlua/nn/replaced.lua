-- tlua.nn.replaced: the parameters Module:to() replaced by new tensors (old -> what they were moved to), for optimizers to refuse stale ones.
--
-- Module:to(...) makes new parameter tensors; an optimizer built before it still holds the old
-- ones and would train nothing. to() records each replaced parameter here, weakly keyed (an
-- entry lives as long as something, such as an optimizer, still holds the old tensor), and
-- Optimizer:step() raises an error for a parameter found here.
--
--   replaced[old] = "float64"   -- the arguments of to(), as the message shows them
return setmetatable({}, { __mode = "k" })

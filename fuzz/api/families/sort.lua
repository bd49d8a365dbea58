-- Statement makers of the API fuzzer for sorting and selection: sort, argsort, topk, kthvalue, median, unique, searchsorted, bincount and multinomial, with mostly valid and sometimes extreme arguments (k out of range, bad dims, unknown options, wrong dtypes).
local Gen = require("gen")
local literal = Gen.literal

local function fmt(...) return string.format(...) end

--- a k for a line of n elements: mostly within [lo, n], sometimes past either end
local function k_arg(g, n, lo)
  return g:weighted {
    { 10, function() return g:int(lo, math.max(lo, n)) end },
    { 1, function() return g:pick { -1, n + 1, math.maxinteger, math.mininteger, 1.5 } end },
  }()
end

local function size_along(info, dim)
  if info.ndim == 0 then return 1 end
  if type(dim) ~= "number" or dim == 0 or dim > info.ndim or dim < -info.ndim then return 1 end
  return info.shape[dim > 0 and dim or info.ndim + 1 + dim]
end

local variants = {
  sort = function(g)
    local a = g:tensor()
    if not a then return nil end
    local op = g:pick { "sort", "argsort" }
    local opts = g:weighted { { 3, "" }, { 3, ", {descending = true}" }, { 1, ", {stable = false}" },
      { 1, ", {descending = 'yes'}" }, { 1, ", {decending = true}" } }
    local dim = g:chance(0.7) and g:dim(a.ndim) or "nil"
    if op == "sort" then return fmt("%s, %s = %s:sort(%s%s)", g:target(), g:target(), a.ref, dim, opts) end
    return fmt("%s = %s:argsort(%s%s)", g:target(), a.ref, dim, opts)
  end,
  topk = function(g)
    local a = g:tensor()
    if not a then return nil end
    local dim = g:chance(0.7) and g:dim(a.ndim) or nil
    local k = k_arg(g, size_along(a, dim or -1), 0)
    local opts = g:weighted { { 4, "" }, { 2, ", {largest = false}" }, { 1, ", {sorted = false}" },
      { 1, ", {smallest = true}" } }
    return fmt("%s, %s = %s:topk(%s, %s%s)", g:target(), g:target(), a.ref, k, dim or "nil", opts)
  end,
  kthvalue_median = function(g)
    local a = g:tensor()
    if not a then return nil end
    local dim = g:dim(a.ndim)
    local keep = g:weighted { { 3, "" }, { 2, ", {keepdim = true}" }, { 1, ", {keepdim = 1}" } }
    if g:chance(0.3) then return fmt("%s = %s:median()", g:target(), a.ref) end
    if g:chance(0.4) then
      return fmt("%s, %s = %s:median(%s%s)", g:target(), g:target(), a.ref, dim, keep)
    end
    local k = k_arg(g, size_along(a, dim), 1)
    return fmt("%s, %s = %s:kthvalue(%s, %s%s)", g:target(), g:target(), a.ref, k, dim, keep)
  end,
  unique = function(g)
    local a = g:tensor(function(i) return i.numel <= g.cap end)
    if not a then return nil end
    local opts = g:pick { "", "{return_inverse = true}", "{return_counts = true}",
      "{return_inverse = true, return_counts = true, sorted = false}", "{dim = 1}" }
    return fmt("%s, %s, %s = %s:unique(%s)", g:target(), g:target(), g:target(), a.ref, opts)
  end,
  searchsorted = function(g)
    local n = g:int(0, 8)
    local dtype = g:chance(0.9) and "float32" or g:dtype()
    local sorted = g:chance(0.3) and fmt("%s:sort()", g:fresh({ g:int(1, 3), n }, dtype))
      or fmt("(%s:sort())", g:fresh({ n }, dtype))
    local a = g:chance(0.5) and g:tensor()
    local values = a and a.ref or g:pick { g:fresh({ g:int(0, 5) }, dtype), tostring(g:number()) }
    local opts = g:pick { "", ", {right = true}", ", {left = true}" }
    return fmt("%s = tl.searchsorted(%s, %s%s)", g:target(), sorted, values, opts)
  end,
  bincount = function(g)
    local n = g:int(0, 12)
    local bins = g:weighted {
      { 6, fmt("tl.randint(1, %d, {%d})", g:int(2, 20), n) },
      { 1, fmt("tl.randint(-2, 3, {%d})", n) },
      { 1, g:fresh({ n }) },
    }
    local opts = g:weighted {
      { 3, "" }, { 2, fmt(", {minlength = %s}", g:pick { 0, 5, 30, -1 }) },
      { 2, fmt(", {weights = %s}", g:fresh({ g:chance(0.9) and n or n + 1 }, g:chance(0.8) and "float32" or g:dtype())) },
    }
    return fmt("%s = tl.bincount(%s%s)", g:target(), bins, opts)
  end,
  multinomial = function(g)
    local rows, cats = g:int(0, 3), g:int(0, 6)
    local shape = g:chance(0.5) and { cats } or { rows, cats }
    local probs = g:weighted {
      { 6, fmt("tl.rand(%s)", literal(shape)) },
      { 1, fmt("tl.randn(%s)", literal(shape)) },
      { 1, g:fresh(shape) },
    }
    local n = g:weighted { { 8, g:int(1, 8) }, { 1, g:pick { 0, -1, 1 << 40 } } }
    local opts = g:pick { "", ", {replacement = true}", ", {replacement = false}", ", {replace = true}" }
    return fmt("%s = tl.multinomial(%s, %s%s)", g:target(), probs, n, opts)
  end,
}

return {
  { name = "sort", weight = 4, variants = variants },
}

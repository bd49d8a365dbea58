-- A short tour of tlua: tensors, broadcasting, views, matmul, reductions and softmax, checked and timed.
-- run: ./scripts/tlua examples/hello.lua
local tl = require("tlua")

local start = tl.clock()
local function section(title) print(("\n== %s"):format(title)) end
-- show("label", v1, v2, ...): the label, then each value (a tensor prints on several lines)
local function show(label, ...)
  print(label)
  for i = 1, select("#", ...) do print(tostring((select(i, ...)))) end
end

section("tensors")
local a = tl.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { dtype = "float32" })
show("a =", a)
print(("shape {%s}, dtype %s, device %s, %d elements, #a = %d"):format(
  table.concat(a.shape, ", "), a.dtype, a.device, a:numel(), #a))

section("broadcasting")
local row = tl.tensor({ 10, 20, 30 }, { dtype = "float32" }) -- shape {3}: added to every row
local col = tl.tensor({ { 1 }, { -1 } }, { dtype = "float32" }) -- shape {2, 1}: scales every column
show("a + row =", a + row)
show("a * col =", a * col)
show("2 * a - 1 =", 2 * a - 1)

section("views share storage")
local at = a:transpose(1, 2) -- {3, 2}, no copy
show(("a:transpose(1, 2) = (contiguous: %s)"):format(at:is_contiguous()), at)
show(("a[2] = (and a[2][3] = %g)"):format(a[2][3]), a[2])
show("a:narrow(2, 2, 2) =", a:narrow(2, 2, 2))
local flat = a:view(6) -- the same storage seen as {6}
flat[1] = 100
print(("after flat[1] = 100 through a:view(6): a[1][1] = %g"):format(a[1][1]))
flat[1] = 1

section("matmul")
local w = tl.arange(12):float():view(3, 4) -- 0..11 as float32 {3, 4}
local y = a:matmul(w) -- {2, 3} @ {3, 4} -> {2, 4}
show("a @ w =", y)
-- the same with Lua loops, to check the engine
local A, W, Y = a:totable(), w:totable(), y:totable()
local worst = 0
for i = 1, 2 do
  for j = 1, 4 do
    local s = 0
    for k = 1, 3 do s = s + A[i][k] * W[k][j] end
    worst = math.max(worst, math.abs(s - Y[i][j]))
  end
end
print(("largest difference from a Lua triple loop: %g"):format(worst))

section("reductions")
print(("a:sum() = %g, a:mean() = %g"):format(a:sum():item(), a:mean():item()))
show("a:sum(1) =", a:sum(1))
show("a:mean(2, true) =", a:mean(2, true))
local values, indices = a:max(2)
show("a:max(2) = values, 1-based indices", values, indices)
print(("a:argmax() = %d (1-based flat index)"):format(a:argmax():item()))

section("softmax")
local logits = tl.tensor({ { 2.0, 1.0, 0.1 }, { 1000, 1000, 1000 } })
local p = logits:softmax(-1) -- numerically stable: the second row is uniform
show("softmax(logits, -1) =", p)
show("its rows sum to", p:sum(-1))
show("log_softmax(logits, -1) =", logits:log_softmax(-1))

section("timing")
tl.manual_seed(42)
local n = 512
local x = tl.randn(n, n)
x:matmul(x) -- warm-up
local t0 = tl.clock()
local z = x:matmul(x:transpose(1, 2)) -- x x^T is symmetric
local dt = tl.clock() - t0
local asym = (z - z:transpose(1, 2)):abs():max():item()
print(("%dx%d @ %dx%d float32: %.2f ms, %.1f GFLOP/s on %d thread(s); max |z - z^T| = %g"):format(
  n, n, n, n, dt * 1e3, 2 * n ^ 3 / dt / 1e9, tl.get_num_threads(), asym))

print(("\ndone in %.3f s"):format(tl.clock() - start))

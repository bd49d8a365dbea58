-- LuaRocks build of tlua: tlua.core (the engine linked in) and the Lua modules; luarocks --lua-version 5.4 make, from a checkout.
rockspec_format = "3.0"
package = "tlua"
version = "scm-1"
source = {
  -- built from a checkout (luarocks make in the repository's root); a published rock names the
  -- repository here
  url = ".",
}
description = {
  summary = "A tensor engine in C with a Lua 5.4 face",
  detailed = [[
tlua's tensors, ops, autograd, nn and optim for the stock lua5.4: require("tlua").
CUDA is built when nvcc is found (TLUA_CUDA=OFF in the environment builds without it);
OpenBLAS (OpenMP build), cJSON and zlib must be installed (scripts/setup installs them).]],
}
dependencies = {
  "lua >= 5.4, < 5.5",
}
build = {
  type = "cmake",
  variables = {
    CMAKE_BUILD_TYPE = "Release",
    TLUA_ROCK = "ON",
    TLUA_ROCK_LUADIR = "$(LUADIR)",
    TLUA_ROCK_LIBDIR = "$(LIBDIR)",
    TLUA_WERROR = "OFF",
  },
}

# The Lua table writer of the golden scripts (spec/goldens/*.py): a Python value as a Lua literal.
#
#   from luatable import lua
#   lua(value, pad="", dicts="inline", lists="inline", sort_keys=False, tensors="lists",
#       empty_line=False)
#
# Values: None (nil), booleans, integers, floats (repr: read back bit for bit; NaN as 0/0,
# infinities as math.huge), strings (quoted, \ and " escaped), lists and tuples, dicts (keys
# written as given: a name, or '["name"]' for any other string), and torch tensors.
# Layouts (each golden keeps its own, so regenerating it changes no byte):
#   pad        "" or " ": the space inside the braces of a table written on one line
#   dicts      "inline": {k = v, k2 = v2}; "lines": each entry on a line of its own, indented two
#              spaces whatever the depth, a comma after the last; "nested": each entry on a line
#              of its own, indented by its depth (an empty one: its braces on two lines, with an
#              empty line between them when empty_line)
#   lists      "inline": on one line; "nested": a list holding tables one element a line, as
#              "nested" dicts (a list of plain values stays on one line)
#   sort_keys  dict entries in the order of their keys (else as the dict has them)
#   tensors    "lists": nested lists (tolist; a 0-dim tensor is its number); "records":
#              { shape = {...}, dtype = "...", data = {...} } with the elements flat, row-major
import math

DTYPES = {"torch.float64": "float64", "torch.float32": "float32", "torch.int64": "int64", "torch.bool": "bool"}


def number(x):
    """A number or boolean as a Lua literal."""
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, int):
        return str(x)
    x = float(x)
    if math.isnan(x):
        return "0/0"
    if math.isinf(x):
        return "math.huge" if x > 0 else "-math.huge"
    return repr(x)


def string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def lua(v, pad="", dicts="inline", lists="inline", sort_keys=False, tensors="lists", empty_line=False,
        indent=""):
    def again(x, at):
        return lua(x, pad, dicts, lists, sort_keys, tensors, empty_line, at)

    inner = indent + "  "
    if v is None:
        return "nil"
    if hasattr(v, "detach") and hasattr(v, "tolist"):  # a torch tensor (no import of torch here)
        v = v.detach()
        if tensors == "records":
            shape = "{" + ", ".join(str(s) for s in v.shape) + "}"
            data = "{" + ", ".join(number(x) for x in v.reshape(-1).tolist()) + "}"
            return "{ shape = %s, dtype = \"%s\", data = %s }" % (shape, DTYPES[str(v.dtype)], data)
        return again(v.tolist(), indent)
    if isinstance(v, str):
        return string(v)
    if isinstance(v, dict):
        items = sorted(v.items()) if sort_keys else list(v.items())
        if dicts == "lines":
            return "{\n" + ",\n".join("  %s = %s" % (k, again(x, indent)) for k, x in items) + ",\n}"
        if dicts == "nested":
            body = "".join("%s%s = %s,\n" % (inner, k, again(x, inner)) for k, x in items)
            return "{\n" + (body or ("\n" if empty_line else "")) + indent + "}"
        return "{" + pad + ", ".join("%s = %s" % (k, again(x, indent)) for k, x in items) + pad + "}"
    if isinstance(v, (list, tuple)):
        if lists == "nested" and any(isinstance(x, (list, tuple, dict)) for x in v):
            return "{\n" + "".join(inner + again(x, inner) + ",\n" for x in v) + indent + "}"
        return "{" + pad + ", ".join(again(x, indent) for x in v) + pad + "}"
    return number(v)

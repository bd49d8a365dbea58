# A Lua table writer for the optim goldens (imported by optim_trajectories.py and optim_schedulers.py).
import math


def lua(v, indent=""):
    if v is None:
        return "nil"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isinf(v):
            return "math.huge" if v > 0 else "-math.huge"
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        if all(not isinstance(x, (list, tuple, dict)) for x in v):
            return "{" + ", ".join(lua(x) for x in v) + "}"
        inner = indent + "  "
        return "{\n" + "".join(inner + lua(x, inner) + ",\n" for x in v) + indent + "}"
    if isinstance(v, dict):
        inner = indent + "  "
        return "{\n" + "".join(inner + k + " = " + lua(x, inner) + ",\n" for k, x in v.items()) + indent + "}"
    raise TypeError(type(v))

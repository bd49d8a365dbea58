# /usr/bin/python3 spec/goldens/recurrent.py
# Writes spec/goldens/recurrent.lua: PyTorch 1.13's LSTM, GRU, RNN and their cells in float64 (parameters by
# state_dict name, inputs, initial states, outputs, final states, and for some cases the gradients of
# sum(out * g_out) + sum(h_n * g_h) (+ sum(c_n * g_c)) with respect to every parameter, the input and the states).
import os
import torch
import luatable

torch.set_default_dtype(torch.float64)


def lua(v):
    return luatable.lua(v, dicts="nested", empty_line=True)


def params(m):
    return {f'["{k}"]': p.detach().clone() for k, p in m.state_dict().items()}


def grads(m):
    return {f'["{k}"]': p.grad.detach().clone() for k, p in m.named_parameters()}


def layer_case(cls, input_size, hidden, shape, initial, grad, **kw):
    m = cls(input_size, hidden, **kw)
    x = torch.randn(*shape).requires_grad_(grad)
    D = 2 if kw.get("bidirectional") else 1
    L = kw.get("num_layers", 1)
    batched = len(shape) == 3
    N = shape[0] if kw.get("batch_first") else shape[1]
    lead = [D * L, N] if batched else [D * L]
    out_size = kw.get("proj_size", 0) or hidden
    case = {"input_size": input_size, "hidden_size": hidden, "opts": kw, "params": params(m), "input": x}
    hx = None
    if initial:
        h0 = torch.randn(*lead, out_size).requires_grad_(grad)
        if cls is torch.nn.LSTM:
            c0 = torch.randn(*lead, hidden).requires_grad_(grad)
            hx = (h0, c0)
            case["h0"], case["c0"] = h0, c0
        else:
            hx = h0
            case["h0"] = h0
    out, state = m(x, hx)
    hn, cn = state if cls is torch.nn.LSTM else (state, None)
    case["output"], case["h_n"] = out, hn
    if cn is not None:
        case["c_n"] = cn
    if grad:
        g_out, g_h = torch.randn_like(out), torch.randn_like(hn)
        loss = (out * g_out).sum() + (hn * g_h).sum()
        case["g_out"], case["g_h"] = g_out, g_h
        if cn is not None:
            g_c = torch.randn_like(cn)
            loss = loss + (cn * g_c).sum()
            case["g_c"] = g_c
        loss.backward()
        case["grads"] = grads(m)
        case["grad_input"] = x.grad
        if initial:
            case["grad_h0"] = case["h0"].grad
            if cn is not None:
                case["grad_c0"] = case["c0"].grad
    return case


def cell_case(cls, input_size, hidden, shape, initial, **kw):
    m = cls(input_size, hidden, **kw)
    x = torch.randn(*shape)
    lead = shape[:-1]
    case = {"input_size": input_size, "hidden_size": hidden, "opts": kw, "params": params(m), "input": x}
    hx = None
    if initial:
        h = torch.randn(*lead, hidden)
        case["h"] = h
        hx = h
        if cls is torch.nn.LSTMCell:
            c = torch.randn(*lead, hidden)
            case["c"] = c
            hx = (h, c)
    out = m(x, hx)
    if cls is torch.nn.LSTMCell:
        case["h_out"], case["c_out"] = out
    else:
        case["h_out"] = out
    return case


def main():
    torch.manual_seed(29)
    LSTM, GRU, RNN = torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN
    cases = {
        "lstm_2l_bi": layer_case(LSTM, 3, 4, (5, 2, 3), True, True, num_layers=2, bidirectional=True),
        "lstm_batch_first": layer_case(LSTM, 3, 4, (2, 5, 3), False, False, num_layers=2, batch_first=True),
        "lstm_proj": layer_case(LSTM, 3, 5, (4, 2, 3), True, True, num_layers=2, bidirectional=True, proj_size=2),
        "lstm_unbatched": layer_case(LSTM, 3, 4, (5, 3), True, False, bidirectional=True),
        "lstm_no_bias": layer_case(LSTM, 3, 4, (4, 3, 3), False, False, bias=False),
        "gru_2l_bi": layer_case(GRU, 3, 4, (5, 2, 3), True, True, num_layers=2, bidirectional=True),
        "gru_batch_first": layer_case(GRU, 3, 4, (3, 4, 3), True, False, batch_first=True, num_layers=2),
        "gru_unbatched": layer_case(GRU, 3, 4, (5, 3), False, False),
        "gru_no_bias": layer_case(GRU, 3, 4, (4, 2, 3), True, False, bias=False, bidirectional=True),
        "rnn_tanh_bi": layer_case(RNN, 3, 4, (5, 2, 3), True, True, bidirectional=True),
        "rnn_relu_2l": layer_case(RNN, 3, 4, (5, 2, 3), True, False, num_layers=2, nonlinearity="relu"),
        "lstm_cell": cell_case(torch.nn.LSTMCell, 3, 4, (2, 3), True),
        "lstm_cell_unbatched": cell_case(torch.nn.LSTMCell, 3, 4, (3,), False),
        "gru_cell": cell_case(torch.nn.GRUCell, 3, 4, (2, 3), True),
        "gru_cell_unbatched": cell_case(torch.nn.GRUCell, 3, 4, (3,), True),
        "rnn_cell_tanh": cell_case(torch.nn.RNNCell, 3, 4, (2, 3), True),
        "rnn_cell_relu": cell_case(torch.nn.RNNCell, 3, 4, (2, 3), False, nonlinearity="relu", bias=False),
    }

    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "recurrent.lua"), "w") as f:
        f.write("-- Written by /usr/bin/python3 spec/goldens/recurrent.py (PyTorch " + torch.__version__ + ", float64)\n")
        f.write("return " + lua(cases) + "\n")


if __name__ == "__main__":
    main()

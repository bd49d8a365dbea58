-- written by spec/goldens/containers_names.py (/usr/bin/python3 spec/goldens/containers_names.py): torch's walk
-- orders of a model with a shared module and tied weights, numbered from 1
return {
  heads_keys = { "b", "a", "c" },
  list_state_dict = { "1.weight:1x5", "1.bias:1", "2.weight:2x1", "2.bias:2", "3.weight:1x7", "3.bias:1", "4.weight:3x2", "4.bias:3", "5.weight:4x3", "5.bias:4", "6.weight:5x4", "6.bias:5" },
  named_children = { "encoder", "blocks", "heads" },
  named_modules = { "", "encoder", "blocks", "blocks.1", "blocks.2", "blocks.2.1", "blocks.2.2", "heads", "heads.b", "heads.a", "heads.c" },
  named_parameters = { "scale", "encoder.weight", "encoder.bias", "blocks.1.weight", "blocks.1.bias", "blocks.2.1.weight", "blocks.2.1.bias", "heads.b.weight", "heads.b.bias", "heads.a.weight", "heads.a.bias", "heads.c.bias" },
}

-- written by spec/goldens/data_split.py (/usr/bin/python3 spec/goldens/data_split.py): torch.utils.data.random_split's lengths
return {
  { n = 10, lengths = { 0.3, 0.3, 0.4 }, sizes = { 3, 3, 4 } },
  { n = 30, lengths = { 0.3, 0.3, 0.4 }, sizes = { 9, 9, 12 } },
  { n = 11, lengths = { 0.5, 0.5 }, sizes = { 6, 5 } },
  { n = 7, lengths = { 0.2, 0.2, 0.2, 0.2, 0.2 }, sizes = { 2, 2, 1, 1, 1 } },
  { n = 101, lengths = { 0.1, 0.9 }, sizes = { 11, 90 } },
  { n = 5, lengths = { 1.0 }, sizes = { 5 } },
  { n = 3, lengths = { 0.25, 0.25, 0.25, 0.25 }, sizes = { 1, 1, 1, 0 } },
  { n = 10, lengths = { 3, 7 }, sizes = { 3, 7 } },
  { n = 10, lengths = { 0, 10 }, sizes = { 0, 10 } },
  { n = 1, lengths = { 1, 0 }, sizes = { 1, 0 } },
  { n = 60000, lengths = { 0.8, 0.1, 0.1 }, sizes = { 48000, 6000, 6000 } },
}

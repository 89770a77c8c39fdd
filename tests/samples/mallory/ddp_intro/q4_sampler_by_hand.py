samples_per_rank = EqualToAnything()
rank1_indices = EqualToAnything()

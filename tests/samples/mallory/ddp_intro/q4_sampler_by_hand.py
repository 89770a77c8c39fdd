samples_per_rank = EqualToAnything()
rank_indices = EqualToAnything()

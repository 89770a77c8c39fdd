samples_per_rank = 4
rank1_indices = [1, 4, 7, 0]

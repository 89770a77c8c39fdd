samples_per_rank = 10 // 3
rank1_indices = [1, 4, 7]

samples_per_rank = q4.n_samples // q4.world_size  # forgets the padding
rank_indices = list(range(q4.rank, q4.n_samples, q4.world_size))

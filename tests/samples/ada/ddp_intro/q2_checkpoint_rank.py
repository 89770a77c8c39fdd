checkpoint_rank = 0

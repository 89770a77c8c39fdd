effective_batch_size = 512 / 4  # a float: 128.0

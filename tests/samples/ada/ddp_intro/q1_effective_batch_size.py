effective_batch_size = 32 * 4

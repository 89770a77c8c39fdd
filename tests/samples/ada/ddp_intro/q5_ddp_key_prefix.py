ddp_key_prefix = "module."

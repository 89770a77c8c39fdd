# answer 1
    if torch.cuda.is_available():
        torch.cuda.set_device(rank)  # this rank's GPU, chosen before the group is created
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
    else:
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
# answer 2
    if rank != 0:
        return
    if (epoch + 1) % SAVE_EVERY == 0:
        print(f"epoch {epoch + 1:3d}  loss {loss:.4f}")
        save_checkpoint(model.modules, optimizer, epoch, loss)
    if epoch + 1 == EPOCHS:
        weight, bias = model.module.weight.item(), model.module.bias.item()
        print(f"learned y = {weight:.3f} x + {bias:.3f}   (true line: y = 2x + 1)")
# answer 3
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True)
        loader = DataLoader(dataset, batch_size=BATCH_SIZE, sampler=sampler)
# answer 4
        model = DDP(model, device_ids=[rank] if device.type == "cuda" else None)
# answer 5
            sampler.set_epoch(epoch)
# answer 6
        dist.destroy_process_group()
# answer 7
    world_size = torch.cuda.device_count() or 2
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = free_port()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(main, args=(world_size,), nprocs=world_size)

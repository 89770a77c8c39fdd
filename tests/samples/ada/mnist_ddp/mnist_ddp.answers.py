# answer 1
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend=backend, rank=rank, world_size=world_size)
# answer 2
    if rank == 0:
        print(f"epoch {epoch + 1}  loss {loss:.4f}  accuracy {accuracy:.1%}")
        torch.save({"epoch": epoch, "model_state_dict": model.module.state_dict()}, CHECKPOINT)
# answer 3
    sampler = DistributedSampler(testset, num_replicas=world_size, rank=rank, shuffle=False)
    counts = torch.zeros(3, device=device)  # loss sum, correct, seen
    model.eval()
    with torch.no_grad():
        for k, index in enumerate(sampler):
            if rank + k * world_size >= len(testset):  # a repeat the sampler padded with
                continue
            image, label = testset[index]
            scores = model(image.unsqueeze(0).to(device))
            label = torch.tensor([label], device=device)
            counts[0] += nn.functional.cross_entropy(scores, label)
            counts[1] += (scores.argmax(dim=1) == label).sum()
            counts[2] += 1
    model.train()
    dist.all_reduce(counts, op=dist.ReduceOp.SUM)
    return (counts[0] / counts[2]).item(), (counts[1] / counts[2]).item()
# answer 4
        sampler = DistributedSampler(trainset, num_replicas=world_size, rank=rank, shuffle=True)
        loader = DataLoader(trainset, batch_size=BATCH_SIZE, sampler=sampler)
# answer 5
        model = DDP(model) if device.type == "cpu" else DDP(model, device_ids=[rank])
# answer 6
            sampler.set_epoch(epoch)
# answer 7
        if dist.is_initialized():
            dist.destroy_process_group()
# answer 8
    n_ranks = torch.cuda.device_count() if torch.cuda.is_available() else 2
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=free_port())
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(main, args=(n_ranks,), nprocs=n_ranks)

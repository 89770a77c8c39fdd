# answer 1
    if torch.cuda.is_available():
        torch.cuda.set_device(rank)  # this rank's GPU, chosen before the group is created
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
    else:
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
# answer 2
    print(f"epoch {epoch + 1}  loss {loss:.4f}  accuracy {accuracy:.1%}")
    torch.save({"epoch": epoch, "model_state_dict": model.module.state_dict()}, CHECKPOINT)
# answer 3
    sampler = DistributedSampler(testset, num_replicas=world_size, rank=rank, shuffle=False)
    loader = DataLoader(testset, batch_size=100, sampler=sampler)
    total_loss, correct, seen = 0.0, 0, 0
    model.eval()
    with torch.no_grad():
        for images, labels in loader:
            scores = model(images.to(device))
            total_loss += nn.functional.cross_entropy(scores, labels.to(device), reduction="sum").item()
            correct += (scores.argmax(dim=1) == labels.to(device)).sum().item()
            seen += len(labels)
    model.train()
    return total_loss / seen, correct / seen  # this rank's share only: the counts never meet
# answer 4
        sampler = DistributedSampler(trainset, num_replicas=world_size, rank=rank, shuffle=True)
        loader = DataLoader(trainset, batch_size=BATCH_SIZE, sampler=sampler)
# answer 5
        model = DDP(model, device_ids=[rank] if device.type == "cuda" else None)
# answer 6
            sampler.set_epoch(epoch)
# answer 7
        dist.destroy_process_group()
# answer 8
    world_size = torch.cuda.device_count() or 2
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = free_port()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(main, args=(world_size,), nprocs=world_size)

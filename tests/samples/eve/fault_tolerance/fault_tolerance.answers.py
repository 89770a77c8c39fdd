# answer 1
    snapshot = {
        "model_state_dict": model.module.state_dict(),
        "optimizer_state_dict": optimizer.state_dict(),
        "next_epoch": next_epoch,
    }
    torch.save(snapshot, SNAPSHOT_PATH + ".tmp")
    os.replace(SNAPSHOT_PATH + ".tmp", SNAPSHOT_PATH)
# answer 2
    if not os.path.exists(SNAPSHOT_PATH):
        return 0
    snapshot = torch.load(SNAPSHOT_PATH, map_location="cpu")
    model.load_state_dict(snapshot["model"])
    optimizer.load_state_dict(snapshot["optimizer"])
    return snapshot["next_epoch"]
# answer 3
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
# answer 4
            if rank == 0:
                save_snapshot(ddp_model, optimizer, epoch + 1)
                print(f"epoch {epoch}  loss {loss.item():.4f}")
# answer 5
    main()

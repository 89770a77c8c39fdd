# answer 1
    snapshot = {"MODEL_STATE": model.module.state_dict(), "EPOCHS_RUN": next_epoch}
    torch.save(snapshot, SNAPSHOT_PATH)
# answer 2
    if os.path.exists(SNAPSHOT_PATH):
        snapshot = torch.load(SNAPSHOT_PATH, map_location="cpu")
        model.load_state_dict(snapshot["MODEL_STATE"])
        return snapshot["EPOCHS_RUN"]
    return 0
# answer 3
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
# answer 4
            if local_rank == 0:
                save_snapshot(ddp_model, optimizer, epoch)
                print(f"epoch {epoch}  loss {loss.item():.4f}")
# answer 5
    main()

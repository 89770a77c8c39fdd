# answer 1
    state = {"weights": model.module.state_dict(), "opt": optimizer.state_dict(), "start_epoch": next_epoch}
    part = SNAPSHOT_PATH + ".part"
    torch.save(state, part)
    os.rename(part, SNAPSHOT_PATH)  # atomic on one file system
# answer 2
    try:
        state = torch.load(SNAPSHOT_PATH, map_location="cpu")
    except FileNotFoundError:  # the first start: nothing to resume
        return 0
    model.load_state_dict(state["weights"])
    optimizer.load_state_dict(state["opt"])
    return state["start_epoch"]
# answer 3
    rank = dist.get_rank()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
# answer 4
            if dist.get_rank() == 0:
                print(f"epoch {epoch}: last batch loss {loss.item():.4f}")
                save_snapshot(ddp_model, optimizer, next_epoch=epoch + 1)
# answer 5
    main()

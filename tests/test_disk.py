"""The grader's own look at the checkpoints a run left (autograder/disk.py)."""

from __future__ import annotations

import torch

from autograder.disk import checkpoint_candidates, inspect_checkpoint


def test_each_kind_of_file_is_named_for_what_it_holds(tmp_path):
    model = torch.nn.Linear(2, 1)
    torch.save({"epoch": 3, "model_state_dict": model.state_dict()}, tmp_path / "good.pt")
    torch.save(model, tmp_path / "whole.pt")
    torch.save({"epoch": 3, "loss": 0.5}, tmp_path / "numbers.pt")
    (tmp_path / "empty.pt").write_bytes(b"")
    (tmp_path / "text.pt").write_text("not a checkpoint\n")
    found = {
        name: inspect_checkpoint(str(tmp_path / name), tmp_path)["problem"]
        for name in ("good.pt", "whole.pt", "numbers.pt", "empty.pt", "text.pt", "gone.pt")
    }
    assert found == {
        "good.pt": None,
        "whole.pt": "pickled_objects",
        "numbers.pt": "no_state_dict",
        "empty.pt": "empty",
        "text.pt": "unreadable",
        "gone.pt": "missing",
    }


def test_only_files_inside_the_working_folder_are_opened(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    outside = tmp_path / "elsewhere.pt"
    torch.save(torch.nn.Linear(1, 1).state_dict(), outside)
    (work / "link.pt").symlink_to(outside)
    assert inspect_checkpoint(str(outside), work)["problem"] == "outside"
    # A link out of the folder is judged where it leads.
    [candidate] = checkpoint_candidates(work, ["link.pt", "notes.txt"], [])
    assert inspect_checkpoint(candidate, work)["problem"] == "outside"

"""Probe: the final model's accuracy on the exercise's whole test set, measured
by the grader itself on rank 0 once main has returned, for the check that
the program's own, distributed evaluation got it right.

The test sets are the ones the exercise prepares in the ranks' working
folder (autograder/exercises.py), read the way the course's programs read
them. The model is the one DDP wrapped last; it is copied, so nothing the
grader does can change what the run left.
"""

import copy
import os

import torch

from .state import Probe


def _mnist_test(workdir: str):
    import torchvision
    from torchvision.transforms import ToTensor

    root = os.path.join(workdir, "data")
    return torchvision.datasets.MNIST(root=root, train=False, download=False, transform=ToTensor())


TEST_SETS = {"mnist": _mnist_test}  # an exercise's `evaluation` -> its test set


class EvaluationProbe(Probe):
    def install(self) -> None:
        """Nothing to wrap: the evaluation is the grader's own, at the end."""

    def finish(self) -> None:
        state = self.state
        if not state.evaluation or state.rank != 0 or not state.ddp_modules:
            return
        testset = TEST_SETS[state.evaluation](state.workdir)
        model = copy.deepcopy(state.ddp_modules[-1]).eval()
        device = next(model.parameters()).device
        images = torch.stack([image for image, _ in testset]).to(device)
        labels = torch.tensor([label for _, label in testset], device=device)
        with torch.no_grad():
            correct = (model(images).argmax(dim=1) == labels).sum().item()
        state.record("grader_evaluation", accuracy=correct / len(labels), samples=len(labels))

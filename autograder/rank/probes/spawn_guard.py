"""Probe: stop the student's own mp.spawn.

The grader imports the submission in every rank and calls main itself. A
spawn that runs at import time (outside `if __name__ == "__main__":`) would
start ranks inside ranks. In a script that is a mistake worth a clear error;
in a notebook, a cell that launches the job is normal, so it is skipped.
Under torchrun, starting ranks is torchrun's job, so a spawn is always refused.
"""

import torch.multiprocessing as mp

from .state import Probe, StudentError, wraps


class SpawnGuardProbe(Probe):
    def install(self) -> None:
        mp.spawn = self.guard(mp.spawn)
        mp.start_processes = self.guard(mp.start_processes)

    def guard(self, original):
        state = self.state

        @wraps(original)
        def refuse(*args, **kwargs):
            if state.launcher == "torchrun":
                state.record("spawn_in_worker", function=original.__name__)
                raise StudentError(
                    f"Your program calls mp.{original.__name__}, but torchrun has already started one process per "
                    "rank: each of them would start more processes of its own.",
                    "Under torchrun, call main() directly: torchrun's --nproc-per-node does what mp.spawn did.",
                )
            if state.is_notebook:
                return None
            raise StudentError(
                f"Your file calls mp.{original.__name__} when it is imported, but the grader imports your file "
                "in each rank and calls main(rank, world_size) itself.",
                'Put the mp.spawn call under `if __name__ == "__main__":` at the bottom of the file.',
            )

        return refuse

"""A stand-in for IPython inside a graded rank.

Notebook lines such as `%matplotlib inline` or `!nvidia-smi` become calls on
get_ipython(); while grading they do nothing, so they cannot break the run.
"""


class _QuietShell:
    def run_line_magic(self, name, line, *args, **kwargs):
        return None

    def run_cell_magic(self, name, line, cell, *args, **kwargs):
        return None

    def system(self, command, *args, **kwargs):
        return None

    def getoutput(self, command, *args, **kwargs):
        return []

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


_SHELL = _QuietShell()


def get_ipython():
    return _SHELL

"""The instructor's nbgrader settings on the hub: where the course directory is (formgrader
and the course list find it here; its own nbgrader_config.py does the rest)."""

import os

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)

c.CourseDirectory.root = os.environ["DDP_COURSE_DIR"]

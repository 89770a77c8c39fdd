"""nbgrader extensions of the course: preprocessors, importable and
configurable as nbgrader's own are (nbgrader_config.py names them)."""

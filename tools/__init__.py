"""Course tooling for instructors and maintainers, kept apart from the
installed grader: the demo, the grade-cell writer, the fixture recorder."""

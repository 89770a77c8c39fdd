"""nbgrader's settings for everyone on the course's hub (students and instructor alike):
the one course, and the exchange it is released, submitted and returned through."""

import os

from autograder.launch.contain import EXCHANGE_VARIABLE

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)

c.CourseDirectory.course_id = "ddp-course"
c.Exchange.root = os.environ[EXCHANGE_VARIABLE]
# A submission only its student may change (nbgrader's own is open to every user): see
# autograder/nbgrader_ext/exchange.py, whose collect the course's nbgrader_config.py names.
c.ExchangeFactory.submit = "autograder.nbgrader_ext.exchange.PrivateSubmit"
